%%% @doc Arming request traces: kprof's trace session and the call patterns
%%% of every loaded function (which ones: kprof_rtrace_patterns), from the
%%% first trace's begin to the last one's linger, the BIFs' patterns turned
%%% off away from kprof_rtrace's server, and the ticket (kprof_rtrace_ticket)
%%% the server publishes while a trace can begin without calling it.
%%%
%%% == The patterns ==
%%% A begin arms the patterns if they are not armed (arm/1): local call
%%% patterns on every loaded function that has no call pattern of someone
%%% else, but kprof's own and BIFs (kprof_rtrace_patterns). They exist only
%%% while traces run: after the last trace's end they linger `linger_ms'
%%% (release/1), then go (disarm/1, the node left as found:
%%% kprof_rtrace_guard). On OTP 27 and later they are in kprof's own trace
%%% session (kprof_tracing), open while they are armed; its tracer is fixed,
%%% the trace port or the NIF once it serves, and a session opened before the
%%% NIF is replaced at its next release (nif_session/1). Before OTP 27 all
%%% tracers share one session. The settings `bifs' and `otp_calls' are read
%%% when the patterns are armed, not per trace (arming_settings/2).
%%%
%%% == The ticket ==
%%% The server publishes it while a trace can begin as its own begin would
%%% (publish/1); it withdraws it, and waits for the begins in flight, before
%%% what needs no begin on its way: disarming, clearing the flags of the
%%% processes following reached, stopping when idle (settled/1).
%%%
%%% == The BIFs' patterns ==
%%% The end of arming, turning the BIFs' call patterns off
%%% (kprof_rtrace_patterns:bifs_off/3), one code barrier each, runs in a
%%% process of its own, while what would start a trace waits here (start/4
%%% to cancel/1).
%%%
%%% A code barrier waits until every scheduler of the node has passed a
%%% point of thread progress. With the node's schedulers busy and the host
%%% loaded, each takes milliseconds: the 450 BIFs of a plain node took 0.8 s
%%% in a node whose schedulers spin on an idle host, 3.6 s on a loaded one,
%%% and past the 10 s its callers wait (the setup of `kprof trace') with an
%%% Elixir node's. The server answers its callers meanwhile; a trace begun
%%% before the BIFs are off would show them as frames of their own (and
%%% cost more), so begin_trace calls are held here, and the meta patterns of
%%% `--mfa' (which begin traces from the match spec) and the answer that
%%% says they are set wait here too, until
%%% the process is done, or for ?WAIT_MS at most: on a host too loaded to
%%% turn them all off by then, traces begin with the BIFs left still traced
%%% (frames of their own, exact but dearer) while the process goes on.
-module(kprof_rtrace_arming).

%% the BIFs' patterns, and what waits for them
-export([new/0, start/4, busy/1, hold/2, take_held/1, defer_meta/4, defer_reply/4, drop_meta/2,
         done/2, wait_over/2, cancel/1]).
%% the patterns and the ticket, in kprof_rtrace's server
-export([arm/1, arming_settings/2, tracer/1, nif_session/1, release_idle/1, lingered/1,
         disarm/1, arm_loaded/2, publish/1, settled/1, recheck/1]).

-include("kprof_rtrace.hrl").

%% The longest a trace waits for the BIFs' patterns to go (kprof_rtrace's
%% callers wait 10 s, kprof trace --mfa 5 s by default).
-define(WAIT_MS, 1500).
%% The longest the patterns linger after the last trace, whatever
%% `linger_ms' says: armed, they cost every call in the node a check.
-define(MAX_LINGER_MS, 600000).
%% A begin taken with the ticket whose message has not come for this long
%% is a process killed on its way: forgotten (kprof_rtrace_ticket:forgive/1).
-define(FORGIVE_MS, 1000).

-type call() :: {From :: pid() | reference(), Ref :: reference(), Request :: term()}.
%% what is done then, in order: a meta pattern set, a call answered
-type then() :: {meta, kprof_tracing:session(), mfa(), term()}
              | {reply, pid() | reference(), reference(), term()}.
-record(arming, {helper = none :: none | {pid(), reference()},
                 waiting = false :: boolean(), % traces wait for the helper
                 held = [] :: [call()],     % newest first
                 then = [] :: [then()]}).   % newest first
-opaque arming() :: #arming{}.
-export_type([arming/0]).

%% @doc Nothing under way, nothing waiting.
-spec new() -> arming().
new() ->
    #arming{}.

%% @doc Turns off the patterns of `Bifs' in `Session' (set/2 armed `Set'),
%% in a process linked to the caller (killed with it) and monitored: its
%% 'DOWN' goes to done/2, and `{arming_wait_over, MRef}' after ?WAIT_MS to
%% wait_over/2. What waits in `A' goes on waiting.
-spec start(kprof_tracing:session(), kprof_rtrace_patterns:armed_set(), [mfa()], arming()) ->
          arming().
start(Session, Set, Bifs, A = #arming{helper = none}) ->
    {_, MRef} = Helper = spawn_opt(kprof_rtrace_patterns, bifs_off, [Session, Set, Bifs],
                                   [link, monitor]),
    _ = erlang:send_after(?WAIT_MS, self(), {arming_wait_over, MRef}),
    A#arming{helper = Helper, waiting = true}.

%% @doc Whether traces wait for the BIFs' patterns to go.
-spec busy(arming()) -> boolean().
busy(#arming{waiting = Waiting}) ->
    Waiting.

%% @doc Holds a call that would begin a trace, until done/2.
-spec hold(call(), arming()) -> arming().
hold(Call, A = #arming{held = Held}) ->
    A#arming{held = [Call | Held]}.

%% @doc The calls held, oldest first (to begin their traces another way:
%% the patterns went before the BIFs were off); none held after.
-spec take_held(arming()) -> {[call()], arming()}.
take_held(A = #arming{held = Held}) ->
    {lists:reverse(Held), A#arming{held = []}}.

%% @doc A meta pattern to set at done/2 (`--mfa''s, which begins traces).
-spec defer_meta(kprof_tracing:session(), mfa(), term(), arming()) -> arming().
defer_meta(Session, MFA, Spec, A = #arming{then = Then}) ->
    A#arming{then = [{meta, Session, MFA, Spec} | Then]}.

%% @doc An answer to send at done/2, after the meta patterns deferred
%% before it: `kprof trace --mfa' says it traces once it does.
-spec defer_reply(pid() | reference(), reference(), term(), arming()) -> arming().
defer_reply(From, Ref, Reply, A = #arming{then = Then}) ->
    A#arming{then = [{reply, From, Ref, Reply} | Then]}.

%% @doc The meta pattern of `MFA' is no longer wanted.
-spec drop_meta(mfa(), arming()) -> arming().
drop_meta(MFA, A = #arming{then = Then}) ->
    A#arming{then = [T || T <- Then, element(1, T) =/= meta orelse element(3, T) =/= MFA]}.

%% @doc A monitor's 'DOWN' came: when it is the helper's (done, or failed
%% halfway: some BIFs then stay traced, which costs but is exact), what
%% was deferred and the calls held, oldest first, and nothing waiting any
%% more; `false' for another monitor's.
-spec done(reference(), arming()) -> {[then()], [call()], arming()} | false.
done(MRef, #arming{helper = {_, MRef}, held = Held, then = Then}) ->
    {lists:reverse(Then), lists:reverse(Held), #arming{}};
done(_, _) ->
    false.

%% @doc `{arming_wait_over, MRef}' came: when the helper it names still
%% runs, what waited goes as done/2 gives it, and nothing waits for the
%% helper any more; else `false'.
-spec wait_over(reference(), arming()) -> {[then()], [call()], arming()} | false.
wait_over(MRef, #arming{helper = Helper = {_, MRef}, held = Held, then = Then}) ->
    {lists:reverse(Then), lists:reverse(Held), #arming{helper = Helper}};
wait_over(_, _) ->
    false.

%% @doc The patterns are about to go: the helper stops before it can touch
%% them again. What waits stays, for the next arming.
-spec cancel(arming()) -> arming().
cancel(A = #arming{helper = none}) ->
    A;
cancel(A = #arming{helper = {Pid, MRef}}) ->
    unlink(Pid),
    exit(Pid, kill),
    receive {'DOWN', MRef, process, Pid, _} -> ok end,
    A#arming{helper = none, waiting = false}.

%%% ---------------------------------------------------------------------
%%% The patterns, in kprof_rtrace's server

%% @doc The settings read when the patterns are armed (`bifs', `otp_calls'):
%% those of the call that arms them (`Options'), else the application
%% environment's.
-spec arming_settings(map(), #state{}) -> #state{}.
arming_settings(Options, S = #state{settings = Settings}) ->
    S#state{settings = maps:merge(Settings, maps:with([bifs, otp_calls], Options))}.

%% @doc Arms the patterns, with the tracer a session opened now gets, unless
%% they are armed: then they stop lingering.
-spec arm(#state{}) -> #state{}.
arm(S) ->
    arm(S, tracer(S)).

arm(S = #state{armed = true}, _) ->
    S#state{linger = undefined};
arm(S = #state{guard = Guard}, Tracer) ->
    erlang:send_after(?WATCH_MS, self(), watch),
    Session = kprof_tracing:open(kprof_rtrace, Tracer),
    OtpCalls = maps:get(otp_calls, S#state.settings, true) =/= false,
    Set = kprof_rtrace_patterns:choose(Session, OtpCalls),
    %% modules loaded during a trace are traced too, as eflame does, unless
    %% someone else has a pattern for new modules, or OTP's are left out
    %% (OTP's applications load theirs as they first serve: inets at its
    %% first request); then a module is traced within ?LOADED_MS of its
    %% loading (arm_loaded/2)
    OnLoad = case OtpCalls andalso kprof_tracing:info(Session, on_load, traced) of
                 {traced, false} -> erlang:loaded();
                 _ -> false
             end,
    Loaded = case {Set, OnLoad} of
                 {{_, _}, false} ->
                     Ref = make_ref(),
                     erlang:send_after(?LOADED_MS, self(), {arm_loaded, Ref}),
                     {Ref, maps:from_keys(erlang:loaded(), []), OtpCalls,
                      maps:get(bifs, S#state.settings, false) =:= true};
                 _ ->
                     undefined
             end,
    Owned = {Set, OnLoad, false},
    %% the guard learns the set before it is set: killed halfway, this
    %% server leaves nothing the guard does not remove
    Guard ! {owned, Session, Owned, kprof_rtrace_guard:metas(S)},
    OnLoad =/= false andalso kprof_tracing:function(Session, on_load, true, [local]),
    {Bifs, S1} = bifs(S),
    ok = kprof_rtrace_patterns:set(Session, Set),
    Arming = case Bifs of
                 [] -> S1#state.arming;
                 _ -> start(Session, Set, Bifs, S1#state.arming)
             end,
    kprof_rtrace_follow:arm_follow(S1#state{armed = true, owned = Owned, session = Session,
                                            arming = Arming, baseline = erlang:memory(system),
                                            loaded = Loaded}).

%% @doc `{arm_loaded, Ref}' came: while the patterns armed with `Ref' are
%% (arm/1), the modules loaded since get kprof's pattern as the arming
%% would have given it (kprof_rtrace_patterns:newly_loaded/4), the guard
%% told first; then again ?LOADED_MS later. About 50 us each time in a
%% node of 1,150 modules, none new (0.01% of a core).
-spec arm_loaded(reference(), #state{}) -> #state{}.
arm_loaded(Ref, S = #state{armed = true, loaded = {Ref, Known, OtpCalls, Bifs},
                           owned = {{Mods0, MFAs0}, OnLoad, Follow}, session = Session}) ->
    {Known1, Added} = kprof_rtrace_patterns:newly_loaded(Session, Known, OtpCalls, Bifs),
    S1 = case Added of
             {[], []} ->
                 S;
             {Mods, MFAs} ->
                 Owned = {{Mods ++ Mods0, MFAs ++ MFAs0}, OnLoad, Follow},
                 S#state.guard ! {owned, Session, Owned, kprof_rtrace_guard:metas(S)},
                 ok = kprof_rtrace_patterns:add(Session, Added),
                 S#state{owned = Owned}
         end,
    erlang:send_after(?LOADED_MS, self(), {arm_loaded, Ref}),
    S1#state{loaded = {Ref, Known1, OtpCalls, Bifs}};
arm_loaded(_, S) ->
    S.

%% The BIFs that get no call pattern: none with the setting `bifs', else
%% all of them (listed once per server, 0.75 ms; turned off one by one at
%% each arming, 5 ms). A BIF's call is then no frame of its own: its time
%% is its caller's. Each traced call costs the process two events, about
%% 1 us; the sample app's key-value request calls 12 BIFs (ets, binary,
%% monitor, send). Measured in one node, the BIFs' patterns turned off
%% midway (medians of 1001, three rounds each): traced alone it took +45 to
%% +54 us with them, +33 to +36 without; following its messages, +95 to
%% +102 and +50 to +73.
bifs(S = #state{settings = #{bifs := true}}) ->
    {[], S};
bifs(S = #state{bifs = undefined}) ->
    Bifs = kprof_rtrace_patterns:builtins(),
    {Bifs, S#state{bifs = Bifs}};
bifs(S = #state{bifs = Bifs}) ->
    {Bifs, S}.

%% @doc The tracer a session opened now gets: the NIF once it serves.
-spec tracer(#state{}) -> port() | {kprof_tracer, []}.
tracer(#state{nif = true}) -> ?NIF;
tracer(#state{port = Port}) -> Port.

%% @doc Once the NIF serves: new traces in the shared session go through it
%% at once; kprof's own session, whose tracer is fixed, is closed if it is
%% idle, else at its release/1 (arm/1 opens the next one with the NIF).
-spec nif_session(#state{}) -> #state{}.
nif_session(S = #state{armed = false}) ->
    S;
nif_session(S = #state{session = Session}) ->
    case {kprof_tracing:shared(Session), maps:size(S#state.traces), S#state.calls} of
        {true, _, _} -> S#state{session = kprof_tracing:open(kprof_rtrace, tracer(S))};
        {false, 0, []} ->
            case settled(S) of
                {true, S1} -> disarm(S1#state{linger = undefined});
                {false, S1} -> S1 % at its release/1
            end;
        _ -> S
    end.

%% @doc No trace runs and no calls are traced: see release/1.
-spec release_idle(#state{}) -> #state{}.
release_idle(S = #state{traces = Traces, calls = []}) when map_size(Traces) =:= 0 ->
    release(S);
release_idle(S) ->
    S.

%% No trace runs and no calls are traced: the patterns stay armed for
%% `linger_ms' more (0: none), so that a trace soon after does not pay for
%% arming every loaded function (about 1 ms, on the request's path:
%% begin_trace is a call), nor this server for disarming them. Armed
%% patterns cost untraced code a breakpoint check per call meanwhile
%% (tests/bench/rtrace_overhead measures it).
%% While they linger, a trace's end neither withdraws the ticket (two
%% writes to its table, and a begin meanwhile would make the call) nor
%% starts a timer of its own: only their going needs no begin in flight
%% (lingered/1).
%% A session of kprof's own whose tracer is the port, now that the NIF
%% serves, goes at once (see nif_session/1). Listening (kprof_rtrace_follow)
%% keeps them.
release(S = #state{listen_until = Until}) when Until =/= 0 ->
    S;
release(S0 = #state{session = Session}) ->
    %% the application environment as it is now, as for a begin: traces
    %% begun with the ticket did not read it here
    S = #state{settings = Settings} = S0#state{settings = kprof_rtrace:settings(#{})},
    Stale = not kprof_tracing:shared(Session) andalso kprof_tracing:tracer(Session) =/= tracer(S),
    case maps:get(linger_ms, Settings, 0) of
        Ms when is_integer(Ms), Ms > 0, not Stale ->
            linger(erlang:monotonic_time(millisecond) + min(Ms, ?MAX_LINGER_MS), S);
        _ ->
            case settled(S#state{linger = undefined}) of
                {true, S1} -> disarm(S1);
                {false, S1} -> S1 % recheck/1 comes back
            end
    end.

%% The patterns stay until `Until': one timer at a time, however many
%% traces end meanwhile (each end moves `Until' on).
linger(Until, S = #state{linger_timer = undefined}) ->
    Ref = make_ref(),
    erlang:send_after(max(0, Until - erlang:monotonic_time(millisecond)), self(), {linger, Ref}),
    S#state{linger = Until, linger_timer = Ref};
linger(Until, S) ->
    S#state{linger = Until}.

%% @doc The linger's timer is due: a trace since (linger undefined) or an
%% end that moved it on keeps the patterns; else they go once no begin with
%% the ticket is in flight and no trace begun with no message runs (else,
%% see settled/1, the patterns linger again from a later release/1).
-spec lingered(#state{}) -> #state{}.
lingered(S = #state{linger = undefined}) ->
    S;
lingered(S = #state{linger = Until}) ->
    case Until - erlang:monotonic_time(millisecond) > 0 of
        true ->
            linger(Until, S);
        false ->
            case settled(S#state{linger = undefined}) of
                {true, S1} -> disarm(kprof_rtrace_follow:quiet(S1));
                {false, S1} -> S1
            end
    end.

%% @doc The patterns go: kprof's own session goes whole; in the shared one,
%% what kprof set (kprof_rtrace_guard:disarm_owned/2).
-spec disarm(#state{}) -> #state{}.
disarm(S = #state{armed = false}) -> S;
disarm(S0 = #state{session = Session, owned = {_, _, Follow}}) ->
    %% the BIFs' patterns stop going first; calls held for them begin their
    %% traces later, with patterns armed again
    S = S0#state{arming = cancel(S0#state.arming)},
    _ = case take_held(S#state.arming) of
            {[], _} -> ok;
            _ -> self() ! release_held
        end,
    %% the system seq tracer is no session's: kprof's own closing leaves it
    _ = case kprof_tracing:shared(Session) of
            true ->
                kprof_rtrace_guard:disarm_owned(Session, S#state.owned),
                kprof_rtrace_flags:clear_kept(Session, S#state.port);
            false -> Follow andalso kprof_rtrace_guard:release_seq_tracer()
        end,
    Closed = kprof_tracing:close(Session),
    S#state.guard ! {owned, Closed, ?NOTHING_OWNED, kprof_rtrace_guard:metas(S)},
    S#state{armed = false, owned = ?NOTHING_OWNED, session = Closed, loaded = undefined}.

%%% ---------------------------------------------------------------------
%%% The ticket, in kprof_rtrace's server

%% @doc The ticket is published while a trace can begin as the server's
%% own begin (kprof_rtrace_traces:start_armed/4) begins it: patterns armed
%% (BIFs off), events through the NIF, the session's tracer the NIF;
%% withdrawn otherwise. The count of traces held with it. At each turn of
%% the server's loop.
-spec publish(#state{}) -> #state{}.
publish(S = #state{armed = Armed, nif = Nif, session = Session, traces = Traces}) ->
    Content = case Armed andalso Nif andalso not busy(S#state.arming)
                  andalso kprof_tracing:tracer(Session) =:= ?NIF of
                  true -> {Session, S#state.port, kprof_rtrace_follow:following(S)};
                  false -> none
              end,
    S#state{ticket = kprof_rtrace_ticket:held(map_size(Traces),
                                              kprof_rtrace_ticket:publish(Content,
                                                                          S#state.ticket))}.

%% @doc Withdraws the ticket (publish/1 puts it back at the loop's next
%% turn); true when no begin with it is in flight and no trace begun with
%% no message runs. A begin in flight: its message comes soon, and the
%% server checks again in 1 ms (recheck/1), forgiving it past ?FORGIVE_MS.
%% Only traces running: each one's end, or its timer, releases again; and
%% the wait for begins in flight is over (they went on as such traces), so
%% that one later is not forgiven as if it had waited since.
-spec settled(#state{}) -> {boolean(), #state{}}.
settled(S) ->
    case kprof_rtrace_ticket:settled(S#state.ticket) of
        {true, T} ->
            {true, S#state{ticket = T, unsettled = undefined}};
        {false, T} ->
            case kprof_rtrace_ticket:in_flight(T) of
                true ->
                    Unsettled = case S#state.unsettled of
                                    undefined -> {erlang:monotonic_time(millisecond), false};
                                    U -> U
                                end,
                    {false, S#state{ticket = T, unsettled = due(Unsettled)}};
                false ->
                    {false, S#state{ticket = T, unsettled = undefined}}
            end
    end.

due({Since, false}) ->
    erlang:send_after(1, self(), recheck),
    {Since, true};
due(Due) ->
    Due.

%% @doc `recheck' came: what waited for the begins in flight runs again,
%% the reached processes' flags, the linger.
-spec recheck(#state{}) -> #state{}.
recheck(S = #state{unsettled = undefined}) ->
    S;
recheck(S = #state{unsettled = {Since, _}}) ->
    Ticket = case erlang:monotonic_time(millisecond) - Since > ?FORGIVE_MS of
                 true -> kprof_rtrace_ticket:forgive(S#state.ticket);
                 false -> S#state.ticket
             end,
    release_idle(kprof_rtrace_follow:untrace_reached(S#state{unsettled = {Since, false},
                                                             ticket = Ticket})).
