%%% Workload node for tests/bench/record_overhead and tests/bench/cpu_cost
%%% (benchmarks, not tests).
%%%
%%% start([Busy, Idle, IdleWakeMs, LogFile, Watch]) spawns, under a long-lived
%%% owner process (an `erl -eval' process ends when its expression returns):
%%%   - Busy workers running a fixed CPU-bound unit of work (a naive fib behind
%%%     a few frames) forever, counting finished units in one shared counter;
%%%   - Idle processes parked in `receive', each waking every IdleWakeMs to
%%%     2 * IdleWakeMs for a tiny piece of work (so a top-N by reductions
%%%     delta, which skips processes that did not run, can select them);
%%%   - a logger writing "SystemTimeUs Units" to LogFile every 50 ms, read
%%%     after the run to get throughput over any time window;
%%%   - when Watch is true, a watcher that traces kprof_agent's scheduling
%%%     (`running', no message copies) and logs, per agent lifetime, how long
%%%     each request (a round of ticks) took from being picked up to the agent
%%%     being back in its receive, the agent's own run time per request, and
%%%     its whole run time over the span. Tracing adds a little cost of its own.
%%%
%%% paced([Workers, PeriodMs, FibN, Idle, IdleWakeMs, LogFile, Bind]) is the paced
%%% workload of tests/bench/cpu_cost: a fixed amount of work per second, so
%%% that the node's CPU time with and without kprof differs only by what
%%% kprof costs it (a CPU-bound workload would turn that cost into lost work
%%% instead). Workers wake every PeriodMs on an absolute schedule, each at its
%%% own phase, and compute fib(FibN) behind the same frames as the busy
%%% workers: a tick delayed by kprof is late, not dropped, so the work done
%%% per second stays the same. The idle processes and the logger are those of
%%% start/1, and the logger adds a third column, AgentRunNs: the run time of
%%% kprof's agent processes so far (see meter_agent/2). start/1 leaves it
%%% out: its Watch traces the same processes, and a process has one tracer.
%%% With Bind true, every process of it is bound to a scheduler (see
%%% bound/3).
%%%
%%% gaps([Depth, LogFile]) is the busy scheduler of tests/bench/cpu_cost's
%%% KPROF_BENCH_GAPS mode: one process spinning on the monotonic clock at
%%% stack depth Depth, never waiting, so its scheduler is 100% busy. It
%%% logs "TimeUs LostNs" every 50 ms, LostNs the sum so far of the gaps
%%% between two clock reads longer than ?GAP_MIN_NS and shorter than
%%% ?GAP_MAX_NS: the time its thread was taken away by something short, such
%%% as the interrupt that takes a perf sample and copies its stack. Longer
%%% gaps (the OS running another thread) are left out: no sample takes that
%%% long. How fast the machine runs the loop does not change what it loses
%%% to interrupts, so this resolves a cost far below the noise of CPU time per
%%% unit of work on a shared machine.
-module(kprof_bench_load).

-export([start/1, paced/1, gaps/1]).
-export([fib/1]).

-define(LOG_MS, 50).
-define(GAP_MIN_NS, 1000).
-define(GAP_MAX_NS, 200000).

start([Busy, Idle, IdleWakeMs, LogFile, Watch]) ->
    Starter = self(),
    spawn(fun() -> owner(Starter, Busy, Idle, IdleWakeMs, LogFile, Watch) end),
    receive {started, Pid} -> io:format("started ~s~n", [Pid]) after 30000 -> halt(3) end.

owner(Starter, Busy, Idle, IdleWakeMs, LogFile, Watch) ->
    C = counters:new(1, [write_concurrency]),
    _ = [spawn(fun() -> idle(IdleWakeMs) end) || _ <- lists:seq(1, Idle)],
    _ = [spawn(fun() -> worker(C) end) || _ <- lists:seq(1, Busy)],
    %% a raw file belongs to the process that opened it: the logger does
    Logger = spawn(fun() ->
                           {ok, Fd} = file:open(LogFile, [write, raw, binary]),
                           logger(C, Fd, false)
                   end),
    case Watch of
        true -> spawn(fun() -> watcher(Logger) end);
        false -> ok
    end,
    Starter ! {started, os:getpid()},
    receive stop -> ok end.

paced([Workers, PeriodMs, FibN, Idle, IdleWakeMs, LogFile, Bind]) ->
    Starter = self(),
    spawn(fun() -> paced_owner(Starter, Workers, PeriodMs, FibN, Idle, IdleWakeMs, LogFile, Bind) end),
    receive {started, Pid} -> io:format("started ~s~n", [Pid]) after 30000 -> halt(3) end.

paced_owner(Starter, Workers, PeriodMs, FibN, Idle, IdleWakeMs, LogFile, Bind) ->
    C = counters:new(1, [write_concurrency]),
    _ = [bound(Bind, K, fun() -> idle(IdleWakeMs) end) || K <- lists:seq(1, Idle)],
    Start = erlang:monotonic_time(millisecond) + PeriodMs,
    _ = [bound(Bind, K,
               fun() -> paced_worker(C, PeriodMs, FibN, Start + K * PeriodMs div Workers) end)
         || K <- lists:seq(0, Workers - 1)],
    _ = bound(Bind, 0, fun() ->
                               {ok, Fd} = file:open(LogFile, [write, raw, binary]),
                               logger(C, Fd, true)
                       end),
    Starter ! {started, os:getpid()},
    receive stop -> ok end.

%% Process K of the paced workload; with Bind, bound to scheduler K mod N + 1
%% (the undocumented spawn_opt option of ERTS's own tests). How the workload
%% is spread over the schedulers sets how often each scheduler thread wakes,
%% most of what an idle node spends. Unbound, it moves: a scheduler that
%% kprof wakes steals work and keeps it, and unprofiled windows drift by a
%% third. Bound, what is measured is kprof's own cost, without that effect.
bound(false, _K, Fun) ->
    spawn(Fun);
bound(true, K, Fun) ->
    spawn_opt(Fun, [{scheduler, K rem erlang:system_info(schedulers_online) + 1}]).

paced_worker(C, PeriodMs, FibN, Next) ->
    erlang:send_after(Next, self(), tick, [{abs, true}]),
    receive tick -> ok end,
    _ = validate(FibN),
    counters:add(C, 1, 1),
    paced_worker(C, PeriodMs, FibN, Next + PeriodMs).

gaps([Depth, LogFile]) ->
    Starter = self(),
    spawn(fun() ->
                  {ok, Fd} = file:open(LogFile, [write, raw, binary]),
                  Starter ! {started, os:getpid()},
                  deep(Depth, Fd)
          end),
    receive {started, Pid} -> io:format("started ~s~n", [Pid]) after 30000 -> halt(3) end.

%% Depth frames, then the spinner: samples copy and walk a real stack.
deep(0, Fd) ->
    T = erlang:monotonic_time(nanosecond),
    spin(Fd, T, 0, T + ?LOG_MS * 1000000);
deep(N, Fd) ->
    deep(N - 1, Fd) + 1.

spin(Fd, Prev, Lost, Next) ->
    T = erlang:monotonic_time(nanosecond),
    D = T - Prev,
    Lost1 = case D > ?GAP_MIN_NS andalso D < ?GAP_MAX_NS of
                true -> Lost + D;
                false -> Lost
            end,
    case T >= Next of
        false ->
            spin(Fd, T, Lost1, Next);
        true ->
            ok = file:write(Fd, [integer_to_list(os:system_time(microsecond)), $\s,
                                 integer_to_list(Lost1), $\n]),
            %% the write is not a gap
            spin(Fd, erlang:monotonic_time(nanosecond), Lost1, Next + ?LOG_MS * 1000000)
    end.

%%% The workload

worker(C) ->
    handle_request(C),
    counters:add(C, 1, 1),
    worker(C).

handle_request(_C) ->
    validate(17).

validate(N) ->
    R = compute(N),
    R > 0 orelse exit(impossible),
    ok.

compute(N) ->
    ?MODULE:fib(N).

fib(N) when N < 2 -> N;
fib(N) -> fib(N - 1) + fib(N - 2).

idle(WakeMs) ->
    receive
        stop -> ok
    after WakeMs + rand:uniform(WakeMs) ->
        _ = lists:sum(lists:seq(1, 20)),
        idle(WakeMs)
    end.

%%% Throughput log

%% Metered: also log the agent's run time (a third column).
logger(C, Fd, false) ->
    logger(C, Fd, none, undefined);
logger(C, Fd, true) ->
    Meter = spawn(fun() -> meter(#{}, 0) end),
    true = erlang:suspend_process(Meter),
    logger(C, Fd, Meter, undefined).

logger(C, Fd, Meter, Metered0) ->
    receive
        {line, Text} ->
            ok = file:write(Fd, Text),
            logger(C, Fd, Meter, Metered0)
    after ?LOG_MS ->
        Metered = meter_agent(Meter, Metered0),
        Line = [integer_to_list(os:system_time(microsecond)), $\s,
                integer_to_list(counters:get(C, 1)), meter_column(Meter), $\n],
        ok = file:write(Fd, Line),
        logger(C, Fd, Meter, Metered)
    end.

%%% The agent's run time: every process of kprof's agent (the agent, its
%%% stackers, its choosers and what they spawn) is traced with `running'
%%% to the meter, which adds up the time from each `in' to its `out'. The
%%% meter stays suspended between two log lines, so that the trace messages
%%% wait in its queue instead of waking it (and a scheduler thread, a
%%% larger cost than the agent's own run in this VM) for each one: the
%%% logger, awake for its line anyway, lets it run once per line.

%% Traces a new kprof_agent (once per agent) and its stackers, its linked
%% processes at that time; set_on_spawn takes the ones it starts later.
meter_agent(none, Metered) ->
    Metered;
meter_agent(Meter, Metered) ->
    case whereis(kprof_agent) of
        undefined ->
            Metered;
        Metered ->
            Metered;
        Agent ->
            Flags = [running, set_on_spawn, monotonic_timestamp, {tracer, Meter}],
            Links = case process_info(Agent, links) of
                        {links, L} -> [P || P <- L, is_pid(P), node(P) =:= node()];
                        undefined -> []
                    end,
            _ = [try erlang:trace(P, true, Flags) catch error:badarg -> 0 end
                 || P <- [Agent | Links]],
            Agent
    end.

%% " Ns": the meter's total so far, once it has read the events that wait.
meter_column(none) ->
    [];
meter_column(Meter) ->
    erlang:resume_process(Meter),
    Meter ! {read, self()},
    receive
        {run_ns, Meter, Ns} ->
            true = erlang:suspend_process(Meter),
            [$\s, integer_to_list(Ns)]
    end.

meter(In, Total) ->
    receive
        {trace_ts, P, in, _, Ts} ->
            meter(In#{P => Ts}, Total);
        {trace_ts, P, out, _, Ts} ->
            case maps:take(P, In) of
                {T0, In1} -> meter(In1, Total + (Ts - T0));
                error -> meter(In, Total)
            end;
        {trace_ts, P, exited, _, _} ->
            meter(maps:remove(P, In), Total);
        {read, From} ->
            From ! {run_ns, self(), Total},
            meter(In, Total);
        _ ->
            meter(In, Total)
    end.

%%% Optional: round duration and run time of kprof's agent, from scheduling
%%% events of the agent process.

watcher(Log) ->
    case whereis(kprof_agent) of
        undefined ->
            receive after 10 -> watcher(Log) end;
        Agent ->
            Ref = monitor(process, Agent),
            _ = try erlang:trace(Agent, true, [running, monotonic_timestamp]) catch error:badarg -> 0 end,
            watch(Log, Ref, Agent, idle, 0, [], []),
            watcher(Log)
    end.

%% State: idle (waiting in its receive loop) or {busy, BatchStart, RunStart, RunSoFar}
%% (RunStart undefined while it waits inside a batch, e.g. for a busy process).
watch(Log, Ref, Agent, St, Batches, Lat, Run) ->
    receive
        {trace_ts, Agent, in, _, Ts} ->
            St1 = case St of
                      idle -> {busy, Ts, Ts, 0};
                      {busy, B0, _, Acc} -> {busy, B0, Ts, Acc}
                  end,
            watch(Log, Ref, Agent, St1, Batches, Lat, Run);
        {trace_ts, Agent, out, Mfa, Ts} ->
            case St of
                {busy, B0, In, Acc} when In =/= undefined ->
                    Acc1 = Acc + (Ts - In),
                    case Mfa of
                        {kprof_agent, loop, 1} ->
                            watch(Log, Ref, Agent, idle, Batches + 1, [{B0, Ts} | Lat],
                                  [Acc1 | Run]);
                        _ ->
                            watch(Log, Ref, Agent, {busy, B0, undefined, Acc1}, Batches, Lat, Run)
                    end;
                _ ->
                    watch(Log, Ref, Agent, St, Batches, Lat, Run)
            end;
        {trace_ts, Agent, _, _, _} ->
            watch(Log, Ref, Agent, St, Batches, Lat, Run);
        {'DOWN', Ref, process, Agent, _} ->
            case St of
                %% kprof asks for the next round before the agent replies to
                %% the last, so the agent may never wait in its loop: what it
                %% ran since it last did is a batch ending now
                {busy, B0, _, Acc} ->
                    report(Log, Batches + 1, [{B0, erlang:monotonic_time()} | Lat], [Acc | Run]);
                idle ->
                    report(Log, Batches, Lat, Run)
            end
    end.

report(_Log, 0, _, _) ->
    ok;
%% A batch is one request: a round of ticks (see kprof_agent). Besides its
%% latency and run time, the line gives the agent's whole run time and the
%% span of time it covers, from the first request to the last reply.
report(Log, Batches, Lat0, Run0) ->
    Us = fun(Native) -> erlang:convert_time_unit(Native, native, microsecond) end,
    Lat = lists:sort([Us(End - Start) || {Start, End} <- Lat0]),
    Run = lists:sort([Us(X) || X <- Run0]),
    {_, LastEnd} = hd(Lat0),
    {FirstStart, _} = lists:last(Lat0),
    P = fun(L, Q) -> lists:nth(max(1, min(length(L), round(Q * length(L)))), L) end,
    Log ! {line, io_lib:format(
                          "# agent ~s batches ~b latency_us median ~b p90 ~b p99 ~b max ~b "
                          "run_us median ~b mean ~b max ~b run_total_us ~b span_us ~b~n",
                          [integer_to_list(os:system_time(microsecond)), Batches,
                           P(Lat, 0.5), P(Lat, 0.9), P(Lat, 0.99), lists:last(Lat),
                           P(Run, 0.5), lists:sum(Run) div length(Run), lists:last(Run),
                           lists:sum(Run), max(1, Us(LastEnd - FirstStart))])},
    ok.
