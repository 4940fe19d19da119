-module(shop_sup).
-behaviour(supervisor).
-export([start_link/0, init/1]).

start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

init([]) ->
    Load = [#{id => shop_load, start => {shop_load, start_link, []}}
            || application:get_env(shop, load, false)],
    {ok, {#{}, [#{id => shop_store, start => {shop_store, start_link, []}} | Load]}}.
