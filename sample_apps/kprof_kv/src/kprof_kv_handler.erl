%%% @doc The handling layer of the key-value example (`kprof_kv').
%%%
%%% A pool of gen_servers, `kprof_kv_handler_1' ... `_N' (N from
%%% `kprof_kv_sup'). `handle/1' runs in the caller and picks the handler by
%%% hashing the command's key; that handler checks the command (a checksum of
%%% key and value, the layer's own bit of work), spends the `handler' delay,
%%% then calls the db layer (`kprof_kv_db:query/1') and the accounting layer
%%% (`kprof_kv_accounting:record/2'), both with gen_server:call from the
%%% handler process, so the caller waits for all of it. A `CREATE' is a put
%%% in the db layer.
%%%
%%% Bounded: the caller waits at most ?TIMEOUT ms, the handler's calls have
%%% shorter timeouts of their own; a layer that is down or too slow makes
%%% the result `{error, unavailable}' or `{error, timeout}', never a crash
%%% of the caller.
-module(kprof_kv_handler).
-behaviour(gen_server).

-export([handle/1, start_link/1, name/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(MAX_HANDLERS, 64).
-define(TIMEOUT, 8000).

-type result() :: ok | {ok, kprof_kv_parser:value()} | not_found
                | {error, timeout | unavailable | not_running | full}.
-export_type([result/0]).

-record(state, {handled = 0 :: non_neg_integer(), checksum = 0 :: non_neg_integer()}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Has a handler of the pool serve a parsed command (tier entry point
%% of the handling layer, stable arity 1; runs in the caller and waits for
%% the handler with gen_server:call). Its argument identifies the request
%% too: see `kprof_kv:identity/1'.
-spec handle(kprof_kv_parser:command()) -> result().
handle(Command) ->
    case kprof_kv:pool(handler) of
        {} ->
            {error, not_running};
        Pool ->
            Handler = element(erlang:phash2(key(Command), tuple_size(Pool)) + 1, Pool),
            try gen_server:call(Handler, {handle, Command}, ?TIMEOUT)
            catch
                exit:{timeout, _} -> {error, timeout};
                exit:_ -> {error, unavailable}
            end
    end.

%% @doc Starts handler `Index', registered as `name(Index)'.
-spec start_link(pos_integer()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Index) ->
    gen_server:start_link({local, name(Index)}, ?MODULE, [], []).

%% @doc The registered name of handler `Index' (1..?MAX_HANDLERS).
-spec name(pos_integer()) -> atom().
name(Index) when is_integer(Index), Index >= 1, Index =< ?MAX_HANDLERS ->
    list_to_atom("kprof_kv_handler_" ++ integer_to_list(Index)).

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init([]) -> {ok, #state{}}.
init([]) ->
    {ok, #state{}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({handle, Command}, _From, State = #state{handled = N, checksum = Sum}) ->
    Check = checksum(Command),
    kprof_kv:delay(handler),
    Result = try
                 R = kprof_kv_db:query(db_query(Command)),
                 ok = kprof_kv_accounting:record(Command, R),
                 R
             catch
                 exit:{timeout, _} -> {error, timeout};
                 exit:_ -> {error, unavailable}
             end,
    {reply, Result, State#state{handled = N + 1, checksum = (Sum + Check) band 16#ffffffff}};
handle_call(stats, _From, State = #state{handled = N}) ->
    {reply, #{handled => N}, State};
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

key({_, Key}) -> Key;
key({_, Key, _}) -> Key.

db_query({get, Key}) -> {get, Key};
db_query({put, Key, Value}) -> {put, Key, Value};
db_query({create, Key, Value}) -> {put, Key, Value};
db_query({delete, Key}) -> {delete, Key}.

checksum({_, Key}) -> erlang:crc32(Key);
checksum({_, Key, Value}) -> erlang:crc32(erlang:crc32(Key), Value).
