%%% @doc The "db" layer of the kprof sample application.
%%%
%%% A fixed number of shard processes (`kprof_sample_db_1' ... `_N'), each a
%%% gen_server that owns one ETS table of users and a map of catalogue items.
%%% A user or an item lives in the shard given by `erlang:phash2(Id, N)', so a
%%% request that needs several items fans out to several shards, as a request
%%% to a sharded store would.
%%%
%%% The work here is deliberately ordinary: ETS lookups and counter updates,
%%% map lookups and a little list building. In a flame graph of the sample
%%% application the shards show up as many short stacks under
%%% `gen_server:loop/7' with `ets:lookup/2' or `maps' frames at the leaf.
%%%
%%% Everything is bounded: at most ?MAX_SHARDS shards, ?MAX_USERS users and
%%% ?MAX_ITEMS items in all, at most ?MAX_BATCH items per call, and every
%%% call from a client has a timeout.
-module(kprof_sample_db).
-behaviour(gen_server).

-export([start_link/3, shard_name/1, shard_names/1, get_user/2, get_items/2,
         add_balance/3, shard_stats/1, item_words/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(MAX_SHARDS, 64).
-define(MAX_USERS, 1000000).
-define(MAX_ITEMS, 1000000).
-define(MAX_BATCH, 500).
-define(TIMEOUT, 5000).
-define(ITEMS_PER_USER, 12).

-type user_id() :: non_neg_integer().
-type item_id() :: non_neg_integer().
-type user() :: {user_id(), Name :: binary(), BalanceCents :: integer(),
                 Visits :: non_neg_integer(), Items :: [item_id()]}.
-type item() :: {item_id(), Name :: binary(), PriceCents :: pos_integer(), Tags :: [binary()]}.
-type shards() :: tuple().
-export_type([user_id/0, item_id/0, user/0, item/0, shards/0]).

-record(state, {index :: pos_integer(),
                table :: ets:tid(),
                items :: #{item_id() => item()},
                calls = 0 :: non_neg_integer()}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Starts shard `Index' of `Count', holding its part of `Users' users and
%% `Items' items. Registered as `shard_name(Index)'.
-spec start_link(Index :: pos_integer(), Count :: pos_integer(),
                 {Users :: pos_integer(), Items :: pos_integer()}) ->
          {ok, pid()} | ignore | {error, term()}.
start_link(Index, Count, {Users, Items})
  when is_integer(Index), Index >= 1, Index =< Count, Count =< ?MAX_SHARDS ->
    gen_server:start_link({local, shard_name(Index)}, ?MODULE,
                          {Index, Count, min(Users, ?MAX_USERS), min(Items, ?MAX_ITEMS)}, []).

%% @doc The registered name of shard `Index' (at most ?MAX_SHARDS names exist).
-spec shard_name(Index :: pos_integer()) -> atom().
shard_name(Index) when is_integer(Index), Index >= 1, Index =< ?MAX_SHARDS ->
    list_to_atom("kprof_sample_db_" ++ integer_to_list(Index)).

%% @doc The names of `Count' shards as a tuple, for routing without building
%% atoms per request.
-spec shard_names(Count :: pos_integer()) -> shards().
shard_names(Count) when is_integer(Count), Count >= 1, Count =< ?MAX_SHARDS ->
    list_to_tuple([shard_name(I) || I <- lists:seq(1, Count)]).

%% @doc Looks a user up (and counts the visit).
-spec get_user(shards(), user_id()) -> {ok, user()} | not_found.
get_user(Shards, Id) ->
    gen_server:call(route(Shards, Id), {get_user, Id}, ?TIMEOUT).

%% @doc Fetches items, asking each shard once for its share. Unknown ids are
%% left out; at most ?MAX_BATCH ids are looked at.
-spec get_items(shards(), [item_id()]) -> [item()].
get_items(Shards, Ids) ->
    ByShard = group_by_shard(Shards, lists:sublist(Ids, ?MAX_BATCH), #{}),
    lists:append([gen_server:call(Shard, {get_items, ShardIds}, ?TIMEOUT)
                  || {Shard, ShardIds} <- lists:sort(maps:to_list(ByShard))]).

%% @doc Adds `Cents' (possibly negative) to a user's balance; returns the new
%% balance.
-spec add_balance(shards(), user_id(), integer()) -> {ok, integer()} | not_found.
add_balance(Shards, Id, Cents) when is_integer(Cents) ->
    gen_server:call(route(Shards, Id), {add_balance, Id, Cents}, ?TIMEOUT).

%% @doc Counters of one shard.
-spec shard_stats(atom() | pid()) -> #{atom() => non_neg_integer()}.
shard_stats(Shard) ->
    gen_server:call(Shard, stats, ?TIMEOUT).

%% @doc The words item names are made of (the load generator searches them).
-spec item_words() -> [binary(), ...].
item_words() ->
    [<<"blue">>, <<"red">>, <<"green">>, <<"small">>, <<"large">>, <<"lamp">>, <<"chair">>,
     <<"table">>, <<"shelf">>, <<"oak">>, <<"steel">>, <<"linen">>, <<"vintage">>, <<"modern">>,
     <<"desk">>, <<"sofa">>, <<"rug">>, <<"mirror">>, <<"clock">>, <<"vase">>].

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init({pos_integer(), pos_integer(), pos_integer(), pos_integer()}) -> {ok, #state{}}.
init({Index, Count, Users, Items}) ->
    Table = ets:new(kprof_sample_users, [set, protected, {read_concurrency, true}]),
    Words = list_to_tuple(item_words()),
    Mine = fun(Id) -> erlang:phash2(Id, Count) + 1 =:= Index end,
    ets:insert(Table, [make_user(Id, Items) || Id <- lists:seq(0, Users - 1), Mine(Id)]),
    ItemMap = maps:from_list([{Id, make_item(Id, Words)}
                              || Id <- lists:seq(0, Items - 1), Mine(Id)]),
    {ok, #state{index = Index, table = Table, items = ItemMap}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({get_user, Id}, _From, State = #state{table = T}) ->
    Reply = case ets:lookup(T, Id) of
                [User] ->
                    ets:update_counter(T, Id, {4, 1}),
                    {ok, User};
                [] ->
                    not_found
            end,
    {reply, Reply, count(State)};
handle_call({get_items, Ids}, _From, State = #state{items = Items}) ->
    {reply, lookup_items(Ids, Items, []), count(State)};
handle_call({add_balance, Id, Cents}, _From, State = #state{table = T}) ->
    Reply = case ets:member(T, Id) of
                true -> {ok, ets:update_counter(T, Id, {3, Cents})};
                false -> not_found
            end,
    {reply, Reply, count(State)};
handle_call(stats, _From, State = #state{table = T, items = Items, calls = Calls}) ->
    {reply, #{users => ets:info(T, size), items => map_size(Items), calls => Calls}, State};
handle_call(_Other, _From, State) ->
    {reply, {error, unknown_call}, State}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast(_Msg, State) ->
    {noreply, State}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}}.
handle_info(_Msg, State) ->
    {noreply, State}.

%%% ---------------------------------------------------------------------
%%% Internals

route(Shards, Id) ->
    element(erlang:phash2(Id, tuple_size(Shards)) + 1, Shards).

group_by_shard(_Shards, [], Acc) ->
    Acc;
group_by_shard(Shards, [Id | Rest], Acc) ->
    Shard = route(Shards, Id),
    group_by_shard(Shards, Rest, maps:update_with(Shard, fun(L) -> [Id | L] end, [Id], Acc)).

lookup_items([], _Items, Acc) ->
    lists:reverse(Acc);
lookup_items([Id | Rest], Items, Acc) ->
    case Items of
        #{Id := Item} -> lookup_items(Rest, Items, [Item | Acc]);
        _ -> lookup_items(Rest, Items, Acc)
    end.

count(State = #state{calls = C}) ->
    State#state{calls = C + 1}.

make_user(Id, Items) ->
    Name = iolist_to_binary(["user", integer_to_list(Id)]),
    Owned = [erlang:phash2({Id, K}, Items) || K <- lists:seq(1, ?ITEMS_PER_USER)],
    {Id, Name, 10000 + erlang:phash2(Id, 90000), 0, Owned}.

make_item(Id, Words) ->
    N = tuple_size(Words),
    Pick = fun(Salt) -> element(erlang:phash2({Id, Salt}, N) + 1, Words) end,
    Name = iolist_join([Pick(a), Pick(b), Pick(c)], <<" ">>),
    {Id, Name, 100 + erlang:phash2(Id, 50000), [Pick(t1), Pick(t2)]}.

iolist_join([First | Rest], Sep) ->
    iolist_to_binary([First | [[Sep, W] || W <- Rest]]).
