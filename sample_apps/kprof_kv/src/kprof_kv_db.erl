%%% @doc The db layer of the key-value example (`kprof_kv').
%%%
%%% Shards `kprof_kv_db_1' ... `_N' (N from `kprof_kv_sup'), gen_servers that
%%% each own a protected ETS table with their share of the keys; a key lives
%%% in the shard given by hashing it. `query/1' is the one entry the handlers
%%% use: it runs in the handler's process and calls the shard with
%%% gen_server:call; the shard spends the `db' delay and does the ETS work.
%%% `get/1', `put/2' and `delete/1' are the same queries spelled out.
%%%
%%% Bounded: at most ?MAX_KEYS keys per shard (a put of a new key into a full
%%% shard is `{error, full}'), keys and values as the parser bounds them, and
%%% every call has a ?TIMEOUT ms timeout.
-module(kprof_kv_db).
-behaviour(gen_server).
-compile({no_auto_import, [get/1, put/2]}).

-export([query/1, get/1, put/2, delete/1, size/0]).
-export([start_link/1, name/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(MAX_SHARDS, 64).
-define(MAX_KEYS, 200000).
-define(TIMEOUT, 3000).

-type query() :: {get, kprof_kv_parser:key()}
               | {put, kprof_kv_parser:key(), kprof_kv_parser:value()}
               | {delete, kprof_kv_parser:key()}.
-type result() :: ok | {ok, kprof_kv_parser:value()} | not_found | {error, full | not_running}.
-export_type([query/0, result/0]).

-record(state, {table :: ets:tid(), queries = 0 :: non_neg_integer()}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Runs one query on the shard that holds its key (tier entry point of
%% the db layer, stable arity 1; called by the handlers, runs in the
%% handler's process and waits for the shard with gen_server:call). A get
%% answers `{ok, Value}' or `not_found', a put `ok' (`{error, full}' for a
%% new key in a full shard), a delete `ok' or `not_found'. Exits like
%% gen_server:call when the shard is down or too slow.
-spec query(query()) -> result().
query(Query) ->
    case kprof_kv:pool(db) of
        {} ->
            {error, not_running};
        Shards ->
            Shard = element(erlang:phash2({db, element(2, Query)}, tuple_size(Shards)) + 1,
                            Shards),
            gen_server:call(Shard, Query, ?TIMEOUT)
    end.

%% @doc `query({get, Key})'.
-spec get(kprof_kv_parser:key()) -> {ok, kprof_kv_parser:value()} | not_found
                                        | {error, not_running}.
get(Key) ->
    query({get, Key}).

%% @doc `query({put, Key, Value})'.
-spec put(kprof_kv_parser:key(), kprof_kv_parser:value()) -> ok | {error, full | not_running}.
put(Key, Value) ->
    query({put, Key, Value}).

%% @doc `query({delete, Key})'.
-spec delete(kprof_kv_parser:key()) -> ok | not_found | {error, not_running}.
delete(Key) ->
    query({delete, Key}).

%% @doc The number of keys in all shards.
-spec size() -> non_neg_integer().
size() ->
    lists:sum([gen_server:call(S, size, ?TIMEOUT) || S <- tuple_to_list(kprof_kv:pool(db))]).

%% @doc Starts shard `Index', registered as `name(Index)'.
-spec start_link(pos_integer()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Index) ->
    gen_server:start_link({local, name(Index)}, ?MODULE, [], []).

%% @doc The registered name of shard `Index' (1..?MAX_SHARDS).
-spec name(pos_integer()) -> atom().
name(Index) when is_integer(Index), Index >= 1, Index =< ?MAX_SHARDS ->
    list_to_atom("kprof_kv_db_" ++ integer_to_list(Index)).

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init([]) -> {ok, #state{}}.
init([]) ->
    {ok, #state{table = ets:new(kprof_kv_db, [set, protected])}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({get, Key}, _From, State = #state{table = T}) ->
    kprof_kv:delay(db),
    Reply = case ets:lookup(T, Key) of
                [{_, Value}] -> {ok, Value};
                [] -> not_found
            end,
    {reply, Reply, count(State)};
handle_call({put, Key, Value}, _From, State = #state{table = T}) ->
    kprof_kv:delay(db),
    Reply = case ets:info(T, size) < ?MAX_KEYS orelse ets:member(T, Key) of
                true -> true = ets:insert(T, {Key, Value}), ok;
                false -> {error, full}
            end,
    {reply, Reply, count(State)};
handle_call({delete, Key}, _From, State = #state{table = T}) ->
    kprof_kv:delay(db),
    Reply = case ets:take(T, Key) of
                [_] -> ok;
                [] -> not_found
            end,
    {reply, Reply, count(State)};
handle_call(size, _From, State = #state{table = T}) ->
    {reply, ets:info(T, size), State};
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

count(State = #state{queries = N}) ->
    State#state{queries = N + 1}.
