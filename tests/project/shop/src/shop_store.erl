%%% @doc Prices, computed with some work: the request's time in the server.
-module(shop_store).
-behaviour(gen_server).
-export([start_link/0, price/1]).
-export([init/1, handle_call/3, handle_cast/2]).

start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

price(Item) ->
    gen_server:call(?MODULE, {price, Item}).

init([]) ->
    {ok, #{}}.

handle_call({price, Item}, _From, State) ->
    {reply, compute(Item, 2000, 0), State}.

handle_cast(_, State) ->
    {noreply, State}.

compute(_Item, 0, Acc) -> Acc rem 1000;
compute(Item, N, Acc) -> compute(Item, N - 1, Acc + erlang:phash2({Item, N})).
