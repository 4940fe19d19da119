%%% @doc EUnit tests of the agent's identity functions.
-module(kprof_agent_tests).

-include_lib("eunit/include/eunit.hrl").

version_is_a_dotted_version_test() ->
    ok = application:load(kprof),
    {ok, V} = application:get_key(kprof, vsn),
    ?assertMatch([_, _, _], string:split(V, ".", all)),
    [?assert(lists:all(fun(C) -> C >= $0 andalso C =< $9 end, P))
     || P <- string:split(V, ".", all)].

modules_are_loadable_test() ->
    [?assertMatch({module, M}, code:ensure_loaded(M)) || M <- kprof_agent:modules()].

%% what kprof loads into a node is what the application holds
modules_are_the_applications_test() ->
    _ = application:load(kprof),
    {ok, Modules} = application:get_key(kprof, modules),
    ?assertEqual(lists:sort(Modules), lists:sort(kprof_agent:modules())).

%%% Rounds of ticks (kprof_agent's request protocol, see sampler/agent.h).

%% An agent sampling one parked process, and that process.
start_agent() ->
    Parked = spawn(fun() -> receive stop -> ok end end),
    {ok, Agent} = kprof_agent:start(self(), #{pids => [pid_to_list(Parked)]}),
    {Agent, Parked}.

stop_agent({_Agent, Parked}) ->
    ok = kprof_agent:stop(),
    Parked ! stop.

round(Agent, Ticks, IntervalUs, FirstUs) ->
    Agent ! {sample, self(), 7, Ticks, IntervalUs, FirstUs},
    receive
        {kprof_samples, 7, Missed, Replies} -> {Missed, Replies}
    after 5000 -> error(no_reply)
    end.

round_takes_every_tick_on_its_schedule_test() ->
    {Agent, Parked} = Started = start_agent(),
    Interval = 20000,
    First = erlang:monotonic_time(microsecond) + 5000,
    {Missed, Replies} = round(Agent, 3, Interval, First),
    stop_agent(Started),
    Times = [T || {T, _, _, _, _, _} <- Replies],
    %% the machine may be slow: a late tick is skipped and counted, never lost
    ?assertEqual(3, length(Replies) + Missed),
    ?assertEqual(Times, lists:sort(Times)),
    %% never early by more than the jitter (a tenth) and a millisecond
    [?assert(T >= First + K * Interval - Interval div 10 - 1000)
     || {K, T} <- lists:zip(lists:seq(0, length(Times) - 1), Times), Missed =:= 0],
    %% the parked process: in full the first time, then as its bare pid
    [{_, _, _, [First1], _, _} | Rest] = Replies,
    ?assertMatch({Parked, waiting, _, 0, _, _, _, _, _, _, _, _}, First1),
    [?assertEqual([Parked], Samples) || {_, _, _, Samples, _, _} <- Rest].

late_round_skips_the_ticks_that_passed_test() ->
    {Agent, _} = Started = start_agent(),
    Interval = 10000,
    %% kprof was 10 intervals late asking for this round
    First = erlang:monotonic_time(microsecond) - 10 * Interval,
    {Missed, Replies} = round(Agent, 15, Interval, First),
    stop_agent(Started),
    ?assert(Missed >= 10),
    ?assertEqual(15, length(Replies) + Missed).

stop_ends_a_round_at_once_test() ->
    {Agent, Parked} = start_agent(),
    Ref = monitor(process, Agent),
    %% a round of 10 s: one tick now, the next a second later
    Agent ! {sample, self(), 8, 10, 1000000, erlang:monotonic_time(microsecond)},
    timer:sleep(100),
    Agent ! stop,
    receive {'DOWN', Ref, process, Agent, _} -> ok after 500 -> error(still_running) end,
    receive {kprof_samples, 8, _, _} -> error(replied) after 0 -> ok end,
    Parked ! stop.

%%% Stack queries of several processes go to the agent's stackers.

%% Runs Test(Agent, Busy) with an agent sampling N spinning processes, and
%% stops both whatever happens.
with_busy(N, Test) ->
    Busy = [spawn(fun Spin() -> Spin() end) || _ <- lists:seq(1, N)],
    {ok, Agent} = kprof_agent:start(self(), #{pids => [pid_to_list(P) || P <- Busy]}),
    try Test(Agent, Busy)
    after
        ok = kprof_agent:stop(),
        [exit(P, kill) || P <- Busy]
    end.

stackers(Agent) ->
    {links, Links} = process_info(Agent, links),
    [P || P <- Links, process_info(P, initial_call) =:= {initial_call, {kprof_agent, stacker, 1}}].

several_running_processes_are_sampled_with_their_stacks_test() ->
    with_busy(4, fun(Agent, Busy) ->
        {0, [{_, _, _, Samples, _, _}]} = round(Agent, 1, 1000000, erlang:monotonic_time(microsecond)),
        %% a first sample is a full one, with a stack queried by a stacker
        ?assertEqual(lists:sort(Busy), lists:sort([element(1, S) || S <- Samples])),
        [?assert(is_binary(element(12, S)) andalso byte_size(element(12, S)) > 0) || S <- Samples]
    end).

stackers_end_with_the_agent_test() ->
    {Agent, _} = Started = start_agent(),
    Stackers = stackers(Agent),
    ?assertEqual(erlang:system_info(schedulers_online), length(Stackers)),
    stop_agent(Started),
    timer:sleep(50),
    ?assertEqual([], [S || S <- Stackers, is_process_alive(S)]).

a_dead_stacker_is_replaced_without_waiting_for_its_deadline_test() ->
    with_busy(4, fun(Agent, _Busy) ->
        [Victim | _] = Before = stackers(Agent),
        exit(Victim, kill),
        Start = erlang:monotonic_time(millisecond),
        {0, [_]} = round(Agent, 1, 1000000, erlang:monotonic_time(microsecond)),
        ?assert(erlang:monotonic_time(millisecond) - Start < 1000),
        After = stackers(Agent),
        ?assertEqual(length(Before), length(After)),
        ?assertNot(lists:member(Victim, After))
    end).

spin_until(Ms) ->
    case erlang:monotonic_time(millisecond) < Ms of
        true -> spin_until(Ms);
        false -> ok
    end.

%% A process running at one sample is queried at the next without a cheap
%% read first: what it reports then must be what the process does then.
a_process_that_stopped_running_is_reported_waiting_test() ->
    P = spawn(fun() ->
                      spin_until(erlang:monotonic_time(millisecond) + 500),
                      receive stop -> ok end
              end),
    {ok, Agent} = kprof_agent:start(self(), #{pids => [pid_to_list(P)]}),
    try
        {0, [{_, _, _, [First], _, _}, {_, _, _, [Second], _, _}]} =
            round(Agent, 2, 1000000, erlang:monotonic_time(microsecond)),
        ?assertMatch({P, S, _, _, _, _, _, _, _, _, _, _} when S =:= running; S =:= runnable,
                     First),
        ?assertMatch({P, waiting, _, 0, _, _, _, _, _, _, _, Stack} when is_binary(Stack),
                     Second)
    after
        ok = kprof_agent:stop(),
        P ! stop
    end.

%%% Selection of the top processes.

%% Pids of a round's samples (a sample is a tuple, or the bare pid when
%% nothing changed).
sampled(Replies) ->
    [case S of {P, _, _, _, _, _, _, _, _, _, _, _} -> P; P -> P end
     || {_, _, _, Samples, _, _} <- Replies, S <- Samples].

%% Processes that start running after the agent's selection of its first
%% second are selected within the next second or two, not only at the first
%% regular re-selection (5 s), while the selection is short of --top.
a_short_selection_is_made_again_every_second_test() ->
    {ok, Agent} = kprof_agent:start(self(), #{top => 50, select_by => reductions}),
    %% a round of 5 ticks 100 ms apart, and the processes it sampled
    Round = fun() ->
                    {_, Replies} = round(Agent, 5, 100000, erlang:monotonic_time(microsecond)),
                    sampled(Replies)
            end,
    %% they run a little every 10 ms: enough to be ranked, light on a
    %% machine running other tests
    Tick = fun Tick() -> receive stop -> ok after 10 -> Tick() end end,
    try
        %% about 1.5 s, then the 3 processes start
        _ = [Round() || _ <- lists:seq(1, 3)],
        Tickers = [spawn(Tick) || _ <- lists:seq(1, 3)],
        try
            %% 2.5 s more: the regular re-selection (5 s) has not come yet
            Seen = lists:append([Round() || _ <- lists:seq(1, 5)]),
            ?assertEqual([], Tickers -- Seen)
        after
            [T ! stop || T <- Tickers]
        end
    after
        ok = kprof_agent:stop()
    end.

%% A chooser may answer while the agent waits for kprof's next round. Its
%% answer was once dropped there as an unknown message: the agent kept the
%% window table the chooser had deleted, every later chooser crashed on it
%% (an error report each, every other tick), and the selection was never
%% made again. Rounds here leave pauses in which the choosers answer.
a_selection_made_between_rounds_is_kept_test() ->
    {ok, Agent} = kprof_agent:start(self(), #{top => 5, select_by => reductions,
                                             reselect_ms => 100}),
    Tick = fun Tick() -> receive stop -> ok after 5 -> Tick() end end,
    Round = fun() ->
                    {_, Replies} = round(Agent, 1, 100000, erlang:monotonic_time(microsecond)),
                    timer:sleep(250),
                    sampled(Replies)
            end,
    try
        _ = [Round() || _ <- lists:seq(1, 4)],
        Late = spawn(Tick),
        try
            Seen = lists:append([Round() || _ <- lists:seq(1, 6)]),
            ?assert(lists:member(Late, Seen))
        after
            Late ! stop
        end
    after
        ok = kprof_agent:stop()
    end.

%% Listing every process costs about 0.4 us each (0.2 s at 500,000), and
%% ticks wait for whatever the agent does: the agent never lists them
%% itself, a chooser of its own does, while the ticks go on.
the_agent_never_lists_the_processes_itself_test() ->
    {ok, Agent} = kprof_agent:start(self(), #{top => 20, select_by => reductions,
                                             reselect_ms => 100}),
    Tick = fun Tick() -> receive stop -> ok after 5 -> Tick() end end,
    1 = erlang:trace_pattern({erlang, processes, 0}, true, [local]),
    1 = erlang:trace(Agent, true, [call]),
    try
        %% the first selection, then 10 ticks 50 ms apart: several selections
        _ = round(Agent, 2, 50000, erlang:monotonic_time(microsecond)),
        Late = spawn(Tick),
        try
            {_, Replies} = round(Agent, 10, 50000, erlang:monotonic_time(microsecond)),
            %% selections were made meanwhile: a process started since is sampled
            ?assert(lists:member(Late, sampled(Replies)))
        after
            Late ! stop
        end,
        ?assertEqual([], [C || C = {trace, A, call, _} <- flush_traces(), A =:= Agent])
    after
        erlang:trace(Agent, false, [call]),
        erlang:trace_pattern({erlang, processes, 0}, false, [local]),
        ok = kprof_agent:stop()
    end.

flush_traces() ->
    receive T when element(1, T) =:= trace -> [T | flush_traces()]
    after 0 -> []
    end.
