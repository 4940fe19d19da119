%%% @doc Asks the store for prices without a pause: a busy process to profile.
-module(shop_load).
-export([start_link/0, loop/1]).

start_link() ->
    {ok, spawn_link(?MODULE, loop, [0])}.

loop(N) ->
    _ = shop_store:price(N rem 100),
    ?MODULE:loop(N + 1).
