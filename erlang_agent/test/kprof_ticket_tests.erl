%%% @doc EUnit tests of kprof_rtrace_ticket, the begin without a call: a
%%% ticket is taken only while it is published and `max_concurrent' allows
%%% it, and the server settles only when no taken begin is in flight (what
%%% keeps it from disarming under a trace that is beginning). The ticket is
%%% forced on whatever this node's release (new/2). A rate-limited take
%%% takes its token from the server's bucket (kprof_rtrace_rate), which
%%% refuses past its depth and refills at its rate.
-module(kprof_ticket_tests).

-include_lib("eunit/include/eunit.hrl").

content() -> {kprof_tracing:closed(), undefined, true}.

%% The test process is the server (it owns the table); `Fun' runs in a
%% fresh one, so that the table goes with it.
with_server(Fun) ->
    {Pid, Ref} = spawn_monitor(fun() -> exit({done, Fun(kprof_rtrace_ticket:new(true, kprof_rtrace_rate:new()))}) end),
    receive {'DOWN', Ref, process, Pid, Why} -> ?assertEqual({done, ok}, Why) end.

none_until_published_test() ->
    ?assertEqual(none, kprof_rtrace_ticket:take(8, #{})), % no server at all
    with_server(fun(T0) ->
                        ?assertEqual(none, kprof_rtrace_ticket:take(8, #{})),
                        _ = kprof_rtrace_ticket:publish(content(), T0),
                        Self = self(),
                        ?assertMatch({ok, Self, {_, undefined, true}, _},
                                     kprof_rtrace_ticket:take(8, #{})),
                        ok
                end).

settles_once_registered_test() ->
    with_server(fun(T0) ->
                        T1 = kprof_rtrace_ticket:publish(content(), T0),
                        {ok, _, _, _} = kprof_rtrace_ticket:take(8, #{}),
                        %% taken, its message not read: the server waits
                        {false, T2} = kprof_rtrace_ticket:settled(T1),
                        %% withdrawn by settled/1: nothing more is taken
                        ?assertEqual(none, kprof_rtrace_ticket:take(8, #{})),
                        {false, T3} = kprof_rtrace_ticket:settled(T2),
                        T4 = kprof_rtrace_ticket:registered(1, T3),
                        {true, T5} = kprof_rtrace_ticket:settled(T4),
                        %% published again, a killed taker is forgiven
                        T6 = kprof_rtrace_ticket:publish(content(), T5),
                        {ok, _, _, _} = kprof_rtrace_ticket:take(8, #{}),
                        {false, T7} = kprof_rtrace_ticket:settled(T6),
                        {true, _} = kprof_rtrace_ticket:settled(kprof_rtrace_ticket:forgive(T7)),
                        ok
                end).

%% A trace begun with no message runs until its process ends it, or its
%% timer fires at the server, which then ends its count; forgiving the
%% begins in flight leaves it running.
runs_without_message_test() ->
    with_server(fun(T0) ->
                        T1 = kprof_rtrace_ticket:publish(content(), T0),
                        Self = self(),
                        {ok, Self, _, C} = kprof_rtrace_ticket:take(8, #{}),
                        ?assert(kprof_rtrace_ticket:in_flight(T1)),
                        Run = kprof_rtrace_ticket:run(C, Self, <<"a">>, 60000),
                        %% running, no longer in flight: nothing to forgive
                        ?assertNot(kprof_rtrace_ticket:in_flight(T1)),
                        {false, T2} = kprof_rtrace_ticket:settled(T1),
                        {false, T3} = kprof_rtrace_ticket:settled(kprof_rtrace_ticket:forgive(T2)),
                        %% it counts toward max_concurrent
                        T4 = kprof_rtrace_ticket:publish(content(), T3),
                        ?assertEqual(none, kprof_rtrace_ticket:take(1, #{})),
                        ok = kprof_rtrace_ticket:run_ended(Run),
                        {true, T5} = kprof_rtrace_ticket:settled(T4),
                        %% past its duration: the server's message ends it,
                        %% and the process's own end does not again
                        T6 = kprof_rtrace_ticket:publish(content(), T5),
                        {ok, _, _, C} = kprof_rtrace_ticket:take(8, #{}),
                        Run2 = kprof_rtrace_ticket:run(C, Self, <<"b">>, 1),
                        receive {run_timeout, <<"b">>, Self} -> ok after 1000 -> error(no_timeout) end,
                        {false, T7} = kprof_rtrace_ticket:settled(T6),
                        T8 = kprof_rtrace_ticket:timed_out(T7),
                        ok = kprof_rtrace_ticket:run_ended(Run2),
                        {true, T9} = kprof_rtrace_ticket:settled(T8),
                        %% one running again: a double end would hide it
                        T10 = kprof_rtrace_ticket:publish(content(), T9),
                        {ok, _, _, C} = kprof_rtrace_ticket:take(8, #{}),
                        _ = kprof_rtrace_ticket:run(C, Self, <<"c">>, 60000),
                        {false, _} = kprof_rtrace_ticket:settled(T10),
                        ok
                end).

max_concurrent_test() ->
    with_server(fun(T0) ->
                        T1 = kprof_rtrace_ticket:held(1, kprof_rtrace_ticket:publish(content(), T0)),
                        {ok, _, _, _} = kprof_rtrace_ticket:take(2, #{}), % 1 held + this one
                        ?assertEqual(none, kprof_rtrace_ticket:take(2, #{})), % and one in flight
                        T2 = kprof_rtrace_ticket:registered(2, T1),
                        ?assertEqual(none, kprof_rtrace_ticket:take(2, #{})),
                        _ = kprof_rtrace_ticket:held(1, T2),
                        {ok, _, _, _} = kprof_rtrace_ticket:take(2, #{}),
                        ok
                end).

off_before_25_3_test() ->
    ?assertEqual(off, kprof_rtrace_ticket:new(false, kprof_rtrace_rate:new())),
    ?assertEqual({true, off}, kprof_rtrace_ticket:settled(off)),
    ?assertEqual(off, kprof_rtrace_ticket:publish(content(), off)).

rate_limited_take_test() ->
    with_server(fun(T0) ->
                        T1 = kprof_rtrace_ticket:publish(content(), T0),
                        %% a bucket of one token a second: one begin, then none
                        {ok, _, _, _} = kprof_rtrace_ticket:take(8, #{rate_limit => 1}),
                        ?assertEqual(rate_limited, kprof_rtrace_ticket:take(8, #{rate_limit => 1})),
                        %% the refused one is not in flight: one registered
                        %% begin and the server settles
                        {true, _} = kprof_rtrace_ticket:settled(
                                      kprof_rtrace_ticket:registered(1, T1)),
                        ok
                end).

bucket_depth_and_refill_test() ->
    B = kprof_rtrace_rate:new(),
    %% 100 a second: 100 at once, then one each 10 ms since the first
    T0 = erlang:monotonic_time(millisecond),
    ?assertEqual(100, length([ok || _ <- lists:seq(1, 150), kprof_rtrace_rate:take(B, 100)])),
    ?assertNot(kprof_rtrace_rate:take(B, 100)),
    timer:sleep(25),
    Refilled = length([ok || _ <- lists:seq(1, 10), kprof_rtrace_rate:take(B, 100)]),
    Elapsed = erlang:monotonic_time(millisecond) - T0,
    ?assert(Refilled >= 2 andalso Refilled =< Elapsed div 10 + 1),
    %% a rate below one a second still holds one token; no rate, none
    ?assert(kprof_rtrace_rate:take(kprof_rtrace_rate:new(), 0.5)),
    ?assertNot(kprof_rtrace_rate:take(kprof_rtrace_rate:new(), 0)),
    ?assertNot(kprof_rtrace_rate:take(kprof_rtrace_rate:new(), undefined)).

racing_takers_share_the_bucket_test() ->
    B = kprof_rtrace_rate:new(),
    Self = self(),
    Pids = [spawn(fun() -> Self ! {self(), [ok || _ <- lists:seq(1, 200),
                                                 kprof_rtrace_rate:take(B, 50)]} end)
            || _ <- lists:seq(1, 4)],
    Taken = lists:sum([receive {P, L} -> length(L) end || P <- Pids]),
    %% the depth, and at most a token or two refilled while they ran
    ?assert(Taken >= 50 andalso Taken =< 52).
