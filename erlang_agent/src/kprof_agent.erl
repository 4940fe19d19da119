%%% @doc The part of kprof that runs inside the profiled node.
%%%
%%% kprof's rule is that the target node only emits: parsing, aggregation,
%%% formatting and files happen in the C program. This module is what the C
%%% program loads into a node (with code:load_binary/3, from the copy embedded
%%% in the kprof binary) and then drives with batched requests.
%%%
%%% == Processes ==
%%% `start/2' spawns these processes:
%%% <ul>
%%% <li>the <em>agent</em>, registered as `kprof_agent', running at high
%%%   priority (at normal priority a batch waits behind busy processes). It
%%%   answers `{sample, From, Seq, Ticks, IntervalUs, FirstUs}' requests: it
%%%   takes `Ticks' samples of every selected process, `IntervalUs' apart from
%%%   `FirstUs' on the node's monotonic clock, and sends them in one
%%%   message. At 100 Hz one request per tick cost kprof a wake-up, a send
%%%   and a receive per tick (about a quarter of its CPU) and the node a
%%%   distribution message to decode; a request per round of ticks does
%%%   not.</li>
%%% <li>the agent's <em>stackers</em>, one per online scheduler (at most
%%%   ?MAX_STACKERS), linked to it, at high priority. In a tick with more
%%%   stack queries than the agent can wait for in turn (see ?SLICE_US), they
%%%   query the stacks of the processes that ran, in parallel, because each
%%%   query waits for its process to be scheduled. They live as long as the agent: a
%%%   helper spawned per query cost the node a spawn, an exit and two more
%%%   process switches per sample.</li>
%%% <li>a <em>chooser</em> for each new selection (kprof_select), linked to
%%%   the agent, which lists and ranks every process and ends: listing a
%%%   large node's processes (0.2 s for 500,000) never delays a tick.</li>
%%% <li>the <em>guard</em>, which owns every node-global setting kprof changes
%%%   (today: `backtrace_depth'). It monitors the agent and the C node, and
%%%   restores the settings and kills the agent as soon as either goes away, so
%%%   a `kill -9' of kprof leaves the node as it found it (observer_backend
%%%   does the same for its flags). kprof_unload waits for it to end before
%%%   it unloads kprof's modules.</li>
%%% </ul>
%%%
%%% == Cost ==
%%% `process_info(P, current_stacktrace)' makes P answer by itself, which
%%% wakes a parked process; reductions, status and message queue length are
%%% read without it. So each sample reads those first and asks for the stack,
%%% `memory' and the garbage-collection figures only when the process has run
%%% since its previous sample; otherwise the previous stack and sizes are
%%% reused (`same' for the stack): a process that did not run did not change
%%% its heap or collect. A stack query itself adds one reduction to the target,
%%% which is why "has not run" means "reductions at most one more". Reading a
%%% running process makes the agent wait for it, so a process that was running
%%% or runnable at its previous sample goes straight to the stack query, which
%%% reads the same items.
%%%
%%% The selection of the top processes lists every process, so it runs only
%%% every `reselect_ms', in a chooser, and is cached in between: the agent
%%% samples the previous selection until the new one arrives. Until it holds
%%% `top' processes, for at most `reselect_ms', it is made again every
%%% second, over a window that grows from the agent's start. Everything is
%%% bounded: the selection by `top', the MFA dictionary by ?MAX_MFAS (then
%%% reset and resent), the stack depth by `depth'.
%%%
%%% == One agent, many releases ==
%%% The same .beam files load into nodes of every release from the one they
%%% were compiled for to OTP 29 (CMakeLists.txt: for OTP 25 when built with
%%% OTP 25 to 28, for OTP 26 when built with OTP 29). No binary pattern
%%% matching in the agent's modules: OTP 25 compiles it to instructions
%%% OTP 29 no longer loads, and later compilers to bs_match, which OTP 25
%%% does not know. Binaries are built, compared and read with the binary
%%% module instead (tests/support/agent_portable.escript checks the .beam
%%% files; the OTP matrix loads them).
-module(kprof_agent).

-export([modules/0, start/2, stop/0, labels/1, ports/0]).
%% spawned
-export([agent_init/3, guard_init/4, stacker/1]).

-define(MAX_MFAS, 100000).
-define(MAX_TOP, 100000).
-define(MAX_PORTS, 4096).
%% A round of ticks lasts at most this long, so that `stop' and a vanished
%% C node are noticed and replies stay small; ticks at most this often.
-define(MAX_ROUND_US, 10000000).
-define(MIN_INTERVAL_US, 50).
-define(MAX_STACKERS, 8).
%% Heaps sized for several ticks of garbage, so that the agent and its
%% stackers collect every few ticks instead of most ticks (a tick of 100
%% processes leaves about 5,000 words; each collection of the agent's
%% live data runs on a cold cache after the tick's sleep).
-define(AGENT_HEAP_WORDS, 32768).
-define(STACKER_HEAP_WORDS, 8192).
%% How long the first tick waits for the first selection (it has nothing
%% else to sample); a later tick never waits for one.
-define(FIRST_SELECTION_MS, 5000).

-type select_by() :: reductions | memory | message_queue_len | bin_vheap | total_heap_size.
-type options() :: #{top => pos_integer(),
                     select_by => select_by(),
                     reselect_ms => pos_integer(),
                     pids => [string()],
                     depth => pos_integer(),
                     idle_timeout_ms => pos_integer()}.
%% options/0 normalized, the pids resolved: what the agent runs with
-type settings() :: #{top := pos_integer(),
                      select_by := select_by(),
                      reselect_ms := pos_integer(),
                      pids := [pid()],
                      depth := pos_integer(),
                      idle_timeout_ms := pos_integer()}.
-export_type([options/0, select_by/0, settings/0]).

%% @doc The modules kprof may load into a node, each command those it runs
%% (sampler/node/agent.c), and of which the unloader removes those it
%% loaded: this sampling agent and its selection (kprof_select), tier
%% tracing (kprof_tiers), the request-marking API it arms (kprof,
%% kprof_tier_mark, kprof_http and its servers' integrations), tracing
%% started from the node (kprof_session), the guard that removes them all
%% again (kprof_unload), and the application's settings and start
%% (kprof_settings, kprof_app).
-spec modules() -> [module()].
modules() ->
    [kprof_agent, kprof_select, kprof_tiers, kprof, kprof_tier_mark, kprof_session, kprof_http,
     kprof_httpd, kprof_cowboy, kprof_rtrace, kprof_rtrace_mark, kprof_rtrace_own,
     kprof_rtrace_patterns, kprof_rtrace_first, kprof_rtrace_arming, kprof_rtrace_ticket,
     kprof_rtrace_rate, kprof_rtrace_flags, kprof_rtrace_calls, kprof_rtrace_traces,
     kprof_rtrace_bounds, kprof_rtrace_follow, kprof_rtrace_guard, kprof_rtrace_collector,
     kprof_tracer, kprof_tracing, kprof_calibrate, kprof_unload, kprof_settings, kprof_app].

%% @doc Starts an agent serving `Owner' (a process of the C node). Fails with
%% `{error, {busy, Node}}' when another kprof is attached, `{error, {no_process,
%% PidString}}' for an explicit pid that does not exist.
-spec start(Owner :: pid(), options()) -> {ok, pid()} | {error, term()}.
start(Owner, Opts) when is_pid(Owner), is_map(Opts) ->
    case whereis(kprof_agent) of
        undefined -> start_new(Owner, normalize(Opts));
        Agent -> {error, {busy, owner_node(Agent)}}
    end.

%% @doc Stops the running agent, if any; its guard restores every setting.
-spec stop() -> ok.
stop() ->
    case whereis(kprof_agent) of
        undefined -> ok;
        Agent ->
            Ref = monitor(process, Agent),
            Agent ! stop,
            receive {'DOWN', Ref, process, _, _} -> ok
            after 2000 -> exit(Agent, kill), ok
            end
    end.

normalize(Opts) ->
    Top = maps:get(top, Opts, 100),
    Depth = maps:get(depth, Opts, 64),
    #{top => max(1, min(Top, ?MAX_TOP)),
      select_by => maps:get(select_by, Opts, reductions),
      reselect_ms => max(100, maps:get(reselect_ms, Opts, 5000)),
      pids => maps:get(pids, Opts, []),
      depth => max(1, min(Depth, 1000)),
      idle_timeout_ms => max(1000, maps:get(idle_timeout_ms, Opts, 10000))}.

start_new(Owner, Opts) ->
    case resolve_pids(maps:get(pids, Opts), []) of
        {error, _} = Error ->
            Error;
        {ok, Pids} ->
            Self = self(),
            Agent = spawn_opt(?MODULE, agent_init, [Self, Owner, Opts#{pids := Pids}],
                              [{min_heap_size, ?AGENT_HEAP_WORDS}]),
            Ref = monitor(process, Agent),
            receive
                {Agent, started} ->
                    demonitor(Ref, [flush]),
                    {ok, Agent};
                {Agent, error, Reason} ->
                    demonitor(Ref, [flush]),
                    {error, Reason};
                {'DOWN', Ref, process, Agent, Reason} ->
                    {error, {agent_died, Reason}}
            after 5000 ->
                exit(Agent, kill),
                {error, timeout}
            end
    end.

resolve_pids([], Acc) ->
    {ok, lists:reverse(Acc)};
resolve_pids([S | Rest], Acc) ->
    case try list_to_pid(S) catch error:badarg -> not_a_pid end of
        P when is_pid(P), node(P) =:= node() ->
            case is_process_alive(P) of
                true -> resolve_pids(Rest, [P | Acc]);
                false -> {error, {no_process, S}}
            end;
        _ ->
            {error, {bad_pid, S}}
    end.

owner_node(Agent) ->
    case process_info(Agent, dictionary) of
        {dictionary, D} -> proplists:get_value(kprof_owner, D, unknown);
        undefined -> unknown
    end.

%%% ---------------------------------------------------------------------
%%% The guard: owns node-global settings, undoes them when kprof goes away.

%% @private
-spec guard_init(pid(), pid(), node(), pos_integer()) -> no_return().
guard_init(Starter, Agent, OwnerNode, Depth) ->
    process_flag(trap_exit, true),
    process_flag(priority, high),
    Ref = monitor(process, Agent),
    true = monitor_node(OwnerNode, true),
    ok = kprof_unload:watch(self()),
    Old = erlang:system_flag(backtrace_depth, Depth),
    Starter ! {self(), guarding},
    receive
        {'DOWN', Ref, process, Agent, _} -> ok;
        {nodedown, OwnerNode} -> exit(Agent, kill)
    end,
    erlang:system_flag(backtrace_depth, Old),
    exit(normal).

%%% ---------------------------------------------------------------------
%%% The agent.

%% From garbage_collection_info and garbage_collection, in the order of the
%% sample tuple: {TotalHeap, Heap, Stack, BinVheap, BinOldVheap, MinorGcs}.
-type sizes() :: {non_neg_integer(), non_neg_integer(), non_neg_integer(),
                  non_neg_integer(), non_neg_integer(), non_neg_integer()}.

-record(proc, {reds = -1 :: integer(),       % reductions at the last sample
               memory = 0 :: non_neg_integer(),
               sizes = {0, 0, 0, 0, 0, 0} :: sizes(), % then
               status = undefined :: atom(),   % status and queue length sent last
               queue = -1 :: integer(),
               queried = 0 :: non_neg_integer()}).  % stack queries since selection

-record(state, {owner :: pid(),
                opts :: settings(),
                own :: [pid()],                 % never selected
                %% the selection, in order, with what was sent of each: a list,
                %% not a map, because every tick walks all of it and rebuilding
                %% a map of 100 entries cost more than reading the processes
                selected = [] :: [{pid(), #proc{}}],
                selected_at = undefined :: integer() | undefined,
                %% ETS {Pid, Value}: the values at the window's start, to
                %% rank by change
                window :: kprof_select:window(),
                window_at = 0 :: integer(),          % when it began (ms)
                first_window = true :: boolean(),    % began when the agent started
                %% the chooser at work, if any, and the table it fills
                pending = undefined :: {reference(), pid(), kprof_select:window()} | undefined,
                labelled = #{} :: #{pid() => true},   % labels already sent
                names = [] :: [{pid(), tuple()}],     % labels for the next reply
                mfas = #{} :: #{mfa() => non_neg_integer()},
                new_mfas = [] :: [{non_neg_integer(), module(), atom(), arity()}],
                reset = false :: boolean(),
                stackers = [] :: [pid()],
                interval = 100000 :: pos_integer()}).  % between ticks of this round, us

%% @private
-spec agent_init(pid(), pid(), settings()) -> ok.
agent_init(Starter, Owner, Opts) ->
    process_flag(priority, high),
    %% a stacker that misses its deadline is unlinked and killed; one that
    %% crashed must not take the agent with it
    process_flag(trap_exit, true),
    try register(kprof_agent, self()) of
        true ->
            put(kprof_owner, node(Owner)),
            Guard = spawn(?MODULE, guard_init,
                          [self(), self(), node(Owner), maps:get(depth, Opts)]),
            receive {Guard, guarding} -> ok after 5000 -> exit(timeout) end,
            Starter ! {self(), started},
            Stackers = [start_stacker() || _ <- lists:seq(1, stacker_count())],
            State = #state{owner = Owner, opts = Opts, own = [self(), Guard | Stackers],
                           stackers = Stackers, window = kprof_select:window()},
            loop(first_window(State)),
            %% not `normal': the linked stackers end with the agent
            exit(shutdown)
    catch
        error:badarg ->
            Starter ! {self(), error, {busy, owner_node(whereis(kprof_agent))}},
            ok
    end.

loop(State = #state{opts = #{idle_timeout_ms := Idle}, pending = Pending}) ->
    %% the chooser at work may answer between rounds: its answer is kept
    %% (see reselect/1), never dropped as an unknown message
    Chooser = case Pending of {Ref, _, _} -> Ref; undefined -> none end,
    receive
        {Chooser, Selection, Window, At} when is_reference(Chooser) ->
            loop(chosen(Selection, Window, At, State));
        {sample, From, Seq, Ticks, IntervalUs, FirstUs}
          when is_pid(From), is_integer(Ticks), Ticks >= 1, is_integer(IntervalUs),
               IntervalUs >= ?MIN_INTERVAL_US, is_integer(FirstUs) ->
            N = min(Ticks, max(1, ?MAX_ROUND_US div IntervalUs)),
            case round(State, N, IntervalUs, FirstUs) of
                stop ->
                    ok;
                {Replies, Missed, State1} ->
                    From ! {kprof_samples, Seq, Missed, Replies},
                    loop(State1)
            end;
        stop ->
            ok;
        {'EXIT', S, _} ->
            %% a stacker died: replace it now rather than wait for it next tick
            loop(replace_stackers([S], State));
        _Other ->
            loop(State)
    after Idle ->
        %% the C side stopped asking without going away: do not linger
        ok
    end.

%%% Selection

now_ms() -> erlang:monotonic_time(millisecond).

%% A new selection when one is due, taken by the tick that finds it ready.
%% Chosen processes (`pids') are only checked for being alive, here.
reselect(State = #state{opts = #{pids := Pids, reselect_ms := Every}, selected_at = At})
  when Pids =/= [] ->
    case At =:= undefined orelse now_ms() - At >= Every of
        true ->
            Alive = [P || P <- Pids, is_process_alive(P)],
            Known = maps:from_list(State#state.selected),
            State#state{selected = keep(Alive, Known, new_window), selected_at = now_ms()};
        false ->
            State
    end;
reselect(State = #state{pending = {Ref, Chooser, New}}) ->
    receive
        {Ref, Selection, Window, At} -> chosen(Selection, Window, At, State)
    after 0 ->
            case is_process_alive(Chooser) of
                true ->
                    State;
                false ->
                    %% Its answer, if it sent one, was queued before it
                    %% ended: look again. Taking it for killed when it had
                    %% answered would keep the window it deleted, and every
                    %% later chooser would crash on that table.
                    receive
                        {Ref, Selection, Window, At} -> chosen(Selection, Window, At, State)
                    after 0 ->
                            %% killed from outside (it does not crash): ask
                            %% again when the selection is due
                            kprof_select:drop(New),
                            State#state{pending = undefined}
                    end
            end
    end;
reselect(State0 = #state{selected_at = undefined}) ->
    State = State0#state{pending = {Ref, _, _} = start_chooser(State0, high)},
    receive
        {Ref, Selection, Window, At} -> chosen(Selection, Window, At, State)
    after ?FIRST_SELECTION_MS ->
            State
    end;
reselect(State = #state{opts = #{reselect_ms := Every}, selected_at = At}) ->
    case now_ms() - At >= Every of
        true -> State#state{pending = start_chooser(State, normal)};
        false -> State
    end.

%% The window of the agent's start (none for chosen pids).
first_window(State = #state{opts = #{pids := [_ | _]}}) ->
    State;
first_window(State = #state{window = Window, own = Own, opts = #{select_by := By}}) ->
    %% it begins when its values start being read, as a chooser's does
    Began = now_ms(),
    ok = kprof_select:fill(Window, By, Own, ?FIRST_SELECTION_MS),
    State#state{window_at = Began}.

%% A chooser for the next selection, and a fresh table for the window it
%% may begin.
start_chooser(State = #state{selected = Selected, opts = #{select_by := By, top := Top,
                                                            reselect_ms := Every}},
              Priority) ->
    Ref = make_ref(),
    New = kprof_select:window(),
    %% our stack queries of each selected process since its window began each
    %% added one reduction
    Queried = maps:from_list([{P, Q} || {P, #proc{queried = Q}} <- Selected, Q > 0]),
    Job = #{agent => self(), ref => Ref, by => By, top => Top, every => Every,
            own => State#state.own, queried => Queried, old => State#state.window,
            new => New, window_at => State#state.window_at,
            first_window => State#state.first_window,
            again => State#state.selected_at =:= undefined},
    {Ref, kprof_select:start_chooser(Job, Priority), New}.

%% The chosen selection. One over the same window is made again in a second
%% (see kprof_select:chooser/1), one over a new window after a whole interval.
%% The chooser has deleted the table no longer needed.
chosen(Selection, Window, Began, State = #state{selected = Current, pending = {_, _, New},
                                                opts = #{reselect_ms := Every}}) ->
    Now = now_ms(),
    State1 = case Window of
                 same_window ->
                     State#state{selected_at = Now - Every + min(1000, Every)};
                 new_window ->
                     State#state{selected_at = Now, window = New, window_at = Began,
                                 first_window = false}
             end,
    State1#state{selected = keep(Selection, maps:from_list(Current), Window),
                 pending = undefined}.

%% The new selection, keeping what was sent of the processes already in it
%% (`Known', the current selection as a map), and their count of our stack
%% queries while the window it is ranked over stays the same.
keep(Selection, Known, Window) ->
    [{P, case Known of
             #{P := Proc} when Window =:= same_window -> Proc;
             #{P := Proc} -> Proc#proc{queried = 0};
             _ -> #proc{}
         end}
     || P <- Selection].

%%% Rounds of ticks

%% Takes N ticks, Interval microseconds apart from First (the node's
%% monotonic clock), each within a tenth of an interval of its time (jitter
%% keeps the schedule from aliasing with periodic work in the node). kprof
%% sets First so that rounds follow each other, and the rounds of several
%% nodes line up. A tick already a whole interval late is skipped and counted
%% in Missed: a slow node (or a slow kprof) lowers the rate instead of
%% bursting. Returns `stop' when asked to stop while waiting.
round(State, N, Interval, First0) ->
    Now = erlang:monotonic_time(microsecond),
    %% a start too far ahead is not believed
    First = min(First0, Now + ?MAX_ROUND_US),
    ticks(State#state{interval = Interval}, 0, N, Interval, First, [], 0).

ticks(State, K, N, _Interval, _First, Acc, Missed) when K >= N ->
    {lists:reverse(Acc), Missed, State};
ticks(State, K, N, Interval, First, Acc, Missed) ->
    Base = First + K * Interval,
    Now = erlang:monotonic_time(microsecond),
    case Now - Base of
        Behind when Behind >= Interval ->
            Skip = min(N - K, Behind div Interval),
            ticks(State, K + Skip, N, Interval, First, Acc, Missed + Skip);
        _ ->
            Jitter = rand:uniform(Interval div 5 + 1) - 1 - Interval div 10,
            %% whole milliseconds only: a tick less than 1 ms early is taken now
            Wait = max(0, Base + Jitter - Now) div 1000,
            receive
                stop -> stop
            after Wait ->
                {Reply, State1} = sample(State, max(0, erlang:monotonic_time(microsecond) - Base)),
                ticks(State1, K + 1, N, Interval, First, [Reply | Acc], Missed)
            end
    end.

%%% Sampling

%% One tick: a sample of every selected process. Delay is how late the tick
%% started (us), reported with what the tick cost here.
sample(State0, Delay) ->
    State = reset_mfas_if_full(reselect(State0)),
    Time = erlang:monotonic_time(microsecond),
    {Samples, Selected, State2, Queried, Reused} = sample_all(State),
    %% what the batch cost here, so that kprof can report it
    Busy = erlang:monotonic_time(microsecond) - Time,
    Reply = {Time, lists:reverse(State2#state.new_mfas), State2#state.names, Samples,
             State2#state.reset, {Queried, Reused, Busy, Delay}},
    {Reply, State2#state{selected = Selected, names = [], new_mfas = [], reset = false}}.

reset_mfas_if_full(State = #state{mfas = Mfas}) when map_size(Mfas) >= ?MAX_MFAS ->
    %% the C side drops its id map and every cached stack is re-sent
    Selected = [{P, Proc#proc{reds = -1}} || {P, Proc} <- State#state.selected],
    State#state{mfas = #{}, new_mfas = [], reset = true, selected = Selected};
reset_mfas_if_full(State) ->
    State.

%% Read for every selected process: cheap, and they change without the
%% process running (a message arrives). A stack query reads them too.
-define(CHEAP, [reductions, status, message_queue_len]).
%% Read only for processes that ran since their last sample: heap sizes and
%% collections change only then (and they build lists: about half the cost
%% of a sample of an idle process).
-define(GC, [garbage_collection_info, garbage_collection]).
%% The agent queries the stacks itself, in turn, while their worst case fits
%% in a quarter of the interval: a process that is running answers at its
%% next scheduling point, at most a time slice (about this long) later.
%% More go to the stackers, in parallel. Each stacker's batch costs
%% messages, a scheduler thread woken and a merge: at top 100 x 10 Hz (about
%% 10 queries a tick) querying in the agent took its processes' run time
%% from 2.49 to 2.15 us per sample and woke fewer threads. A single query
%% that never returns (a process that never handles its signals) holds the
%% agent, where a stacker would be replaced; below 3 queries a tick that was
%% already so.
-define(SLICE_US, 1000).
%% A process whose stack query has not begun by then is skipped this tick;
%% a stacker that has not answered GRACE later is stuck in one query.
-define(STACK_DEADLINE_MS, 2000).
-define(STACKER_GRACE_MS, 100).

%% Two passes: the cheap items of every process that was waiting at its
%% previous sample (read without waking it), then the stacks of those that ran
%% or were running (see query_stacks/2). A process that died, or did not
%% answer its stack query in time, leaves the selection until the next one.
sample_all(State = #state{selected = Entries}) ->
    {Out, Ran, Reused} = check(Entries, [], [], []),
    {Stacks, State0} = query_stacks([P || {P, _} <- Ran], State),
    {Out1, Kept, State1} = finish(lists:reverse(Ran), Stacks, State0, Out, Reused),
    {lists:reverse(Out1), lists:reverse(Kept), State1, length(Ran), length(Reused)}.

%% The processes that have not run since their last sample (reductions at
%% most one more: our own stack query added one) are sampled here: as the bare
%% pid when status and queue are the same too (most samples of a mostly idle
%% top-N: a tenth of the bytes to encode, send and decode), else with the
%% last stack and sizes (`same'): a process that did not run did not change
%% its heap or collect. The others are returned in Ran, to be queried.
%%
%% A process that was running or runnable at its previous sample goes to Ran
%% without the cheap read: it has most likely run again, and reading a
%% running process makes the agent wait for it (about 3 us, a quarter of a
%% busy process's sample), while the stack query reads the same items for
%% nothing more. A process that did stop meanwhile costs one query too many.
check([], Out, Ran, Kept) ->
    {Out, Ran, Kept};
check([Entry = {_, #proc{reds = Last, status = Was}} | Rest], Out, Ran, Kept)
  when Last >= 0, (Was =:= running orelse Was =:= runnable) ->
    check(Rest, Out, [Entry | Ran], Kept);
check([Entry = {P, Proc} | Rest], Out, Ran, Kept) ->
    case process_info(P, ?CHEAP) of
        [{reductions, R}, {status, S}, {message_queue_len, Q}] ->
            case Proc of
                #proc{reds = R, status = S, queue = Q} ->
                    %% the usual case: the entry stays as it is, nothing allocated
                    check(Rest, [P | Out], Ran, [Entry | Kept]);
                #proc{reds = Last, status = S, queue = Q} when Last >= 0, R =< Last + 1 ->
                    check(Rest, [P | Out], Ran, [{P, Proc#proc{reds = R}} | Kept]);
                #proc{reds = Last, memory = Mem, sizes = Sizes}
                  when Last >= 0, R =< Last + 1 ->
                    Sample = sample_tuple(P, S, R, Q, Mem, Sizes, same),
                    check(Rest, [Sample | Out], Ran,
                          [{P, Proc#proc{reds = R, status = S, queue = Q}} | Kept]);
                _ ->
                    check(Rest, Out, [Entry | Ran], Kept)
            end;
        undefined ->
            check(Rest, Out, Ran, Kept)
    end.

finish([], _Stacks, State, Out, Kept) ->
    {Out, Kept, State};
finish([{P, Proc0} | Rest], Stacks, State, Out, Kept) ->
    case Stacks of
        #{P := {Frames, Mem, Sizes, {R, S, Q}}} ->
            State1 = label(P, State),
            {StackBin, State2} = encode_stack(Frames, State1, <<>>),
            Proc = #proc{reds = R + 1, memory = Mem, sizes = Sizes, status = S, queue = Q,
                         queried = Proc0#proc.queried + 1},
            Sample = sample_tuple(P, S, R, Q, Mem, Sizes, StackBin),
            finish(Rest, Stacks, State2, [Sample | Out], [{P, Proc} | Kept]);
        #{} ->
            finish(Rest, Stacks, State, Out, Kept)
    end.

%% The label of each process is sent once, and remembered across selections
%% (bounded: past 10 times --top the memory starts afresh and labels are resent).
label(P, State = #state{labelled = Labelled, names = Names, opts = #{top := Top}}) ->
    case Labelled of
        #{P := _} -> State;
        _ ->
            L = case map_size(Labelled) >= 10 * Top of true -> #{}; false -> Labelled end,
            State#state{names = [{P, process_label(P)} | Names], labelled = L#{P => true}}
    end.

query_stacks(Pids, State = #state{interval = Interval})
  when length(Pids) * ?SLICE_US =< Interval div 4 ->
    %% the stackers' deadline too: the processes not reached by then are
    %% skipped this tick (finish/5 leaves out a pid without an answer)
    Deadline = erlang:monotonic_time(millisecond) + ?STACK_DEADLINE_MS,
    {maps:from_list(query_until(Pids, Deadline, [])), State};
query_stacks(Pids, State = #state{stackers = Stackers}) ->
    Ref = make_ref(),
    Asked = [{S, Batch} || {S, Batch} <- lists:zip(Stackers, deal(Pids, length(Stackers))),
                           Batch =/= []],
    Deadline = erlang:monotonic_time(millisecond) + ?STACK_DEADLINE_MS,
    _ = [S ! {query, self(), Ref, Batch, Deadline} || {S, Batch} <- Asked],
    {Got, Late} = collect(Ref, [S || {S, _} <- Asked], Deadline + ?STACKER_GRACE_MS, #{}, []),
    Gone = maps:from_list([{P, gone} || P <- Pids]),
    {maps:merge(Gone, Got), replace_stackers(Late, State)}.

%% Pids dealt round-robin into N batches.
deal(Pids, N) ->
    Indexed = lists:zip(lists:seq(0, length(Pids) - 1), Pids),
    [[P || {I, P} <- Indexed, I rem N =:= K] || K <- lists:seq(0, N - 1)].

%% The results of the stackers that answered, and the stackers that did not
%% in time or died.
collect(_Ref, [], _Deadline, Acc, Dead) ->
    {Acc, Dead};
collect(Ref, Waiting, Deadline, Acc, Dead) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Ref, S, Results} ->
            collect(Ref, lists:delete(S, Waiting), Deadline,
                    maps:merge(Acc, maps:from_list(Results)), Dead);
        {'EXIT', S, _} when is_pid(S) ->
            collect(Ref, lists:delete(S, Waiting), Deadline, Acc, [S | Dead])
    after Left ->
        {Acc, Waiting ++ Dead}
    end.

%% A stacker still waiting for a process past the deadline (one stuck in a
%% long NIF, or on a scheduler the OS does not run) is killed and replaced;
%% the processes of its batch are `gone' this tick and leave the selection
%% until the next one.
replace_stackers([], State) ->
    State;
replace_stackers(Late0, State = #state{stackers = Stackers, own = Own}) ->
    Late = [S || S <- Late0, lists:member(S, Stackers)],
    [begin unlink(S), exit(S, kill) end || S <- Late],
    New = [start_stacker() || _ <- Late],
    State#state{stackers = (Stackers -- Late) ++ New, own = (Own -- Late) ++ New}.

stacker_count() ->
    max(1, min(?MAX_STACKERS, erlang:system_info(schedulers_online))).

start_stacker() ->
    spawn_opt(?MODULE, stacker, [self()],
              [link, {priority, high}, {min_heap_size, ?STACKER_HEAP_WORDS}]).

%% @private
-spec stacker(pid()) -> no_return().
stacker(Agent) ->
    receive
        {query, Agent, Ref, Pids, Deadline} ->
            Agent ! {Ref, self(), query_until(Pids, Deadline, [])},
            stacker(Agent);
        _ ->
            stacker(Agent)
    end.

%% The stacks of Pids, in turn, until the deadline (monotonic ms): a slow
%% node delays each query, and the processes not reached by then are skipped
%% this tick rather than delaying it further.
query_until([P | Rest], Deadline, Acc) ->
    case erlang:monotonic_time(millisecond) < Deadline of
        true -> query_until(Rest, Deadline, [{P, stack_query(P)} | Acc]);
        false -> Acc
    end;
query_until([], _Deadline, Acc) ->
    Acc.

%% {Frames, Memory, Sizes, {Reductions, Status, QueueLen}} or gone, Frames =
%% [{{M, F, Arity}, Line}] leaf first (the reductions as read, before the one
%% this query adds). This runs in the stackers when there are several queries:
%% the conversion happens in parallel, and what is copied to the agent is a few
%% words per frame instead of a stack with file names and option lists.
stack_query(P) ->
    case process_info(P, [current_stacktrace, memory | ?GC ++ ?CHEAP]) of
        undefined ->
            gone;
        [{current_stacktrace, Stack}, {memory, Mem}, {_, Gc}, {_, GcOpts},
         {reductions, R}, {status, S}, {message_queue_len, Q}] ->
            {top_frames(P, Stack), Mem, sizes(Gc, GcOpts), {R, S, Q}}
    end.

top_frames(P, []) ->
    case process_info(P, current_function) of
        {current_function, {_, _, _} = Mfa} -> [{Mfa, 0}];
        _ -> []
    end;
top_frames(_P, Stack) ->
    frames(Stack).

frames(Stack) ->
    [{{M, F, arity(ArityOrArgs)}, line(Location)} || {M, F, ArityOrArgs, Location} <- Stack].

arity(N) when is_integer(N) -> N;
arity(Args) -> length(Args).

line(Location) ->
    case lists:keyfind(line, 1, Location) of
        {line, L} when is_integer(L) -> L;
        _ -> 0
    end.

%% OTP 25 returns garbage_collection_info in this order: match it in one go,
%% with proplists as the fallback.
sizes([{old_heap_block_size, OldBlock}, {heap_block_size, Block}, {mbuf_size, Mbuf},
       {recent_size, _}, {stack_size, Stack}, {old_heap_size, _}, {heap_size, Heap},
       {bin_vheap_size, Bin}, {bin_vheap_block_size, _}, {bin_old_vheap_size, OldBin} | _],
      GcOpts) ->
    {OldBlock + Block + Mbuf, Heap, Stack, Bin, OldBin, minor_gcs(GcOpts)};
sizes(Gc, GcOpts) ->
    {kprof_select:total_heap(Gc), proplists:get_value(heap_size, Gc, 0),
     proplists:get_value(stack_size, Gc, 0), proplists:get_value(bin_vheap_size, Gc, 0),
     proplists:get_value(bin_old_vheap_size, Gc, 0), minor_gcs(GcOpts)}.

sample_tuple(P, Status, Reds, Queue, Memory, {TotalHeap, Heap, Stack, Bin, OldBin, Minor},
             StackBin) ->
    {P, Status, Reds, Queue, Memory, TotalHeap, Heap, Stack, Bin, OldBin, Minor, StackBin}.

minor_gcs(GcOpts) ->
    case lists:keyfind(minor_gcs, 1, GcOpts) of
        {minor_gcs, N} -> N;
        false -> 0
    end.

%% Leaf first: <<MfaId:32, Line:32>> per frame; new MFAs are queued for the
%% reply so each is sent once.
encode_stack([], State, Acc) ->
    {Acc, State};
encode_stack([{Mfa, Line} | Rest], State, Acc) ->
    {Id, State1} = mfa_id(Mfa, State),
    encode_stack(Rest, State1, <<Acc/binary, Id:32, Line:32>>).

mfa_id(Mfa = {M, F, A}, State = #state{mfas = Mfas, new_mfas = New}) ->
    case Mfas of
        #{Mfa := Id} -> {Id, State};
        _ ->
            Id = map_size(Mfas),
            {Id, State#state{mfas = Mfas#{Mfa => Id}, new_mfas = [{Id, M, F, A} | New]}}
    end.

%% @doc The labels of local processes named by their numbers (`<0.Num.Serial>'):
%% native CPU samples name processes outside the sampled top. Processes that
%% are gone are left out. At most 10,000 a call.
-spec labels([{non_neg_integer(), non_neg_integer()}]) ->
          [{non_neg_integer(), non_neg_integer(), registered | initial, binary()}].
labels(Numbers) when is_list(Numbers), length(Numbers) =< 10000 ->
    [{N, S, Kind, Text} || {N, S} <- Numbers, is_integer(N), is_integer(S),
                           N >= 0, N < 1 bsl 28, S >= 0, S < 1 bsl 28,
                           Pid <- [c:pid(0, N, S)], is_process_alive(Pid),
                           {Kind, Text} <- [process_label(Pid)]].

%% @doc The node's ports, at most 4,096, each as its name (what
%% `erlang:port_info/2' calls `name': "tcp_inet", "efile", a spawned
%% command, cut to 200 bytes) and the local process it is connected to.
%% kprof learns from them where a port keeps these two in the node's
%% memory, to give native CPU samples in port work their port and
%% process. Ports closing meanwhile are left out.
-spec ports() -> [{binary(), pid()}].
ports() ->
    [{port_name(Chars), C} || P <- lists:sublist(erlang:ports(), ?MAX_PORTS),
                              {name, Chars} <- [erlang:port_info(P, name)],
                              {connected, C} <- [erlang:port_info(P, connected)],
                              node(C) =:= node()].

port_name(Chars) ->
    case unicode:characters_to_binary(Chars) of
        Bin when is_binary(Bin) -> binary:part(Bin, 0, min(byte_size(Bin), 200));
        _ -> <<"?">>
    end.

%% A registered name, else the initial call (proc_lib's when there is one).
process_label(P) ->
    case process_info(P, registered_name) of
        {registered_name, Name} when is_atom(Name) ->
            {registered, atom_to_binary(Name, utf8)};
        _ ->
            %% proc_lib's '$initial_call' when it is there, else the real one
            %% (translate_initial_call/1 says proc_lib:init_p/5 for a plain spawn)
            Initial = case try proc_lib:translate_initial_call(P)
                           catch _:_ -> unknown
                           end of
                          {proc_lib, init_p, 5} -> process_info(P, initial_call);
                          Mfa -> {initial_call, Mfa}
                      end,
            case Initial of
                {initial_call, {M, F, A}} when is_atom(M), is_atom(F), is_integer(A) ->
                    {initial, iolist_to_binary(io_lib:format("~ts:~ts/~b", [M, F, A]))};
                _ ->
                    {initial, <<"unknown">>}
            end
    end.
