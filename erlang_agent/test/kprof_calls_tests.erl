%%% @doc EUnit tests of the agent's calls from a user's process to its
%%% servers (kprof_rtrace's calls, kprof:stats/0): a reply that comes after
%%% the call timed out must never reach the caller's mailbox, where a
%%% gen_server would take it for a message of its own. A stand-in server,
%%% registered under the real one's name, answers late.
-module(kprof_calls_tests).

-include_lib("eunit/include/eunit.hrl").

calls_test_() ->
    {inparallel,
     [{timeout, 60,
       ?_assertEqual({ok, []},
                     late_reply(kprof_rtrace, 10500, fun() -> kprof_rtrace:end_trace(<<"x">>) end))},
      {timeout, 60,
       ?_assertEqual({undefined, []}, late_reply(kprof_tiers, 5500, fun kprof:stats/0))}]}.

%% Registers a server as `Name' that answers a call or a report request
%% after `DelayMs' (half a second past the call's timeout); runs `Call' in a
%% fresh process and returns its result and the first message that process
%% gets until a second after the late answer ([] when none).
late_reply(Name, DelayMs, Call) ->
    Server = spawn(fun() ->
                           receive
                               {call, From, Ref, _} -> timer:sleep(DelayMs), From ! {Ref, late};
                               {report, From, Ref} -> timer:sleep(DelayMs), From ! {Ref, late}
                           end,
                           receive stop -> ok end
                   end),
    true = register(Name, Server),
    Self = self(),
    Caller = spawn(fun() ->
                           Result = Call(),
                           %% a receive, not process_info/2: it sees
                           %% messages not yet moved into the queue too
                           Left = receive M -> [M] after 1500 -> [] end,
                           Self ! {self(), Result, Left}
                   end),
    receive
        {Caller, Result, Left} ->
            unregister(Name),
            Server ! stop,
            {Result, Left}
    end.
