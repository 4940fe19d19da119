%%% @doc EUnit tests of kprof_rtrace_ticket, the begin without a call: a
%%% ticket is taken only while it is published and `max_concurrent' allows
%%% it, and the server settles only when no taken begin is in flight (what
%%% keeps it from disarming under a trace that is beginning). The ticket is
%%% forced on whatever this node's release (new/1).
-module(kprof_ticket_tests).

-include_lib("eunit/include/eunit.hrl").

content() -> {kprof_tracing:closed(), undefined, true}.

%% The test process is the server (it owns the table); `Fun' runs in a
%% fresh one, so that the table goes with it.
with_server(Fun) ->
    {Pid, Ref} = spawn_monitor(fun() -> exit({done, Fun(kprof_rtrace_ticket:new(true))}) end),
    receive {'DOWN', Ref, process, Pid, Why} -> ?assertEqual({done, ok}, Why) end.

none_until_published_test() ->
    ?assertEqual(none, kprof_rtrace_ticket:take(8)), % no server at all
    with_server(fun(T0) ->
                        ?assertEqual(none, kprof_rtrace_ticket:take(8)),
                        _ = kprof_rtrace_ticket:publish(content(), T0),
                        Self = self(),
                        ?assertEqual({ok, Self, content()}, kprof_rtrace_ticket:take(8)),
                        ok
                end).

settles_once_registered_test() ->
    with_server(fun(T0) ->
                        T1 = kprof_rtrace_ticket:publish(content(), T0),
                        {ok, _, _} = kprof_rtrace_ticket:take(8),
                        %% taken, its message not read: the server waits
                        {false, T2} = kprof_rtrace_ticket:settled(T1),
                        %% withdrawn by settled/1: nothing more is taken
                        ?assertEqual(none, kprof_rtrace_ticket:take(8)),
                        {false, T3} = kprof_rtrace_ticket:settled(T2),
                        T4 = kprof_rtrace_ticket:registered(1, T3),
                        {true, T5} = kprof_rtrace_ticket:settled(T4),
                        %% published again, a killed taker is forgiven
                        T6 = kprof_rtrace_ticket:publish(content(), T5),
                        {ok, _, _} = kprof_rtrace_ticket:take(8),
                        {false, T7} = kprof_rtrace_ticket:settled(T6),
                        {true, _} = kprof_rtrace_ticket:settled(kprof_rtrace_ticket:forgive(T7)),
                        ok
                end).

max_concurrent_test() ->
    with_server(fun(T0) ->
                        T1 = kprof_rtrace_ticket:held(1, kprof_rtrace_ticket:publish(content(), T0)),
                        {ok, _, _} = kprof_rtrace_ticket:take(2), % 1 held + this one
                        ?assertEqual(none, kprof_rtrace_ticket:take(2)), % and one in flight
                        T2 = kprof_rtrace_ticket:registered(2, T1),
                        ?assertEqual(none, kprof_rtrace_ticket:take(2)),
                        _ = kprof_rtrace_ticket:held(1, T2),
                        {ok, _, _} = kprof_rtrace_ticket:take(2),
                        ok
                end).

off_before_25_3_test() ->
    ?assertEqual(off, kprof_rtrace_ticket:new(false)),
    ?assertEqual({true, off}, kprof_rtrace_ticket:settled(off)),
    ?assertEqual(off, kprof_rtrace_ticket:publish(content(), off)).
