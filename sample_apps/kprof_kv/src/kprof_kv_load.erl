%%% @doc A load generator for the key-value example (`kprof_kv').
%%%
%%% ```
%%% kprof_kv_load:run(#{rate => 500, concurrency => 8, duration_ms => 10000,
%%%                     mix => #{read => 60, update => 30, create => 8, delete => 2},
%%%                     wrap => none})
%%% '''
%%% runs `concurrency' worker processes that together send about `rate'
%%% requests a second (0: each as fast as it can) for `duration_ms', then
%%% returns what they did:
%%% ```
%%% #{sent => S, ok => Ok, errors => E, elapsed_ms => T,
%%%   by_identity => #{read => R, update => U, create => C, delete => D}}
%%% '''
%%% Each request is one call of `kprof_kv:request/1' in the worker process,
%%% or with `wrap => do_apply' of `kprof:do_apply(kprof_kv, request, [Bin])'
%%% (kprof's traced apply). The counts are exact: `sent' is the number of
%%% those calls, each counted once in `ok' or `errors' (the reply began with
%%% `ERROR', or the call raised) and once in `by_identity' under
%%% `kprof_kv:identity({kprof_kv, request, [Bin]})' (all four kinds are
%%% always present; `undefined' never occurs for the requests made here).
%%% Workers finish the request in progress before they stop, so
%%% `sent = ok + errors' and the identities sum to `sent'.
%%%
%%% `start/1' runs the same in the background and returns the coordinating
%%% process; `stop/1' stops it early (or collects it once it has ended) and
%%% returns the same map; `await/2' waits for a run to end by itself.
%%%
%%% Requests pick their kind by the `mix' weights, and a key out of `keys'
%%% keys (`k0' ... ). With a rate, each worker sends on absolute deadlines
%%% at rate/concurrency a second. A worker that falls behind catches up on
%%% at most ?CATCH_UP_US of missed ticks and skips older ones instead of
%%% bursting, so the offered load never exceeds the rate by more than that
%%% much work. Without the catch-up, at tens of thousands of requests a
%%% second (a tick every 160 us per worker) any scheduling delay lost a tick:
%%% 50,000 offered gave 38,000 sent on an idle 2-core machine.
%%%
%%% Bounded: rate 0..?MAX_RATE, concurrency 1..?MAX_CONCURRENCY,
%%% duration_ms 1..?MAX_DURATION_MS (default 1 s for `run/1', 1 hour for
%%% `start/1'), keys 1..1000000; a finished run's result is kept for
%%% ?LINGER_MS ms for `stop/1', then its process ends.
-module(kprof_kv_load).

-export([run/1, start/1, stop/1, await/2]).
%% spawned
-export([coordinator_init/1, worker_init/1]).

-define(MAX_RATE, 100000).
-define(MAX_CONCURRENCY, 1000).
-define(MAX_DURATION_MS, 86400000).
-define(LINGER_MS, 600000).
-define(STOP_TIMEOUT, 60000).
%% How far behind its schedule a worker still catches up (see next/2).
-define(CATCH_UP_US, 2000).

-type kind() :: read | update | create | delete.
-type options() :: #{rate => 0..?MAX_RATE,                  % default 100
                     concurrency => 1..?MAX_CONCURRENCY,    % default 8
                     mix => #{kind() => non_neg_integer()}, % default 60/30/8/2
                     duration_ms => 1..?MAX_DURATION_MS,
                     keys => 1..1000000,                    % default 1000
                     wrap => none | do_apply}.              % default none
-type result() :: #{sent := non_neg_integer(), ok := non_neg_integer(),
                    errors := non_neg_integer(),
                    by_identity := #{kind() | undefined => non_neg_integer()},
                    elapsed_ms := non_neg_integer()}.
-export_type([kind/0, options/0, result/0]).

-record(cfg, {interval_us :: non_neg_integer(),  % 0: as fast as possible
              started :: integer(),              % monotonic microseconds
              deadline :: integer(),             % started + duration
              mix :: [{pos_integer(), kind()}],  % cumulative weights
              total :: pos_integer(),
              keys :: pos_integer(),
              wrap :: none | do_apply}).
-record(counts, {sent = 0 :: non_neg_integer(), ok = 0 :: non_neg_integer(),
                 errors = 0 :: non_neg_integer(),
                 ids = #{} :: #{kind() | undefined => non_neg_integer()}}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Runs the load for `duration_ms' (default 1000) and returns what was
%% sent. Blocks the caller.
-spec run(options()) -> result().
run(Opts) when is_map(Opts) ->
    Pid = start(maps:merge(#{duration_ms => 1000}, Opts)),
    case await(Pid, maps:get(duration_ms, Opts, 1000) + ?STOP_TIMEOUT) of
        Result when is_map(Result) -> Result;
        {error, Reason} -> error({load_failed, Reason})
    end.

%% @doc Starts the load in the background (default `duration_ms': 1 hour)
%% and returns the coordinating process, not linked to the caller. Raises
%% `badarg' for an option out of bounds.
-spec start(options()) -> pid().
start(Opts) when is_map(Opts) ->
    Checked = check(Opts),
    proc_lib:spawn(?MODULE, coordinator_init, [Checked]).

%% @doc Stops the load started by `start/1': every worker finishes the
%% request it is in, then the counts are returned. A run that already ended
%% returns its result (kept ?LINGER_MS ms). `{error, not_running}' for an
%% unknown or gone process.
-spec stop(pid()) -> result() | {error, not_running | timeout}.
stop(Pid) when is_pid(Pid) ->
    ask(Pid, stop, ?STOP_TIMEOUT).

%% @doc Waits at most `Timeout' ms for the load started by `start/1' to end
%% by itself, and returns its result.
-spec await(pid(), timeout()) -> result() | {error, not_running | timeout}.
await(Pid, Timeout) when is_pid(Pid) ->
    ask(Pid, await, Timeout).

ask(Pid, What, Timeout) ->
    Ref = monitor(process, Pid),
    Pid ! {What, self(), Ref},
    receive
        {Ref, Result} ->
            demonitor(Ref, [flush]),
            Result;
        {'DOWN', Ref, process, Pid, _} ->
            {error, not_running}
    after Timeout ->
            demonitor(Ref, [flush]),
            {error, timeout}
    end.

%%% ---------------------------------------------------------------------
%%% The coordinator

%% @private
-spec coordinator_init({pos_integer(), #cfg{}}) -> ok.
coordinator_init({Concurrency, Cfg}) ->
    process_flag(trap_exit, true),
    T0 = Cfg#cfg.started, % elapsed covers the whole duration the workers ran
    Workers = [proc_lib:spawn_link(?MODULE, worker_init, [{I, self(), Cfg}])
               || I <- lists:seq(1, Concurrency)],
    collect(Workers, #counts{}, [], T0).

collect([], Counts, Waiters, T0) ->
    Result = result(Counts, (now_us() - T0) div 1000),
    [From ! {Ref, Result} || {From, Ref} <- Waiters],
    linger(Result);
collect(Workers, Counts, Waiters, T0) ->
    receive
        {done, Worker, WorkerCounts} ->
            collect(lists:delete(Worker, Workers), add(Counts, WorkerCounts), Waiters, T0);
        {'EXIT', Worker, _Reason} ->
            %% a worker that ended without reporting (it never does: each
            %% request is wrapped in try) has nothing to add
            collect(lists:delete(Worker, Workers), Counts, Waiters, T0);
        {stop, From, Ref} ->
            [W ! stop || W <- Workers],
            collect(Workers, Counts, [{From, Ref} | Waiters], T0);
        {await, From, Ref} ->
            collect(Workers, Counts, [{From, Ref} | Waiters], T0);
        _Other ->
            collect(Workers, Counts, Waiters, T0)
    end.

linger(Result) ->
    receive
        {What, From, Ref} when What =:= stop; What =:= await ->
            From ! {Ref, Result},
            linger(Result);
        _Other ->
            linger(Result)
    after ?LINGER_MS ->
            ok
    end.

add(#counts{sent = S, ok = O, errors = E, ids = I},
    #counts{sent = S1, ok = O1, errors = E1, ids = I1}) ->
    #counts{sent = S + S1, ok = O + O1, errors = E + E1,
            ids = maps:fold(fun(K, N, Acc) -> Acc#{K => maps:get(K, Acc, 0) + N} end, I, I1)}.

result(#counts{sent = S, ok = O, errors = E, ids = Ids}, ElapsedMs) ->
    #{sent => S, ok => O, errors => E, elapsed_ms => ElapsedMs,
      by_identity => maps:merge(#{read => 0, update => 0, create => 0, delete => 0}, Ids)}.

%%% ---------------------------------------------------------------------
%%% Workers

%% @private
-spec worker_init({pos_integer(), pid(), #cfg{}}) -> ok.
worker_init({Id, Coordinator, Cfg = #cfg{interval_us = Interval}}) ->
    rand:seed(exsss, {Id, erlang:unique_integer([positive]), erlang:monotonic_time()}),
    %% with a rate, spread the workers over the first interval
    First = case Interval of
                0 -> now_us();
                _ -> now_us() + rand:uniform(Interval) - 1
            end,
    Counts = worker_loop(First, Cfg, #counts{}),
    Coordinator ! {done, self(), Counts},
    ok.

%% Sends at each tick before the deadline, then waits for the deadline so that
%% the run lasts its duration. Waiting for the deadline is not a tick: a worker
%% that woke for it (whole milliseconds, so up to 1 ms early) and sent would
%% send again at once until the deadline passed: dozens of requests in that
%% last millisecond.
worker_loop(Next, Cfg = #cfg{deadline = Deadline}, Counts) when Next < Deadline ->
    %% whole milliseconds: a tick less than 1 ms early is sent now
    WaitMs = max(0, (Next - now_us()) div 1000),
    receive
        stop -> Counts
    after WaitMs ->
            case now_us() >= Deadline of
                true -> Counts;
                false -> worker_loop(next(Next, Cfg), Cfg, send(Cfg, Counts))
            end
    end;
worker_loop(_Next, #cfg{deadline = Deadline}, Counts) ->
    receive
        stop -> Counts
    after max(0, (Deadline - now_us() + 999) div 1000) ->
            Counts
    end.

%% The next tick after `Next': skips the ticks missed more than
%% ?CATCH_UP_US ago (and at least one interval ago).
next(Next, #cfg{interval_us = 0}) ->
    Next; % in the past: no wait
next(Next, #cfg{interval_us = Interval}) ->
    Due = Next + Interval,
    Late = now_us() - max(Interval, ?CATCH_UP_US) - Due,
    case Late > 0 of
        true -> Due + (Late div Interval + 1) * Interval;
        false -> Due
    end.

send(Cfg = #cfg{wrap = Wrap}, Counts = #counts{sent = S, ok = O, errors = E, ids = Ids}) ->
    Bin = make_request(Cfg),
    Identity = kprof_kv:identity({kprof_kv, request, [Bin]}),
    Ids1 = Ids#{Identity => maps:get(Identity, Ids, 0) + 1},
    case call(Wrap, Bin) of
        ok -> Counts#counts{sent = S + 1, ok = O + 1, ids = Ids1};
        error -> Counts#counts{sent = S + 1, errors = E + 1, ids = Ids1}
    end.

call(Wrap, Bin) ->
    try apply_request(Wrap, Bin) of
        <<"ERROR", _/binary>> -> error;
        _ -> ok
    catch
        _:_ -> error
    end.

apply_request(none, Bin) ->
    kprof_kv:request(Bin);
apply_request(do_apply, Bin) ->
    kprof:do_apply(kprof_kv, request, [Bin]).

make_request(#cfg{mix = Mix, total = Total, keys = Keys}) ->
    Key = [$k | integer_to_list(rand:uniform(Keys) - 1)],
    case pick(rand:uniform(Total), Mix) of
        read -> iolist_to_binary(["GET ", Key]);
        update -> iolist_to_binary(["PUT ", Key, " ", value()]);
        create -> iolist_to_binary(["CREATE ", Key, " ", value()]);
        delete -> iolist_to_binary(["DEL ", Key])
    end.

value() ->
    ["v", integer_to_list(erlang:unique_integer([positive]))].

pick(N, [{Upto, Kind} | _]) when N =< Upto -> Kind;
pick(N, [_ | Rest]) -> pick(N, Rest).

now_us() ->
    erlang:monotonic_time(microsecond).

%%% ---------------------------------------------------------------------
%%% Options

check(Opts) ->
    Rate = bounded(Opts, rate, 100, 0, ?MAX_RATE),
    Concurrency = bounded(Opts, concurrency, 8, 1, ?MAX_CONCURRENCY),
    DurationMs = bounded(Opts, duration_ms, 3600000, 1, ?MAX_DURATION_MS),
    Keys = bounded(Opts, keys, 1000, 1, 1000000),
    Wrap = case maps:get(wrap, Opts, none) of
               W when W =:= none; W =:= do_apply -> W;
               W -> error({badarg, wrap, W})
           end,
    {Mix, Total} = mix(maps:get(mix, Opts, #{read => 60, update => 30, create => 8,
                                             delete => 2})),
    Interval = case Rate of
                   0 -> 0;
                   _ -> max(1, Concurrency * 1000000 div Rate)
               end,
    Now = now_us(),
    {Concurrency, #cfg{interval_us = Interval, started = Now, deadline = Now + DurationMs * 1000,
                       mix = Mix, total = Total, keys = Keys, wrap = Wrap}}.

mix(Weights) when is_map(Weights) ->
    Kinds = [read, update, create, delete],
    case maps:keys(Weights) -- Kinds of
        [] -> ok;
        Unknown -> error({badarg, mix, Unknown})
    end,
    {Cumulative, Total} =
        lists:mapfoldl(fun(Kind, Acc) ->
                               case maps:get(Kind, Weights, 0) of
                                   W when is_integer(W), W >= 0, W =< 1000000 ->
                                       {{Acc + W, Kind}, Acc + W};
                                   W ->
                                       error({badarg, mix, {Kind, W}})
                               end
                       end, 0, Kinds),
    case Total of
        0 -> error({badarg, mix, Weights});
        _ -> {[C || C = {_, Kind} <- Cumulative, maps:get(Kind, Weights, 0) > 0], Total}
    end;
mix(Other) ->
    error({badarg, mix, Other}).

bounded(Opts, Key, Default, Lo, Hi) ->
    case maps:get(Key, Opts, Default) of
        V when is_integer(V), V >= Lo, V =< Hi -> V;
        V -> error({badarg, Key, V})
    end.
