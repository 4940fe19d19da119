%%% @doc The accounting layer of the key-value example (`kprof_kv').
%%%
%%% A pool of gen_servers, `kprof_kv_accounting_1' ... `_N' (N from
%%% `kprof_kv_sup'), that count every request a handler served, by command
%%% and outcome, and the bytes written. `record/2' runs in the handler's
%%% process and waits for the accounting process (gen_server:call, chosen by
%%% hashing the key), so the request waits for it too; the accounting
%%% process spends the `accounting' delay.
%%%
%%% Bounded: the counters are one map per process with at most
%%% 4 commands x 3 outcomes entries; every call has a ?TIMEOUT ms timeout.
-module(kprof_kv_accounting).
-behaviour(gen_server).

-export([record/2, stats/0, reset/0]).
-export([start_link/1, name/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(MAX_ACCOUNTING, 64).
-define(TIMEOUT, 3000).

-type op() :: get | put | create | delete.
-type outcome() :: ok | not_found | error.
-type stats() :: #{op() => #{outcome() => non_neg_integer()},
                   requests := non_neg_integer(), bytes_written := non_neg_integer()}.
-export_type([stats/0]).

-record(state, {counts = #{} :: #{{op(), outcome()} => non_neg_integer()},
                bytes = 0 :: non_neg_integer()}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Records one served request: its parsed command and the db layer's
%% result (tier entry point of the accounting layer, stable arity 2; called
%% by the handlers, runs in the handler's process and waits for the
%% accounting process with gen_server:call). Exits like gen_server:call when
%% that process is down or too slow; `ok' without counting when the
%% key-value layers do not run.
-spec record(kprof_kv_parser:command(), kprof_kv_db:result()) -> ok.
record(Command, Result) ->
    case kprof_kv:pool(accounting) of
        {} ->
            ok;
        Pool ->
            Pid = element(erlang:phash2({accounting, element(2, Command)}, tuple_size(Pool)) + 1,
                          Pool),
            gen_server:call(Pid, {record, element(1, Command), outcome(Result), written(Command)},
                            ?TIMEOUT)
    end.

%% @doc The counters of every accounting process, summed: per command a map
%% of outcome to requests, the number of requests and the bytes written
%% (keys plus values of puts and creates).
-spec stats() -> stats().
stats() ->
    Each = [gen_server:call(P, stats, ?TIMEOUT) || P <- tuple_to_list(kprof_kv:pool(accounting))],
    lists:foldl(fun({Counts, Bytes}, Acc = #{requests := R, bytes_written := B}) ->
                        maps:fold(fun({Op, Outcome}, N, A) ->
                                          PerOp = maps:get(Op, A, #{}),
                                          A#{Op => PerOp#{Outcome => maps:get(Outcome, PerOp, 0)
                                                                     + N}}
                                  end,
                                  Acc#{requests := R + lists:sum(maps:values(Counts)),
                                       bytes_written := B + Bytes},
                                  Counts)
                end, #{requests => 0, bytes_written => 0}, Each).

%% @doc Sets every counter to zero.
-spec reset() -> ok.
reset() ->
    [ok = gen_server:call(P, reset, ?TIMEOUT) || P <- tuple_to_list(kprof_kv:pool(accounting))],
    ok.

%% @doc Starts accounting process `Index', registered as `name(Index)'.
-spec start_link(pos_integer()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Index) ->
    gen_server:start_link({local, name(Index)}, ?MODULE, [], []).

%% @doc The registered name of accounting process `Index' (1..?MAX_ACCOUNTING).
-spec name(pos_integer()) -> atom().
name(Index) when is_integer(Index), Index >= 1, Index =< ?MAX_ACCOUNTING ->
    list_to_atom("kprof_kv_accounting_" ++ integer_to_list(Index)).

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init([]) -> {ok, #state{}}.
init([]) ->
    {ok, #state{}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({record, Op, Outcome, Bytes}, _From, State = #state{counts = C, bytes = B}) ->
    kprof_kv:delay(accounting),
    Key = {Op, Outcome},
    {reply, ok, State#state{counts = C#{Key => maps:get(Key, C, 0) + 1}, bytes = B + Bytes}};
handle_call(stats, _From, State = #state{counts = C, bytes = B}) ->
    {reply, {C, B}, State};
handle_call(reset, _From, _State) ->
    {reply, ok, #state{}};
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

outcome(ok) -> ok;
outcome({ok, _}) -> ok;
outcome(not_found) -> not_found;
outcome(_) -> error.

written({Op, Key, Value}) when Op =:= put; Op =:= create -> byte_size(Key) + byte_size(Value);
written(_) -> 0.
