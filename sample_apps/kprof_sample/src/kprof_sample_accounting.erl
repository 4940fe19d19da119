%%% @doc The "accounting" process of the kprof sample application.
%%%
%%% One registered gen_server, `kprof_sample_accounting', that every frontend
%%% tells about each request it answered (kind, latency, bytes). It keeps
%%% counters per kind of request and the latest latencies in a bounded ring,
%%% and every ?REPORT_MS computes percentiles from that ring (a sort: the one
%%% visible piece of work this process does, showing up in a flame graph as
%%% `lists:sort/1' under `report/1').
%%%
%%% It is a single process on purpose: a shared bottleneck that a profiler
%%% should point at when the load is high (its message queue is one of the
%%% metrics kprof records). To stay bounded, `record/3' drops the event when
%%% the queue already holds ?MAX_QUEUE messages, and counts the drop.
-module(kprof_sample_accounting).
-behaviour(gen_server).

-export([start_link/0, record/3, stats/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(NAME, kprof_sample_accounting).
-define(RING, 2000).
-define(MAX_QUEUE, 10000).
-define(REPORT_MS, 2000).
-define(TIMEOUT, 5000).

-type kind() :: atom().
-type stats() :: #{kind() => #{requests := non_neg_integer(),
                               micros := non_neg_integer(),
                               bytes := non_neg_integer()},
                   dropped => non_neg_integer(),
                   percentiles => #{atom() => non_neg_integer()}}.
-export_type([stats/0]).

-record(state, {counts = #{} :: #{kind() => {non_neg_integer(), non_neg_integer(),
                                             non_neg_integer()}},
                ring = queue:new() :: queue:queue(non_neg_integer()),
                ring_len = 0 :: non_neg_integer(),
                percentiles = #{} :: #{atom() => non_neg_integer()}}).

%% @doc Starts the accounting process, registered as `kprof_sample_accounting'.
-spec start_link() -> {ok, pid()} | ignore | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?NAME}, ?MODULE, [], []).

%% @doc Records one answered request. Asynchronous; dropped (and counted in
%% `stats()' as `dropped') when the accounting process is ?MAX_QUEUE
%% messages behind or not running.
-spec record(kind(), Micros :: non_neg_integer(), Bytes :: non_neg_integer()) -> ok.
record(Kind, Micros, Bytes) when is_atom(Kind), is_integer(Micros), is_integer(Bytes) ->
    case whereis(?NAME) of
        undefined ->
            ok;
        Pid ->
            case process_info(Pid, message_queue_len) of
                {message_queue_len, N} when N < ?MAX_QUEUE ->
                    gen_server:cast(Pid, {record, Kind, max(0, Micros), max(0, Bytes)});
                _ ->
                    _ = counters:add(drop_counter(), 1, 1),
                    ok
            end
    end.

%% @doc Counters per kind of request, the number of dropped events and the
%% latency percentiles (microseconds) of the last report.
-spec stats() -> stats().
stats() ->
    gen_server:call(?NAME, stats, ?TIMEOUT).

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init([]) -> {ok, #state{}}.
init([]) ->
    persistent_term:put({?MODULE, drops}, counters:new(1, [write_concurrency])),
    erlang:send_after(?REPORT_MS, self(), report),
    {ok, #state{}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call(stats, _From, State = #state{counts = Counts, percentiles = P}) ->
    PerKind = maps:map(fun(_, {N, Us, B}) -> #{requests => N, micros => Us, bytes => B} end,
                       Counts),
    {reply, PerKind#{dropped => counters:get(drop_counter(), 1), percentiles => P}, State};
handle_call(_Other, _From, State) ->
    {reply, {error, unknown_call}, State}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast({record, Kind, Micros, Bytes}, State = #state{counts = Counts}) ->
    {N, Us, B} = maps:get(Kind, Counts, {0, 0, 0}),
    State1 = push_latency(Micros, State#state{counts = Counts#{Kind => {N + 1, Us + Micros,
                                                                      B + Bytes}}}),
    {noreply, State1};
handle_cast(_Msg, State) ->
    {noreply, State}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}}.
handle_info(report, State) ->
    erlang:send_after(?REPORT_MS, self(), report),
    {noreply, report(State)};
handle_info(_Msg, State) ->
    {noreply, State}.

%%% ---------------------------------------------------------------------
%%% Internals

drop_counter() ->
    persistent_term:get({?MODULE, drops}).

push_latency(Micros, State = #state{ring = Ring, ring_len = Len}) when Len >= ?RING ->
    {_, Ring1} = queue:out(Ring),
    State#state{ring = queue:in(Micros, Ring1)};
push_latency(Micros, State = #state{ring = Ring, ring_len = Len}) ->
    State#state{ring = queue:in(Micros, Ring), ring_len = Len + 1}.

report(State = #state{ring_len = 0}) ->
    State;
report(State = #state{ring = Ring, ring_len = Len}) ->
    Sorted = list_to_tuple(lists:sort(queue:to_list(Ring))),
    At = fun(Q) -> element(max(1, min(Len, round(Q * Len))), Sorted) end,
    State#state{percentiles = #{p50 => At(0.50), p90 => At(0.90), p99 => At(0.99),
                                max => element(Len, Sorted)}}.
