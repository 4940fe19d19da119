%%% @doc The end of arming request traces, away from kprof_rtrace's server:
%%% turning the BIFs' call patterns off (kprof_rtrace_patterns:bifs_off/3),
%%% one code barrier each, in a process of its own, while what would start
%%% a trace waits here.
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

-export([new/0, start/4, busy/1, hold/2, take_held/1, defer_meta/4, defer_reply/4, drop_meta/2,
         done/2, wait_over/2, cancel/1]).

%% The longest a trace waits for the BIFs' patterns to go (kprof_rtrace's
%% callers wait 10 s, kprof trace --mfa 5 s by default).
-define(WAIT_MS, 1500).

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
