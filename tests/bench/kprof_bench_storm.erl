%%% Workload node for tests/bench/tiers_storm (a benchmark, not a test): a
%%% trace storm, a tier function called in tight loops inside marked
%%% requests, and calm requests before and after it.
-module(kprof_bench_storm).

-export([resumed/1, main/1, hot/1, hot_request/1, storm/3, calm/1]).

%% @doc Writes `Ready' and then waits forever (an `erl -eval' node would
%% otherwise end).
-spec main(string()) -> no_return().
main(Ready) ->
    ok = file:write_file(Ready, "ready"),
    receive after infinity -> ok end.

%% @doc The tier function: trivial, so that the events are the whole cost.
-spec hot(integer()) -> integer().
hot(X) -> X + 1.

%% @doc One request: N calls of hot/1.
-spec hot_request(non_neg_integer()) -> integer().
hot_request(N) -> loop(N, 0).

loop(0, A) -> A;
loop(N, A) -> loop(N - 1, ?MODULE:hot(A)).

%% @doc The storm: `Procs' processes each make `Reqs' requests (identity
%% storm) of `N' calls in a row. Returns "PeakGrowthMB,Ms,SettleMs,RssMB,TripMs":
%% the node's memory (erlang:memory(total), every 5 ms) at most above its
%% level before, how long the storm took, how long after it the memory was
%% back within 1 MB of that level (at most 30 s), and the peak of the OS
%% process's resident memory above its level before (which also sees what
%% erlang:memory does not: a NIF's own buffers), and when tier tracing
%% paused after the storm began (ms; -1 if it did not).
-spec storm(pos_integer(), pos_integer(), pos_integer()) -> string().
storm(Procs, Reqs, N) ->
    erlang:garbage_collect(),
    Before = erlang:memory(total),
    RssBefore = rss(),
    Self = self(),
    T0 = erlang:monotonic_time(millisecond),
    Traced = tracing(),
    Watcher = spawn(fun() -> watch(Self, 0, RssBefore, {Traced, T0, -1}) end),
    Ps = [spawn(fun() ->
                        [kprof:do_apply(?MODULE, hot_request, [N], storm)
                         || _ <- lists:seq(1, Reqs)],
                        Self ! {stormed, self()}
                end) || _ <- lists:seq(1, Procs)],
    [receive {stormed, P} -> ok end || P <- Ps],
    T1 = erlang:monotonic_time(millisecond),
    Settle = settle(Before, T1, T1 + 30000),
    Watcher ! stop,
    {Max, RssMax, Trip} = receive {max, M, R, Tr} -> {M, R, Tr} end,
    lists:flatten(io_lib:format("~.1f,~p,~p,~.1f,~p",
                                [max(0, Max - Before) / 1048576, T1 - T0, Settle,
                                 max(0, RssMax - RssBefore) / 1048576, Trip])).

%% @doc How long until tier tracing runs again (ms, at most `Timeout'), or
%% -1 when it is not paused now.
-spec resumed(pos_integer()) -> integer().
resumed(Timeout) ->
    case tracing() of
        true -> -1;
        false -> wait_tracing(erlang:monotonic_time(millisecond), Timeout)
    end.

wait_tracing(T0, Timeout) ->
    Waited = erlang:monotonic_time(millisecond) - T0,
    case tracing() orelse Waited >= Timeout of
        true -> Waited;
        false -> timer:sleep(2), wait_tracing(T0, Timeout)
    end.

%% Whether kprof's tier tracing is armed now (its flag in the node).
tracing() ->
    case persistent_term:get({kprof_tiers, settings}, undefined) of
        #{active := Active} -> atomics:get(Active, 1) =:= 1;
        _ -> false
    end.

settle(Before, T1, Deadline) ->
    Now = erlang:monotonic_time(millisecond),
    case erlang:memory(total) - Before < 1048576 orelse Now >= Deadline of
        true -> Now - T1;
        false -> timer:sleep(5), settle(Before, T1, Deadline)
    end.

watch(Parent, Max, Rss, Trip) ->
    receive stop -> Parent ! {max, Max, Rss, element(3, Trip)}
    after 5 -> watch(Parent, max(Max, erlang:memory(total)), max(Rss, rss()), trip(Trip))
    end.

%% {TracedAtStart, T0, TripMs}: the first time tracing is seen paused.
trip({true, T0, -1}) ->
    case tracing() of
        true -> {true, T0, -1};
        false -> {true, T0, erlang:monotonic_time(millisecond) - T0}
    end;
trip(Trip) ->
    Trip.

%% The node's resident memory, bytes (VmRSS).
rss() ->
    {ok, Status} = file:read_file("/proc/self/status"),
    [Kb] = [binary_to_integer(hd(binary:split(string:trim(V), <<" ">>)))
            || <<"VmRSS:", V/binary>> <- binary:split(Status, <<"\n">>, [global])],
    Kb * 1024.

%% @doc `Reqs' calm requests (identity calm), 1 ms apart.
-spec calm(pos_integer()) -> ok.
calm(Reqs) ->
    [begin kprof:do_apply(?MODULE, hot_request, [10], calm), timer:sleep(1) end
     || _ <- lists:seq(1, Reqs)],
    ok.
