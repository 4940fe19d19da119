%%% @doc The workload of kprof's integration test nodes (tests/integration/*).
%%%
%%% `main/1', run from `erl -eval', starts under a long-lived owner process:
%%% <ul>
%%% <li>`hot' processes spinning in `kpt_node:hot_spin/2' (pure arithmetic,
%%%   no calls out, so it is the leaf of every stack they show);</li>
%%% <li>`idle' processes parked in a receive, which a top-N by reductions
%%%   must never pick;</li>
%%% <li>one depth probe, parked 200 distinct frames deep, whose
%%%   `current_stacktrace' length tells the node's backtrace_depth without
%%%   changing it (system_flag can only read it by setting it);</li>
%%% </ul>
%%% sets backtrace_depth to `depth' (a distinctive value kprof must restore),
%%% then writes `ready' (a file: `os_pid N', `hot PID', `idle PID' lines) by
%%% a rename, so a test sees it complete. `state/0' is what tests ask through
%%% erl_call. The node halts by itself after `max_lifetime_ms' (10 minutes),
%%% so that a test killed before its cleanup leaves no node behind for long.
-module(kpt_node).

-export([main/1, state/0, hot_spin/2, idle/0, probe_a/1, probe_b/1]).

-define(PROBE_DEPTH, 200).

%% @doc Starts the workload; returns once `ready' is written.
-spec main(#{hot => non_neg_integer(), idle => non_neg_integer(),
             depth => pos_integer(), max_lifetime_ms => pos_integer(),
             ready := string()}) -> ok.
main(Opts = #{ready := Ready}) ->
    Self = self(),
    spawn(fun() -> owner(Self, Opts) end),
    receive {started, Lines} -> ok end,
    ok = file:write_file(Ready ++ ".tmp", Lines),
    ok = file:rename(Ready ++ ".tmp", Ready).

owner(Parent, Opts) ->
    register(kpt_owner, self()),
    erlang:system_flag(backtrace_depth, maps:get(depth, Opts, 13)),
    Hot = [spawn(?MODULE, hot_spin, [I, 0]) || I <- lists:seq(1, maps:get(hot, Opts, 4))],
    Idle = [spawn(?MODULE, idle, []) || _ <- lists:seq(1, maps:get(idle, Opts, 1000))],
    Probe = spawn(?MODULE, probe_a, [?PROBE_DEPTH]),
    persistent_term:put(kpt_probe, Probe),
    Lines = [io_lib:format("os_pid ~s~n", [os:getpid()]),
             [io_lib:format("hot ~p~n", [P]) || P <- Hot],
             [io_lib:format("idle ~p~n", [P]) || P <- Idle]],
    Parent ! {started, Lines},
    erlang:send_after(maps:get(max_lifetime_ms, Opts, 600000), self(), lifetime_over),
    receive
        stop -> ok;
        lifetime_over -> erlang:halt(3)
    end.

%% @doc `{BacktraceDepth, AgentRegistered, KprofProcesses}': the depth as
%% the probe sees it, whether `kprof_agent' is registered, and how many
%% processes have an initial call or current function in kprof_agent.
-spec state() -> {non_neg_integer(), boolean(), non_neg_integer()}.
state() ->
    {current_stacktrace, Stack} =
        process_info(persistent_term:get(kpt_probe), current_stacktrace),
    Kprof = [P || P <- erlang:processes(), is_kprof(P)],
    {length(Stack), whereis(kprof_agent) =/= undefined, length(Kprof)}.

is_kprof(P) ->
    case process_info(P, [initial_call, current_function]) of
        [{initial_call, {kprof_agent, _, _}}, _] -> true;
        [_, {current_function, {kprof_agent, _, _}}] -> true;
        _ -> false
    end.

%% @doc The hot function: spins forever.
-spec hot_spin(integer(), integer()) -> no_return().
hot_spin(N, Acc) ->
    hot_spin(N + 1, (Acc * 31 + N) band 16#ffffff).

%% @doc An idle process.
-spec idle() -> ok.
idle() ->
    receive stop -> ok end.

%% @doc The depth probe: a and b alternate (a run of identical frames would
%% show as one) and wrap the result so that no call is a tail call.
-spec probe_a(non_neg_integer()) -> term().
probe_a(0) -> receive stop -> ok end;
probe_a(N) -> X = probe_b(N - 1), {X}.

%% @doc See probe_a/1.
-spec probe_b(non_neg_integer()) -> term().
probe_b(0) -> receive stop -> ok end;
probe_b(N) -> X = probe_a(N - 1), [X].
