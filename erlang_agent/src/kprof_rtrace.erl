%%% @doc Single-request traces: the in-node half. It starts tracing of a
%%% request's process synchronously, before the request's work, and emits
%%% the events; the kprof program (`kprof trace --session', started and
%%% watched here) turns them into stacks and writes one eflame-compatible
%%% folded file and one perf-script file per request.
%%%
%%% == How a trace runs ==
%%% <ol>
%%% <li>`begin_trace/3' (a call to this server; from OTP 25.3, while the
%%%   patterns are armed, `begin_own/1' needs none: kprof_rtrace_ticket)
%%%   checks the bounds, arms the
%%%   trace patterns if no trace runs yet (local call patterns on every loaded
%%%   function that has no call pattern of someone else, but kprof's own
%%%   and BIFs (kprof_rtrace_patterns): they exist only while a trace
%%%   runs), and gives the trace flags
%%%   `call', `return_to', `arity', `running', `garbage_collection', `procs',
%%%   `set_on_spawn' and `monotonic_timestamp', with kprof's tracer, to the
%%%   process, which sets them on itself (on another process, as for
%%%   `kprof trace --pid', the server sets them; kprof_rtrace_own says in
%%%   which order the process does its part). Then tracing is on.</li>
%%% <li>The process calls `kprof_rtrace_mark:begin_trace/1', whose pattern
%%%   puts the trace id and bounds into the stream: the collector learns the
%%%   process belongs to that trace. Processes it spawns inherit the flags;
%%%   the collector learns them from `spawn' events.</li>
%%% <li>Through the NIF, the request's messages are followed into the
%%%   processes they reach (see follow_spec/2): kprof_rtrace_own labels
%%%   the process's seq_trace token, and a send pattern gives a receiver the
%%%   flags at the send.</li>
%%% <li>At the end the process calls `kprof_rtrace_mark:end_trace/1', clears
%%%   its own flags and tells this server (`end_trace/1' from another
%%%   process: a call in which this server clears them). The
%%%   collector asks this server to clear the flags of the trace's other
%%%   processes, and of those following reached once no trace runs. After
%%%   the last trace the patterns linger `linger_ms', then go.</li>
%%% </ol>
%%% Bounds: concurrent traces (`max_concurrent'), duration (`max_duration_ms':
%%% a timer here stops the trace; the request goes on untraced) and events
%%% (`max_events': counted by the collector, which cuts the trace). Past a
%%% bound the file ends with a marker frame. The server, its port and the
%%% collector stop after `idle_ms' without traces. Traces asked for with a
%%% `rate_limit' (per second; the HTTP toggles do) take a token from a bucket
%%% that holds `rate_limit' tokens (at least one) and refills at that rate;
%%% with none left they are refused (kprof_rtrace_rate: one bucket, which
%%% a begin with the ticket takes its token from without a call).
%%%
%%% == The node is left as found ==
%%% On OTP 27 and later the patterns and flags are in kprof's own trace
%%% session (kprof_tracing), open while the patterns are armed: closing it
%%% removes them all, and another session's (dbg's) are not touched. Its
%%% tracer is fixed: the trace port, or the NIF once it serves (a session
%%% opened before is replaced at its next release). Before OTP 27 all
%%% tracers share one session: functions that had a call pattern (a user's
%%% `dbg:tp'/`dbg:tpl') are not armed; the set armed is remembered and
%%% removed exactly, and a pattern someone put on an armed function
%%% meanwhile stays. Flags are cleared only on processes whose tracer is
%%% kprof's (the trace port or the kprof_tracer NIF); a process another
%%% tracer traces is never taken (one tracer a process). The guard process
%%% knows the same set (or holds the session) and undoes it when the server
%%% is killed.
%%%
%%% Settings come from the application environment `{kprof, rtrace,
%%% Map}' merged with the options of each call; see defaults/0.
-module(kprof_rtrace).

-export([begin_trace/2, begin_trace/3, begin_own/1, end_trace/1, untrace_own/2, ended/2,
         defaults/0,
         collector_config/0, collector_config/1, stop/0, listen/1]).
-export([start_external/1, trace_pid/2, trace_calls/2, stop_calls/1, use_nif/1]).
%% spawned
-export([init/2]).

%% Request-trace settings: the application environment `{kprof,
%% rtrace, Map}' and the options of a call (see defaults/0).
-type settings() :: #{dir => file:filename_all(),
                      max_duration_ms => pos_integer(),
                      max_events => pos_integer(),
                      max_concurrent => pos_integer(),
                      queue_size => pos_integer(),
                      max_backlog_mb => pos_integer(),
                      idle_ms => pos_integer(),
                      linger_ms => non_neg_integer(),
                      %% processes a request's messages reach, followed per trace
                      max_processes => non_neg_integer(),
                      %% the trace is written only when the request took this
                      %% long, from its begin to its end (the collector drops
                      %% the others); 0: always
                      slower_than_ms => non_neg_integer(),
                      %% BIF calls as frames of their own (see arm/2): read
                      %% when patterns are armed (from the call that arms
                      %% them, else the application environment), not per
                      %% trace
                      bifs => boolean(),
                      %% calls into Erlang/OTP's and Elixir's applications as
                      %% frames of their own (else their time is their
                      %% caller's): read when patterns are armed, as `bifs'
                      otp_calls => boolean(),
                      %% per second, asked for by a caller (kprof_http)
                      rate_limit => number(),
                      %% a kprof attached from a shell collects
                      collector => internal | external,
                      %% read by kprof_http only
                      allow => boolean(),
                      header => iodata(),
                      %% passed on to the collector with the bounds
                      name => term()}.
%% A trace's bounds, as kprof_rtrace_mark:begin_trace/1 tells the collector.
%% `follow': N of the label {kprof, N} the traced process gives its
%% seq_trace token, when its messages are followed (kprof:trace_begin/1).
-type bounds() :: #{max_events := pos_integer(), max_duration_ms := pos_integer(),
                    max_processes => non_neg_integer(), follow => pos_integer(),
                    slower_than_us => non_neg_integer(), name => term()}.
-export_type([settings/0, bounds/0]).

-define(CALL_TIMEOUT, 10000).
-define(WATCH_MS, 20). % also how often the NIF's buffer is flushed
-define(MAX_LINGER_MS, 600000).
%% A begin taken with the ticket whose message has not come for this long
%% is a process killed on its way: forgotten (kprof_rtrace_ticket:forgive/1).
-define(FORGIVE_MS, 1000).

%% @doc The settings and their defaults.
-spec defaults() -> settings().
defaults() ->
    #{dir => "/tmp/kprof-traces", max_duration_ms => 5000, max_events => 1000000,
      max_concurrent => 8, queue_size => 10000, max_backlog_mb => 64,
      idle_ms => 60000, linger_ms => 5000, max_processes => 16, bifs => false,
      otp_calls => true}.

settings(Options) ->
    maps:merge(maps:merge(defaults(), kprof_settings:rtrace()), Options).

%% @doc Starts tracing `Pid' as a new request trace, its flags set by this
%% server (`kprof trace --pid'). Returns the trace id and its bounds (for
%% kprof_rtrace_mark:begin_trace/1), or an error when tracing cannot run
%% now (the request should then run untraced).
-spec begin_trace(pid(), settings()) -> {ok, binary(), bounds()} | {error, term()}.
begin_trace(Pid, Options) when is_pid(Pid), is_map(Options) ->
    case begin_trace(Pid, Options, server) of
        {ok, Id, Bounds, _} -> {ok, Id, Bounds};
        Error -> Error
    end.

%% @doc As begin_trace/2; with `self', for the calling process, which then
%% sets its own flags (kprof_rtrace_own): on itself that costs about 1 us,
%% on a process that waits for this server's reply 5 to 7 us more. The
%% reply then holds the session and the flags to set, and the port that
%% untrace_own/2 needs. The one call to this server a traced request makes.
-spec begin_trace(pid(), settings(), server | self) ->
          {ok, binary(), bounds(), {kprof_tracing:session(), [atom()], port() | undefined}}
          | {error, term()}.
begin_trace(Pid, Options, By) when is_pid(Pid), is_map(Options) ->
    case ensure_started() of
        {ok, Server} when By =:= server; Pid =:= self() ->
            call(Server, {begin_trace, Pid, Options, By});
        {ok, _} ->
            {error, not_the_caller};
        {error, _} = E ->
            E
    end.

%% @doc As begin_trace/3 with `self', for the calling process; from OTP 25.3
%% without the call when the server published its ticket (see
%% kprof_rtrace_ticket): a trace whose messages are followed then tells the
%% server by a message, before its flags and its token, so that the
%% message is not the trace's; one that is not tells it nothing until its
%% end (the run, for ended/2). A rate-limited begin (the HTTP toggles)
%% takes its token from the server's bucket there too (kprof_rtrace_rate).
-spec begin_own(settings()) ->
          {ok, binary(), bounds(), {kprof_tracing:session(), [atom()], port() | undefined},
           kprof_rtrace_ticket:run() | undefined}
          | {error, term()}.
begin_own(Options) ->
    Settings = settings(Options),
    case kprof_rtrace_ticket:take(maps:get(max_concurrent, Settings), Options) of
        {ok, Server, {Session, Port, Following}, Counters} ->
            {Id, Bounds, Flags} = new_trace(erlang:unique_integer([positive]), Following, Settings),
            Ms = maps:get(max_duration_ms, Settings),
            Run = case Bounds of
                      #{follow := _} ->
                          Server ! {begun, Id, self(), Ms},
                          undefined;
                      _ ->
                          kprof_rtrace_ticket:run(Counters, Server, Id, Ms)
                  end,
            {ok, Id, Bounds, {Session, Flags, Port}, Run};
        rate_limited ->
            {error, rate_limited};
        none ->
            case begin_trace(self(), Options, self) of
                {ok, Id, Bounds, Tracing} -> {ok, Id, Bounds, Tracing, undefined};
                Error -> Error
            end
    end.

%% @doc Ends a trace begun by begin_trace/2: a call in which this server
%% clears the process's flags (clearing them on another process that runs
%% waits until it is scheduled out).
-spec end_trace(binary()) -> ok.
end_trace(Id) ->
    _ = case whereis(?MODULE) of
            undefined -> ok;
            Server -> call(Server, {end_trace, Id})
        end,
    ok.

%% @doc In the process of a trace begun by begin_trace/3 with `self', after
%% its end mark: clears its own flags, at once, if they are still kprof's.
-spec untrace_own(kprof_tracing:session(), port() | undefined) -> ok.
untrace_own(Session, Port) ->
    kprof_rtrace_flags:untrace(self(), Session, Port).

%% @doc Then, from that process without its seq_trace token: the server
%% does the rest of ending trace `Id' meanwhile (no second wait on the
%% request's path). A trace begun with no message ends its count first
%% (`Run', kprof_rtrace_ticket:run_ended/1).
-spec ended(binary(), kprof_rtrace_ticket:run() | undefined) -> ok.
ended(Id, Run) ->
    ok = kprof_rtrace_ticket:run_ended(Run),
    case whereis(?MODULE) of
        undefined -> ok;
        Server -> Server ! {end_trace, Id}, ok
    end.

%% @doc For the collector: the trace port and where files go.
-spec collector_config() -> [{atom(), term()}].
collector_config() ->
    case whereis(?MODULE) of
        undefined -> [];
        Server -> call(Server, collector_config)
    end.

%% @doc As collector_config/0, for a collector that takes the parts other
%% nodes trace of this node's requests (messages to `Collector', its pid).
-spec collector_config(pid()) -> [{atom(), term()}].
collector_config(Collector) when is_pid(Collector) ->
    case whereis(?MODULE) of
        undefined -> [];
        Server -> call(Server, {collector_config, Collector})
    end.

%% @doc From node `Origin', whose request traces follow their messages:
%% for the next ?LISTEN_MS, a process of this node that takes in a message
%% of one of them is traced here too, and its part of the trace goes back
%% to `Origin' (see listen_spec/1). Starts request tracing here if needed
%% (its collector, the tracer NIF); `Origin' says it again while it follows.
-spec listen(node()) -> ok.
listen(Origin) when is_atom(Origin) ->
    case ensure_started() of
        {ok, Server} -> Server ! {listen, Origin}, ok;
        {error, _} -> ok
    end.

%% @doc Stops request tracing: every trace ends, patterns and flags are
%% removed, the collector writes what it has and exits.
-spec stop() -> ok.
stop() ->
    case whereis(?MODULE) of
        undefined -> ok;
        Server ->
            Ref = monitor(process, Server),
            Server ! stop,
            receive {'DOWN', Ref, process, _, _} -> ok
            after 5000 ->
                %% too slow to shut down (a loaded host): killed, its guard
                %% undoes what it set. Gone when this returns, so that what
                %% comes next (kprof tiers) finds no server here
                exit(Server, kill),
                receive {'DOWN', Ref, process, _, _} -> ok
                after 5000 -> demonitor(Ref, [flush]), ok
                end
            end
    end.

%% The caller is often a user's process (a request's, a gen_server's): a
%% reply that comes after the timeout must not reach its mailbox, so the
%% server replies to an alias that the demonitor deactivates (OTP 24).
call(Server, Request) ->
    Ref = monitor(process, Server, [{alias, demonitor}]),
    Server ! {call, Ref, Ref, Request},
    receive
        {Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, process, _, Why} -> {error, {kprof_rtrace, Why}}
    after ?CALL_TIMEOUT ->
        demonitor(Ref, [flush]),
        receive {Ref, _} -> ok after 0 -> ok end, % sent before the alias went
        {error, timeout}
    end.

%% @doc For `kprof trace --pid' from a shell: starts the server with the
%% calling C node as its collector (no program is started; the server stops
%% when that node goes away). Returns what collector_config/0 returns.
-spec start_external(pid()) -> [{atom(), term()}] | {error, term()}.
start_external(Owner) when is_pid(Owner) ->
    case whereis(?MODULE) of
        undefined ->
            case ensure_started({external, node(Owner)}) of
                {ok, _} -> collector_config(Owner);
                {error, _} = E -> E
            end;
        _ ->
            {error, "request tracing already runs on this node"}
    end.

%% @doc Starts a trace of the process `PidText' ("<0.123.0>") from outside.
-spec trace_pid(string(), settings()) -> {ok, binary(), pid()} | {error, term()}.
trace_pid(PidText, Options) ->
    case try list_to_pid(PidText) catch error:badarg -> not_a_pid end of
        Pid when is_pid(Pid) ->
            case is_process_alive(Pid) of
                true ->
                    case begin_trace(Pid, Options) of
                        {ok, Id, _} -> {ok, Id, Pid};
                        Error -> Error
                    end;
                false -> {error, no_such_process}
            end;
        _ -> {error, bad_pid}
    end.

%% @doc For `kprof trace --mfa': from now on, every process that makes a call
%% of `{M, F, Arity}' that `--match' takes is traced from that call on (a
%% meta pattern whose match spec sets the trace flags, so the call itself
%% starts the trace: kprof_rtrace_calls), and, with `follow', so are the
%% processes its messages reach. The collector counts the calls and calls
%% stop_calls/1. `Options': `match' (text, see kprof_rtrace_calls:selection/2),
%% `follow' and the bounds each trace gets (max_events, max_duration_ms,
%% max_processes). Returns how the calls are traced: through the NIF and
%% followed, through the NIF in their own process only, or through the
%% trace port (no NIF here), with what the user should know; or the error,
%% `{usage, Text}' for a bad `match'.
-spec trace_calls(mfa(), #{atom() => term()}) ->
          {ok, follow | alone | port} | {ok, alone | follow, string()}
          | {error, {usage, binary()} | term()}.
trace_calls({M, F, A} = MFA, Options) when is_atom(M), is_atom(F), is_integer(A),
                                           is_map(Options) ->
    case whereis(?MODULE) of
        undefined -> {error, not_started};
        Server -> call(Server, {trace_calls, MFA, Options})
    end.

%% @doc Stops tracing new calls of `MFA'.
-spec stop_calls(mfa()) -> ok.
stop_calls(MFA) ->
    case whereis(?MODULE) of
        undefined -> ok;
        Server -> call(Server, {stop_calls, MFA})
    end.

%% @doc For the collector started by this node: from now on, new traces go
%% through the kprof_tracer NIF, connected to the collector at
%% 127.0.0.1:`TcpPort' (events leave as compact records written 64 KB at a
%% time, instead of a term and a socket write each through the trace
%% port). `ok', or why not (the trace port then goes on serving).
-spec use_nif(inet:port_number()) -> ok | {error, term()}.
use_nif(TcpPort) ->
    case whereis(?MODULE) of
        undefined -> {error, not_started};
        Server -> call(Server, {use_nif, TcpPort})
    end.

ensure_started() ->
    ensure_started(internal).

ensure_started(Mode) ->
    case whereis(?MODULE) of
        undefined ->
            Self = self(),
            Pid = spawn(?MODULE, init, [Self, Mode]),
            Ref = monitor(process, Pid),
            receive
                {Pid, started} -> demonitor(Ref, [flush]), {ok, Pid};
                {'DOWN', Ref, process, Pid, {failed, Why}} -> {error, Why};
                {'DOWN', Ref, process, Pid, _} ->
                    %% another caller started it first
                    case whereis(?MODULE) of
                        undefined -> {error, not_started};
                        Other -> {ok, Other}
                    end
            end;
        Pid ->
            {ok, Pid}
    end.

%%% ---------------------------------------------------------------------
%%% The server

-define(NOTHING_OWNED, {{[], []}, false, false}). % see owned()
-record(trace, {id :: binary(), root :: pid(), timer :: reference(), pids = [] :: [pid()]}).
-record(state, {port :: port(), tcp_port :: inet:port_number(), settings :: settings(),
                collector :: port() | undefined, traces = #{} :: #{binary() => #trace{}},
                armed = false :: boolean(), seq = 0 :: non_neg_integer(),
                bucket :: kprof_rtrace_rate:bucket(), % of `rate_limit'
                calls = [] :: [mfa()],           % traced by trace_calls/2
                %% calls were followed: their traces, the collector's, may
                %% wait for the processes they reached (see add_reached/2)
                calls_followed = false :: boolean(),
                baseline = 0 :: non_neg_integer(), % system memory when armed
                nif = false :: boolean(),          % kprof_tracer is connected
                flush_timer = false :: boolean(),  % a flush/1 is due (flush_soon/1, a retry)
                guard :: pid(),                    % undoes `owned' if this server dies
                owned = ?NOTHING_OWNED :: owned(), % the local patterns kprof set
                %% where its flags and patterns are: open while armed
                session :: kprof_tracing:session(),
                %% armed, no trace: until when the patterns stay (monotonic
                %% ms), see release/1; and the one linger message on its way
                linger :: integer() | undefined,
                linger_timer :: reference() | undefined,
                reached = [] :: [pid()] | all,     % see add_reached/2
                %% the collector's pid, for the parts other nodes send
                collector_pid :: pid() | undefined,
                %% listening (see listen/1): until when (monotonic ms; 0: not),
                %% and the meta patterns it set on the servers' callbacks
                listen_until = 0 :: integer(),
                listened = [] :: [mfa()],
                ticking = false :: boolean(),      % listen_tick is due
                last_trace = 0 :: integer(),       % when a trace here last ended, ms
                clocks = #{} :: #{node() => {integer(), non_neg_integer(), integer()}},
                bifs :: [mfa()] | undefined,           % see bifs/1
                first :: kprof_rtrace_first:held(),    % traces waiting for the NIF
                %% traces waiting for the BIFs' patterns to go
                arming = kprof_rtrace_arming:new() :: kprof_rtrace_arming:arming(),
                %% begins without a call (kprof_rtrace_ticket), and since
                %% when one is in flight while the server waits to settle
                ticket :: kprof_rtrace_ticket:ticket(),
                unsettled :: {integer(), Due :: boolean()} | undefined,
                told_files = false :: boolean()}).      % see collector_line/2

%% `all': every loaded function (no one else had a call pattern); else
%% modules armed whole ({M, '_', '_'}) and functions armed one by one (in
%% modules where someone else has call patterns).
-type armed_set() :: kprof_rtrace_patterns:armed_set().
%% The patterns kprof set: the armed set, whether it set the on_load
%% pattern too (then the modules loaded at that moment: any other module,
%% loaded since, got kprof's pattern from it, else false), and whether it
%% set the send pattern that follows a request's messages.
-type owned() :: {armed_set(), false | [module()], boolean()}.

%% Past this many processes traced by another tracer, `--mfa' refuses: each
%% is excluded by a guard in the call's match spec.
-define(MAX_FOREIGN, 1000).
-define(MAX_REACHED, 100000).
-define(MAX_NO, 16#7ffffffe).
%% Other nodes listen this long after the last {listen, Origin}; it comes
%% every ?LISTEN_MS div 2 while traces here follow.
-define(LISTEN_MS, 10000).
%% How long a node's clock offset, measured for a part, is used again.
-define(CLOCK_MS, 10000).
-define(NIF, {kprof_tracer, []}).

%% @private
-spec init(pid(), internal | {external, node()}) -> no_return().
init(Starter, Mode) ->
    try register(?MODULE, self()) of
        true -> ok
    catch
        error:badarg -> exit(already_started)
    end,
    process_flag(trap_exit, true),
    process_flag(priority, high),
    Settings = settings(#{}),
    Closed = kprof_tracing:closed(),
    case {kprof_tracing:info(Closed, new, tracer), whereis(kprof_tiers)} of
        {{tracer, []}, undefined} -> ok;
        {_, undefined} -> exit({failed, "another tracer (e.g. dbg) traces new processes"});
        _ -> exit({failed, "tier tracing runs on this node; request traces wait until it stops"})
    end,
    case kprof_tiers:open_trace_port(maps:get(queue_size, Settings)) of
        {ok, Port, TcpPort} ->
            Self = self(),
            Guard = spawn(fun() -> guard(Self, Port, Closed) end),
            Collector = case Mode of
                            internal -> start_collector();
                            {external, Node} -> true = monitor_node(Node, true), undefined
                        end,
            %% the collector brings the NIF soon: the first traces wait
            First = kprof_rtrace_first:new(Collector =/= undefined),
            Bucket = kprof_rtrace_rate:new(),
            Starter ! {self(), started},
            loop(#state{port = Port, tcp_port = TcpPort, settings = Settings,
                        collector = Collector, guard = Guard, session = Closed,
                        bucket = Bucket, first = First,
                        ticket = kprof_rtrace_ticket:new(Bucket)});
        {error, Why} ->
            exit({failed, Why})
    end.

%% The collector program, unless a kprof attached from a shell collects
%% (`{kprof, rtrace, #{collector => external}}').
start_collector() ->
    case settings(#{}) of
        #{collector := external} -> undefined;
        _ ->
            case kprof_session:executable() of
                {ok, Exe} ->
                    open_port({spawn_executable, Exe},
                              [{args, ["trace", "--session", "--node", atom_to_list(node())]},
                               {env, [{"KPROF_COOKIE", atom_to_list(erlang:get_cookie())}]},
                               {line, 4096}, stderr_to_stdout, exit_status, use_stdio]);
                {error, Why} ->
                    logger:warning("kprof request traces: ~ts", [Why]),
                    undefined
            end
    end.

loop(S0) ->
    S = #state{settings = Settings} = publish(S0),
    Idle = maps:get(idle_ms, Settings),
    receive
        {begun, Id, Pid, Ms} -> % a begin with the ticket
            loop(begun(Id, Pid, Ms, S));
        recheck ->
            loop(recheck(S));
        {call, From, Ref, Request = {begin_trace, _, _, _}} ->
            loop(begin_or_hold({From, Ref, Request}, S));
        {call, From, Ref, Request = {use_nif, _}} ->
            %% connected or refused: the held traces wait no longer
            loop(release_first(answer(From, Ref, Request, S)));
        {call, From, Ref, Request} ->
            loop(answer(From, Ref, Request, S));
        first_wait_over ->
            loop(release_first(S));
        {'DOWN', MRef, process, _, _} ->
            loop(armed_fully(kprof_rtrace_arming:done(MRef, S#state.arming), S));
        {arming_wait_over, MRef} ->
            loop(armed_fully(kprof_rtrace_arming:wait_over(MRef, S#state.arming), S));
        release_held ->
            {Calls, Arming} = kprof_rtrace_arming:take_held(S#state.arming),
            loop(lists:foldl(fun begin_or_hold/2, S#state{arming = Arming}, Calls));
        {timeout, Id} ->
            loop(finish(Id, S));
        {end_trace, Id} -> % its process cleared its own flags
            loop(finish(Id, false, S));
        {run_timeout, Id, Pid} -> % a trace begun with no message
            loop(run_timeout(Id, Pid, S));
        {listen, Origin} when is_atom(Origin) ->
            loop(listen_on(S));
        listen_check ->
            loop(listen_check(S));
        listen_tick ->
            loop(listen_tick(S#state{ticking = false}));
        {rtrace_part_out, No, Origin, Part} when is_atom(Origin) ->
            %% this node's part of a trace of Origin's, from the collector
            erlang:send({?MODULE, Origin}, {rtrace_part, No, node(), Part}, [noconnect]),
            loop(S);
        {rtrace_part, No, From, Part} when is_atom(From) ->
            loop(part_in(No, From, Part, S));
        {clock, Node, Offset, Error, At} ->
            loop(S#state{clocks = (S#state.clocks)#{Node => {Offset, Error, At}}});
        {linger, Ref} when Ref =:= S#state.linger_timer ->
            loop(lingered(S#state{linger_timer = undefined}));
        watch ->
            loop(watch(S));
        {reached, Pids} when is_list(Pids); Pids =:= all ->
            loop(untrace_reached(add_reached(Pids, S)));
        flush ->
            loop(flush(S#state{flush_timer = false}));
        {untrace, Pids} when is_list(Pids) ->
            _ = [kprof_rtrace_flags:untrace(P, S#state.session, S#state.port)
                 || P <- Pids, is_pid(P)],
            loop(S);
        {Port, {data, {_, Line}}} when Port =:= S#state.collector ->
            loop(collector_line(Line, S));
        {Port, {exit_status, Status}} when Port =:= S#state.collector ->
            Status =:= 0 orelse logger:warning("kprof trace collector exited with ~p", [Status]),
            loop(release_first(S#state{collector = undefined}));
        stop ->
            shutdown(S);
        {nodedown, _} ->
            shutdown(S);
        {'EXIT', Port, _} when Port =:= S#state.port ->
            shutdown(S);
        _ ->
            loop(S)
    after Idle ->
        case maps:size(S#state.traces) =:= 0 andalso settled(S) of
            {true, S1} -> shutdown(S1);
            {false, S1} -> loop(S1);
            false -> loop(S)
        end
    end.

%% `By': who sets the process's flags, the server or the process itself
%% (given them in the reply).
handle({begin_trace, Pid, Options, By}, S0 = #state{traces = Traces}) ->
    %% the application environment as it is now: a change applies to the
    %% next trace
    S = S0#state{settings = settings(#{})},
    Settings = maps:merge(S#state.settings, Options),
    case maps:size(Traces) >= maps:get(max_concurrent, Settings) of
        true ->
            {{error, busy}, S};
        false ->
            %% only a caller that asks for it is rate limited (not the
            %% settings)
            case kprof_rtrace_rate:allowed(S#state.bucket, Options) of
                false ->
                    {{error, rate_limited}, S};
                true ->
                    case kprof_rtrace_flags:foreign_tracer(Pid, S#state.session, S#state.port) of
                        false -> start_trace(Pid, By, Settings, S);
                        Tracer -> {{error, {traced_by_another_tracer, Tracer}}, S}
                    end
            end
    end;
handle({end_trace, Id}, S) ->
    {ok, finish(Id, S)};
handle({trace_calls, {M, F, A} = MFA, Options}, S = #state{port = Port, session = Session}) ->
    Exists = case code:ensure_loaded(M) of
                 {module, M} -> lists:member({F, A}, erlang:get_module_info(M, functions));
                 _ -> no_module
             end,
    %% a meta pattern someone else set stays theirs; processes another
    %% tracer traces are excluded (the match spec's `trace' would take them
    %% from their tracer): both only in the shared session
    Foreign = kprof_rtrace_flags:foreign_processes(Session, Port),
    Selection = kprof_rtrace_calls:selection(maps:get(match, Options, <<>>), A),
    case {Exists, kprof_tracing:info(Session, MFA, meta), length(Foreign) > ?MAX_FOREIGN,
          Selection} of
        {no_module, _, _, _} ->
            {{error, {no_such_module, M}}, S};
        {false, _, _, _} ->
            {{error, {no_such_function, M, F, A}}, S};
        {true, {meta, Other}, _, _} when Other =/= false ->
            {{error, {already_meta_traced, MFA, Other}}, S};
        {true, _, true, _} ->
            {{error, {too_many_processes_traced_by_another_tracer, length(Foreign)}}, S};
        {true, _, false, {error, Why}} -> % the user's --match
            {{error, {usage, unicode:characters_to_binary(Why)}}, S};
        {true, _, false, {ok, Taken}} ->
            case arm_calls(arming_settings(Options, S)) of
                Why when is_list(Why) ->
                    {{error, Why}, S};
                S0 ->
                    S1 = tell_guard(S0#state{calls = [MFA | S0#state.calls]}),
                    Meta = meta_session(S1),
                    Follow = maps:get(follow, Options, true) =:= true,
                    How = calls_how(S1, Meta, Follow),
                    Bounds = maps:put(call, 1, maps:with([max_events, max_duration_ms,
                                                          max_processes], Options)),
                    Flags = kprof_tracing:action_flags(Meta, kprof_rtrace_flags:flags()),
                    Spec = kprof_rtrace_calls:spec(Taken, Flags, Foreign, {How, Bounds}),
                    %% the calls begin traces: once the BIFs are off
                    Followed = S1#state.calls_followed orelse
                        lists:member(How, [follow, follow_unlabelled]),
                    case kprof_rtrace_arming:busy(S1#state.arming) of
                        true ->
                            {{later, calls_reply(How, Follow)},
                             S1#state{calls_followed = Followed,
                                      arming = kprof_rtrace_arming:defer_meta(
                                                 Meta, MFA, Spec, S1#state.arming)}};
                        false ->
                            _ = kprof_tracing:function(Meta, MFA, Spec, [meta]),
                            {calls_reply(How, Follow), S1#state{calls_followed = Followed}}
                    end
            end
    end;
handle({stop_calls, MFA}, S0) ->
    S = S0#state{arming = kprof_rtrace_arming:drop_meta(MFA, S0#state.arming)},
    stop_meta(MFA, S#state.session, S#state.port),
    {ok, release_idle(tell_guard(S#state{calls = lists:delete(MFA, S#state.calls)}))};
handle({use_nif, TcpPort}, S) ->
    %% brought by a kprof attached from a shell (kprof_tracer:load/2), or
    %% from the kprof application's priv/
    Loaded = try kprof_tracer:loaded() of
                 true -> ok;
                 false -> kprof_tracer:load()
             catch
                 Class:Reason -> {Class, Reason}
             end,
    case Loaded of
        ok ->
            case try kprof_tracer:connect(TcpPort) catch C:R -> {C, R} end of
                ok -> {ok, arm_listen(arm_follow(nif_session(S#state{nif = true})))};
                Other -> {{error, Other}, S}
            end;
        Other ->
            {{error, Other}, S}
    end;
handle({collector_config, Collector}, S) ->
    handle(collector_config, S#state{collector_pid = Collector});
handle(collector_config, S = #state{settings = Settings, tcp_port = TcpPort}) ->
    {[{port, TcpPort}, {dir, unicode:characters_to_binary(maps:get(dir, Settings))},
      {time, erlang:monotonic_time(nanosecond)}], S};
handle(_, S) ->
    {{error, unknown_request}, S}.

%% A trace waiting for the BIFs' patterns to go (start_trace/4) is held,
%% and answered with them gone (it passed the rate limit already); so is
%% trace_calls/2, whose meta pattern waits for them.
answer(From, Ref, Request, S) ->
    case handle(Request, S) of
        {hold, S1} ->
            {begin_trace, Pid, Options, By} = Request,
            Again = {begin_trace, Pid, maps:remove(rate_limit, Options), By},
            S1#state{arming = kprof_rtrace_arming:hold({From, Ref, Again}, S1#state.arming)};
        {{later, Reply}, S1} ->
            S1#state{arming = kprof_rtrace_arming:defer_reply(From, Ref, Reply, S1#state.arming)};
        {Reply, S1} ->
            From ! {Ref, Reply},
            S1
    end.

release_first(S) ->
    {Calls, First} = kprof_rtrace_first:release(S#state.first),
    lists:foldl(fun begin_or_hold/2, S#state{first = First}, Calls).

%% A call that begins a trace (begin_trace/2, trace_pid/2) is answered once
%% what the trace needs is there: the NIF, when it is on its way
%% (kprof_rtrace_first), and the patterns, BIFs off (kprof_rtrace_arming).
begin_or_hold(Call = {From, Ref, Request}, S) ->
    case kprof_rtrace_first:holds(S#state.first, S#state.nif) of
        true -> S#state{first = kprof_rtrace_first:hold(Call, S#state.first)};
        false -> answer(From, Ref, Request, S)
    end.

%% The BIFs' patterns are off, or the wait for them over: the meta
%% patterns that begin traces are set (`--mfa''s, then its answer goes;
%% listening's), the calls held begin their traces. `false': another
%% monitor's 'DOWN', or a wait over for a helper gone since.
armed_fully(false, S) ->
    S;
armed_fully({Then, Calls, Arming}, S0) ->
    S = S0#state{arming = Arming},
    lists:foreach(fun({meta, Session, MFA, Spec}) ->
                          kprof_tracing:function(Session, MFA, Spec, [meta]);
                     ({reply, From, Ref, Reply}) ->
                          From ! {Ref, Reply}
                  end, Then),
    lists:foldl(fun begin_or_hold/2, arm_listen(S), Calls).

%% Ids: time-based and unique, never from request data: in base 36, the
%% Unix time in seconds, then 4 digits of the sequence and 5 random ones,
%% made as one number so that one conversion writes them all, zeros
%% included (1 us here, where three conversions and their padding took
%% 2.3; io_lib 6), on the path of every traced request.
trace_id(Seq) ->
    Rand = erlang:phash2({node(), erlang:unique_integer(), erlang:system_time()}, 1 bsl 24),
    %% 36^4 and 36^5
    integer_to_binary((erlang:system_time(second) * 1679616 + Seq rem 1679616) * 60466176 + Rand,
                      36).

start_trace(Pid, By, Settings, S) ->
    S1 = arm(arming_settings(Settings, S)),
    case kprof_rtrace_arming:busy(S1#state.arming) of
        true -> {hold, S1};
        false -> start_armed(Pid, By, Settings, S1)
    end.

start_armed(Pid, By, Settings, S1 = #state{traces = Traces}) ->
    Seq = S1#state.seq + 1,
    {Id, Bounds, Flags} = new_trace(Seq, following(S1), Settings),
    case By =:= self orelse kprof_tracing:process(S1#state.session, Pid, true, Flags) =:= 1 of
        true ->
            Timer = erlang:send_after(maps:get(max_duration_ms, Settings), self(),
                                      {timeout, Id}),
            T = #trace{id = Id, root = Pid, timer = Timer},
            {{ok, Id, Bounds, {S1#state.session, Flags, S1#state.port}},
             listen_tick(S1#state{seq = Seq, traces = Traces#{Id => T}})};
        %% gone, or traced by another tracer since the check
        false ->
            {{error, cannot_trace_process}, release_idle(S1)}
    end.

%% A new trace's id, its bounds for the collector and its process's flags:
%% its messages followed when `Following' (the send pattern is set) and
%% `max_processes' allows any.
new_trace(Seq, Following, Settings) ->
    Follow = Following andalso maps:get(max_processes, Settings) > 0,
    Bounds = slower_than(Settings,
                         maps:with([max_events, max_duration_ms, max_processes, name], Settings)),
    %% the label's N: unique in the cluster, as a request's token carries
    %% it to other nodes, whose own traces have theirs
    No = erlang:phash2({node(), Seq, erlang:unique_integer()}, ?MAX_NO) + 1,
    {trace_id(Seq), if Follow -> Bounds#{follow => No}; true -> Bounds end,
     kprof_rtrace_flags:flags() ++ [send || Follow]}.

%% A trace begun with the ticket: the server holds it as if it had begun
%% it (its duration's timer; the patterns stay). A wait to settle starts
%% afresh: this begin is in, one still in flight is newer.
begun(Id, Pid, Ms, S = #state{traces = Traces}) ->
    Timer = erlang:send_after(Ms, self(), {timeout, Id}),
    Traces1 = Traces#{Id => #trace{id = Id, root = Pid, timer = Timer}},
    listen_tick(S#state{traces = Traces1, linger = undefined, unsettled = undefined,
                        ticket = kprof_rtrace_ticket:registered(map_size(Traces1),
                                                                S#state.ticket)}).

%% A line of the collector's. Each trace it writes, it names the files of:
%% at a hundred traces a second (the HTTP toggles' default rate limit) a
%% notice each would flood the node's log, and cost the node about 90 us
%% of CPU apiece where the log is a file, three times the trace's own
%% (tests/bench/rtrace_overhead). So only the first is a notice, saying
%% where the others go; the others are info. Any other line (a trace not
%% written, and why) stays a notice.
collector_line(Line, S) ->
    case {string:prefix(Line, "kprof: trace "), string:find(Line, " not written: ")} of
        {nomatch, _} ->
            logger:notice("~ts", [Line]),
            S;
        {_, nomatch} when S#state.told_files ->
            logger:info("~ts", [Line]),
            S;
        {_, nomatch} ->
            logger:notice("~ts (each trace's files are logged at level info from here on)",
                          [Line]),
            S#state{told_files = true};
        _ ->
            logger:notice("~ts", [Line]),
            S
    end.

%% The ticket is published while a trace can begin as start_armed/4 begins
%% it: patterns armed (BIFs off), events through the NIF, the session's
%% tracer the NIF; withdrawn otherwise. The count of traces held with it.
publish(S = #state{armed = Armed, nif = Nif, session = Session, traces = Traces}) ->
    Content = case Armed andalso Nif andalso not kprof_rtrace_arming:busy(S#state.arming)
                  andalso kprof_tracing:tracer(Session) =:= ?NIF of
                  true -> {Session, S#state.port, following(S)};
                  false -> none
              end,
    S#state{ticket = kprof_rtrace_ticket:held(map_size(Traces),
                                              kprof_rtrace_ticket:publish(Content,
                                                                          S#state.ticket))}.

%% Withdraws the ticket (publish/1 puts it back at the loop's next turn);
%% true when no begin with it is in flight and no trace begun with no
%% message runs. A begin in flight: its message comes soon, and the server
%% checks again in 1 ms (recheck/1), forgiving it past ?FORGIVE_MS. Only
%% traces running: each one's end, or its timer, releases again; and the
%% wait for begins in flight is over (they went on as such traces), so
%% that one later is not forgiven as if it had waited since.
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

%% What waited for the begins in flight runs again: the reached processes'
%% flags, the linger.
recheck(S = #state{unsettled = undefined}) ->
    S;
recheck(S = #state{unsettled = {Since, _}}) ->
    Ticket = case erlang:monotonic_time(millisecond) - Since > ?FORGIVE_MS of
                 true -> kprof_rtrace_ticket:forgive(S#state.ticket);
                 false -> S#state.ticket
             end,
    release_idle(untrace_reached(S#state{unsettled = {Since, false}, ticket = Ticket})).

%% `slower_than_ms' as the collector reads it, in the bounds.
slower_than(#{slower_than_ms := Ms}, Bounds) when is_integer(Ms), Ms > 0 ->
    Bounds#{slower_than_us => Ms * 1000};
slower_than(_, Bounds) ->
    Bounds.

%% The processes following reached (the collector lists them, `all' past
%% ?MAX_REACHED) keep the flags the send pattern gave them until no trace
%% runs and no calls were followed (`--mfa''s traces are the collector's,
%% and may wait for a process they reached to take in their message: the
%% processes they reached keep their flags until kprof stops): only then
%% can no request's message be on its way to one of them,
%% giving it the flags anew while they are taken away. Not longer: an idle
%% followed process's calls each cost it the VM's call tracing and the
%% NIF's enabled/3 (kept until the next trace, three servers added 30 us to
%% each request, tests/bench/rtrace_overhead).
add_reached(_, S = #state{reached = all}) -> S;
add_reached(all, S) -> S#state{reached = all};
add_reached(Pids, S = #state{reached = R}) ->
    case length(R) + length(Pids) > ?MAX_REACHED of
        true -> S#state{reached = all};
        false -> S#state{reached = Pids ++ R}
    end.

untrace_reached(S0 = #state{traces = Traces, reached = R, calls = [], calls_followed = false})
  when map_size(Traces) =:= 0, R =/= [] ->
    case settled(S0) of
        {true, S = #state{port = Port, session = Session}} ->
            _ = case R of
                    all -> kprof_rtrace_flags:untrace_all(Session, Port);
                    _ -> [kprof_rtrace_flags:untrace(P, Session, Port) || P <- R, is_pid(P)]
                end,
            S#state{reached = []};
        {false, S} ->
            S
    end;
untrace_reached(S) ->
    S.

%% Removes kprof's meta pattern on `MFA', unless someone replaced it (in
%% the shared session).
stop_meta(MFA, Session, Port) ->
    case {kprof_tracing:shared(Session), kprof_tracing:info(Session, MFA, meta)} of
        {_, {meta, false}} -> 0;
        {false, _} -> kprof_tracing:function(Session, MFA, false, [meta]);
        {true, {meta, Tracer}} ->
            case kprof_rtrace_flags:is_kprof_tracer(Tracer, Port) of
                true -> kprof_tracing:function(Session, MFA, false, [meta]);
                false -> 0
            end;
        _ -> 0
    end.

-define(THROUGH_PORT,
        "request traces run through the node's trace port; trace calls when they end").

%% Armed for `--mfa': through the NIF once it serves (a call's trace then
%% begins with a mark and may follow its messages), else through the trace
%% port (the collector starts a trace at the call's meta event, which
%% carries no time). kprof's own session has one tracer: an idle one that
%% is not the one wanted is replaced; a busy one makes `--mfa' wait. The
%% state, or why not.
%% The settings read when the patterns are armed (`bifs', `otp_calls'):
%% those of the call that arms them, else the application environment's.
arming_settings(Options, S = #state{settings = Settings}) ->
    S#state{settings = maps:merge(Settings, maps:with([bifs, otp_calls], Options))}.

arm_calls(S = #state{armed = false}) ->
    arm(S);
arm_calls(S = #state{session = Session}) ->
    case {kprof_tracing:shared(Session) orelse kprof_tracing:tracer(Session) =:= tracer(S),
          maps:size(S#state.traces), S#state.calls} of
        {true, _, _} -> arm(S);
        {false, 0, []} ->
            case settled(S) of
                {true, S1} -> arm(disarm(S1#state{linger = undefined}));
                {false, _} -> ?THROUGH_PORT
            end;
        _ -> ?THROUGH_PORT
    end.

%% The session of `--mfa''s meta pattern: in the shared session, one whose
%% tracer is the one new traces get; in kprof's own, that session.
meta_session(S = #state{session = Session}) ->
    case kprof_tracing:shared(Session) of
        true -> kprof_tracing:open(kprof_rtrace, tracer(S));
        false -> Session
    end.

%% How `--mfa''s calls are traced (see kprof_rtrace_calls:spec/4): marks
%% need the NIF as the meta tracer, following its send pattern too.
calls_how(S, Meta, Follow) ->
    case {kprof_tracing:tracer(Meta) =:= ?NIF, Follow andalso following(S)} of
        {false, _} -> port;
        {true, true} ->
            case kprof_rtrace_calls:user_tokens() of
                false -> follow;
                true -> follow_unlabelled
            end;
        {true, false} -> alone
    end.

calls_reply(alone, true) ->
    {ok, alone, "another tracer holds the node's send pattern or its system seq tracer"};
calls_reply(follow_unlabelled, _) ->
    {ok, follow, "not those of a process that holds a seq_trace token (this node's processes "
                 "hold some of another seq_trace user's)"};
calls_reply(How, _) ->
    {ok, How}.

%% Once the NIF serves: new traces in the shared session go through it at
%% once; kprof's own session, whose tracer is fixed, is closed if it is
%% idle, else at its release/1 (arm/1 opens the next one with the NIF).
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

finish(Id, S) ->
    finish(Id, true, S).

%% `UntraceRoot': false when the trace's process cleared its own flags
%% (clearing them here would wait for it to be scheduled out).
finish(Id, UntraceRoot, S0 = #state{traces = Traces}) ->
    S = case maps:take(Id, Traces) of
            {#trace{root = Root, timer = Timer}, Rest} ->
                _ = erlang:cancel_timer(Timer),
                _ = UntraceRoot andalso
                    kprof_rtrace_flags:untrace(Root, S0#state.session, S0#state.port),
                S0#state{traces = Rest};
            error -> % begun with no message (or ended already): what an end needs
                S0
        end,
    Now = erlang:monotonic_time(millisecond),
    release_idle(untrace_reached(flush_soon(S#state{last_trace = Now}))).

%% The duration of trace `Id', begun with no message, is over: its count
%% is this server's to end, and its process, if still in it, loses its
%% flags (as finish/3 clears a held trace's root); the collector cuts it.
run_timeout(Id, Pid, S = #state{session = Session, port = Port}) ->
    _ = kprof_rtrace_own:running(Pid) =:= Id andalso kprof_rtrace_flags:untrace(Pid, Session, Port),
    finish(Id, false, S#state{ticket = kprof_rtrace_ticket:timed_out(S#state.ticket)}).

%% Undoes what the server set if it dies without its own shutdown (killed):
%% the server tells it what it owns before arming it. kprof's own session
%% is closed (holding its handle, the guard keeps it open until then).
guard(Server, Port, Session) ->
    Ref = monitor(process, Server),
    ok = kprof_unload:watch(self()),
    guard_wait(Server, Ref, Port, Session, ?NOTHING_OWNED, []).

guard_wait(Server, Ref, Port, Session, Owned, Calls) ->
    receive
        {owned, Session1, Owned1, Calls1} ->
            guard_wait(Server, Ref, Port, Session1, Owned1, Calls1);
        done ->
            ok; % the server undid everything itself
        {'DOWN', Ref, process, Server, _} ->
            case kprof_tracing:shared(Session) of
                true ->
                    %% the port closed with the server (its processes are
                    %% no longer traced); the NIF tracer outlives it
                    kprof_rtrace_flags:untrace_all(Session, Port),
                    [stop_meta(MFA, Session, Port) || MFA <- Calls],
                    disarm_owned(Session, Owned),
                    kprof_rtrace_flags:clear_kept(Session, Port);
                false ->
                    _ = kprof_tracing:close(Session),
                    element(3, Owned) andalso release_seq_tracer(),
                    ok
            end
    end.

%% The node's side of the trace port has no bound of its own: a traced
%% process that emits events faster than they leave makes the port's queues
%% (driver and port-task memory) grow. While traces run, the system memory
%% is checked every ?WATCH_MS; past `max_backlog_mb' above what it was when
%% tracing began, every running trace is cut: its processes stop emitting,
%% and a mark sent by this server tells the collector (behind the queued
%% events) to close it as cut.
watch(S = #state{armed = false}) ->
    S;
watch(S0) ->
    S = #state{baseline = Base, settings = Settings, traces = Traces} = flush(S0),
    erlang:send_after(?WATCH_MS, self(), watch),
    Limit = maps:get(max_backlog_mb, Settings) * 1048576,
    case erlang:memory(system) - Base > Limit of
        false ->
            S;
        true ->
            kprof_rtrace_flags:untrace_all(S#state.session, S#state.port),
            Ids = maps:keys(Traces),
            S1 = cut_marks(S, Ids, node_backlog),
            logger:warning("kprof: request traces cut: the node's trace queue grew past ~p MB",
                           [maps:get(max_backlog_mb, Settings)]),
            lists:foldl(fun finish/2, S1, Ids)
    end.

%% The marks come from this process, traced for the moment it makes them.
cut_marks(S = #state{session = Session}, Ids, Why) ->
    _ = kprof_tracing:process(Session, self(), true, [call]),
    [kprof_rtrace_mark:end_trace({Id, Why}) || Id <- Ids],
    _ = kprof_tracing:process(Session, self(), false, [call]),
    flush(S).

%% The tracer a session opened now gets: the NIF once it serves.
tracer(#state{nif = true}) -> ?NIF;
tracer(#state{port = Port}) -> Port.

%% What the NIF holds goes out: ?WATCH_MS after a trace's end, every
%% ?WATCH_MS while traces run, and, when the socket did not take it all (the
%% collector is busy), again ?WATCH_MS later until it has, traces or not:
%% the last trace's end mark must not wait for the next trace.
flush(S = #state{nif = true}) ->
    case try kprof_tracer:flush() catch _:_ -> gone end of
        ok -> S;
        pending -> flush_soon(S);
        _ -> S#state{nif = false} % the collector went away
    end;
flush(S) ->
    S.

%% A flush ?WATCH_MS from now, unless one is due: the retry of one the
%% socket did not take all of, and a trace's end, which goes out a little
%% later rather than at once: the collector then reads and writes the
%% trace's files after the request's last work (an HTTP answer is sent
%% after the trace ends), not beside it on the same cores. Measured on a
%% 2-core host: see performance.md, "HTTP".
flush_soon(S = #state{flush_timer = true}) ->
    S;
flush_soon(S = #state{nif = true}) ->
    erlang:send_after(?WATCH_MS, self(), flush),
    S#state{flush_timer = true};
flush_soon(S) ->
    S.

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
    %% first request); then a module is traced from the next arming
    OnLoad = case OtpCalls andalso kprof_tracing:info(Session, on_load, traced) of
                 {traced, false} -> erlang:loaded();
                 _ -> false
             end,
    Owned = {Set, OnLoad, false},
    %% the guard learns the set before it is set: killed halfway, this
    %% server leaves nothing the guard does not remove
    Guard ! {owned, Session, Owned, metas(S)},
    OnLoad =/= false andalso kprof_tracing:function(Session, on_load, true, [local]),
    {Bifs, S1} = bifs(S),
    ok = kprof_rtrace_patterns:set(Session, Set),
    Arming = case Bifs of
                 [] -> S1#state.arming;
                 _ -> kprof_rtrace_arming:start(Session, Set, Bifs, S1#state.arming)
             end,
    arm_follow(S1#state{armed = true, owned = Owned, session = Session, arming = Arming,
                        baseline = erlang:memory(system)}).

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

%% The send pattern that follows a request's messages, once patterns are
%% armed and events go through the NIF (which may come after the first
%% trace armed them: the collector connects it then); see follow_spec/2.
arm_follow(S = #state{armed = true, nif = true, owned = {Set, OnLoad, false}, guard = Guard,
                      session = Session}) ->
    case kprof_tracing:tracer(Session) =:= ?NIF
        andalso kprof_tracing:info(Session, send, match_spec) =:= {match_spec, true}
        andalso seq_trace:get_system_tracer() =:= false
        andalso follow_spec(self(), Session, S#state.port) of
        false ->
            S;
        Spec ->
            Owned = {Set, OnLoad, true},
            Guard ! {owned, Session, Owned, metas(S)},
            _ = seq_trace:set_system_tracer(?NIF),
            _ = kprof_tracing:send(Session, Spec),
            S#state{owned = Owned}
    end;
arm_follow(S) ->
    S.

%% == Following a request's messages ==
%% The send pattern applies to every process with the send flag, which only
%% kprof's traced processes have. For a message that carries a seq_trace
%% token, its trace/3 gives the receiver kprof_rtrace_flags:follow_flags/0
%% at the send (before the receiver can take the message in) with the
%% sender's tracer, the NIF.
%% The token's label ({kprof, N}, set by kprof:trace_begin/1, with its
%% `receive' flag) says which request the message is for, and the NIF, the
%% node's system seq tracer meanwhile, learns from seq_trace's `receive'
%% event when the receiver takes it in: the collector gives the receiver's
%% time to that trace from there until the receiver is back in its receive
%% loop (any process, OTP behaviour or not: see kprof_tracer.c), for at
%% most `max_processes' processes per trace. Left out: this server, remote
%% processes, and those another tracer traced when the pattern was set
%% (trace/3 would take them from it): past ?MAX_FOREIGN of those, when
%% someone has a send pattern, or when the system seq tracer is someone
%% else's, nothing is followed. Only through the NIF: the trace port has no
%% seq_trace events. In kprof's own session (OTP 27 and later) no process
%% is another tracer's.
follow_spec(Server, Session, Port) ->
    Foreign = kprof_rtrace_flags:foreign_processes(Session, Port),
    case length(Foreign) > ?MAX_FOREIGN of
        true -> false;
        false ->
            %% a local pid, or a registered name (`Name ! Msg')
            Names = [N || P <- Foreign, {registered_name, N} <- [process_info(P, registered_name)]],
            Left = [{'=/=', '$1', X} || X <- [Server, ?MODULE | Foreign ++ Names]],
            %% the tracer named: unnamed, the action takes the sender's,
            %% which is none while another process clears its flags (the
            %% collector's untrace of a --mfa call's process as it sends):
            %% OTP 25 then crashes in trace_send
            Flags = kprof_tracing:action_flags(Session, kprof_rtrace_flags:follow_flags()),
            Body = [{trace, '$1', [], Flags}, {message, {get_seq_token}}],
            %% to another node (a pid, or {Name, Node}): only said, for
            %% the trace to wait for that node's part
            Said = [{message, {get_seq_token}}],
            [{['$1', '_'], [{is_pid, '$1'}, {'=:=', {node, '$1'}, {node}}, {is_seq_trace} | Left],
              Body},
             {['$1', '_'], [{is_atom, '$1'}, {is_seq_trace} | Left], Body},
             {['$1', '_'], [{is_pid, '$1'}, {is_seq_trace}], Said},
             {['$1', '_'], [{is_tuple, '$1'}, {is_seq_trace}], Said}]
    end.

following(#state{nif = Nif, owned = {_, _, Follow}}) -> Nif andalso Follow.

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
%% serves, goes at once (see nif_session/1).
release(S = #state{listen_until = Until}) when Until =/= 0 ->
    S;
release(S0 = #state{session = Session}) ->
    %% the application environment as it is now, as for a begin: traces
    %% begun with the ticket did not read it here
    S = #state{settings = Settings} = S0#state{settings = settings(#{})},
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

%% The linger's timer is due: a trace since (linger undefined) or an end
%% that moved it on keeps the patterns; else they go once no begin with
%% the ticket is in flight and no trace begun with no message runs (else,
%% see settled/1, the patterns linger again from a later release/1).
lingered(S = #state{linger = undefined}) ->
    S;
lingered(S = #state{linger = Until}) ->
    case Until - erlang:monotonic_time(millisecond) > 0 of
        true ->
            linger(Until, S);
        false ->
            case settled(S#state{linger = undefined}) of
                {true, S1} -> disarm(quiet(S1));
                {false, S1} -> S1
            end
    end.

%% kprof's own session goes whole; in the shared one, what kprof set.
disarm(S = #state{armed = false}) -> S;
disarm(S0 = #state{session = Session, owned = {_, _, Follow}}) ->
    %% the BIFs' patterns stop going first; calls held for them begin their
    %% traces later, with patterns armed again
    S = S0#state{arming = kprof_rtrace_arming:cancel(S0#state.arming)},
    _ = case kprof_rtrace_arming:take_held(S#state.arming) of
            {[], _} -> ok;
            _ -> self() ! release_held
        end,
    %% the system seq tracer is no session's: kprof's own closing leaves it
    _ = case kprof_tracing:shared(Session) of
            true ->
                disarm_owned(Session, S#state.owned),
                kprof_rtrace_flags:clear_kept(Session, S#state.port);
            false -> Follow andalso release_seq_tracer()
        end,
    Closed = kprof_tracing:close(Session),
    S#state.guard ! {owned, Closed, ?NOTHING_OWNED, metas(S)},
    S#state{armed = false, owned = ?NOTHING_OWNED, session = Closed}.

%% Tracing went quiet (the patterns' linger ended): what following left
%% goes, the tokens of followed requests in the servers they reached and
%% the flags of processes it reached that the collector could not name (a
%% SEND it lost). One pass over the processes: never on a request's path
%% (with `linger_ms' 0, the patterns go at each trace's end_trace/1; then
%% this waits for shutdown/1).
quiet(S = #state{owned = {_, _, true}, port = Port, session = Session}) ->
    kprof_tiers:clear_tokens(),
    kprof_rtrace_flags:untrace_all(Session, Port),
    S;
quiet(S) ->
    S.

%% Removes exactly what arm/1 set: the on_load pattern first (no module
%% gets kprof's pattern any more), then the armed set, then the patterns of
%% the modules loaded since, which took kprof's from on_load.
-spec disarm_owned(kprof_tracing:session(), owned()) -> ok.
disarm_owned(Session, {Set, OnLoad, true}) ->
    %% the send pattern first: no process is followed any more; one someone
    %% set since is theirs
    _ = case kprof_tracing:info(Session, send, match_spec) of
            {match_spec, [{['$1', '_'], _, [{trace, '$1', [], Flags} | _]} | _]} ->
                %% kprof's, with the tracer it names (follow_spec/3)
                [F || F <- Flags, is_atom(F)] =:= kprof_rtrace_flags:follow_flags()
                    andalso kprof_tracing:send(Session, true);
            _ -> ok
        end,
    release_seq_tracer(),
    disarm_owned(Session, {Set, OnLoad, false});
disarm_owned(Session, {Set, false, false}) ->
    kprof_rtrace_patterns:unset(Session, Set);
disarm_owned(Session, {Set, LoadedThen, false}) ->
    kprof_tracing:info(Session, on_load, traced) =:= {traced, local}
        andalso kprof_tracing:info(Session, on_load, match_spec) =:= {match_spec, []}
        andalso kprof_tracing:function(Session, on_load, false, [local]),
    kprof_rtrace_patterns:unset(Session, Set),
    Then = sets:from_list(LoadedThen, [{version, 2}]),
    Since = [M || M <- erlang:loaded(), not sets:is_element(M, Then)],
    Since =/= [] andalso kprof_rtrace_patterns:unset(Session, {Since, []}),
    ok.

%% The system seq tracer goes back to none, if it is still kprof's NIF.
%% OTP 25's spec of seq_trace:get_system_tracer/0 leaves out a tracer
%% module, which it returns: dialyzer would call the match impossible.
-dialyzer({no_match, release_seq_tracer/0}).
release_seq_tracer() ->
    _ = seq_trace:get_system_tracer() =:= ?NIF andalso seq_trace:set_system_tracer(false),
    ok.

%% The meta patterns kprof set: --mfa's, and listening's.
metas(#state{calls = Calls, listened = Listened}) -> Calls ++ Listened.

%% The guard learns what the server owns now; the state.
tell_guard(S = #state{guard = Guard}) ->
    Guard ! {owned, S#state.session, S#state.owned, metas(S)},
    S.

%% No trace runs and no calls are traced: see release/1.
release_idle(S = #state{traces = Traces, calls = []}) when map_size(Traces) =:= 0 ->
    release(S);
release_idle(S) ->
    S.

%%% ---------------------------------------------------------------------
%%% Across nodes
%%%
%%% A request's token crosses distribution by itself. While traces here
%%% follow their messages, this server tells every other node where the
%%% kprof application is to listen (listen/1, again every ?LISTEN_MS div 2).
%%% A listening node arms what a trace arms (its collector and tracer NIF
%%% too) and a meta pattern on the callbacks of every loaded gen_server
%%% (?CALLBACKS): a process that calls one with a token gets the follow
%%% flags there and then (the pattern's trace/3), and the NIF learns from
%%% the meta event, which carries the token, that it took in a message of
%%% the trace the token's label names; its stretch ends when the callback
%%% returns. The listening node's collector sends its part (its processes'
%%% stacks and times, in its clock) through its server to this one, which
%%% gives it to this node's collector with the offset between the two
%%% clocks (see clock/1); the trace is written with every part.

-define(CALLBACKS, [{handle_call, 3}, {handle_cast, 2}, {handle_info, 2}]).

%% Another node's traces follow: listen until ?LISTEN_MS from now.
listen_on(S = #state{listen_until = Until}) ->
    Now = erlang:monotonic_time(millisecond),
    Until =:= 0 andalso erlang:send_after(?LISTEN_MS, self(), listen_check),
    arm_listen(S#state{listen_until = Now + ?LISTEN_MS}).

listening(#state{listen_until = Until}) -> Until =/= 0.

%% Arms listening once the NIF serves (it is the meta tracer and the system
%% seq tracer); until then, nothing.
arm_listen(S = #state{nif = true, listened = []}) ->
    case listening(S) of
        false -> S;
        true ->
            S1 = #state{session = Session} = arm(S),
            listen_armed(S1, Session)
    end;
arm_listen(S) ->
    S.

%% Listening's meta patterns begin traces: once the BIFs are off
%% (armed_fully/3 comes back to arm_listen/1).
listen_armed(S1, Session) ->
    case kprof_rtrace_arming:busy(S1#state.arming) of
        true -> S1;
        false ->
            Flags = kprof_tracing:action_flags(Session, kprof_rtrace_flags:follow_flags()),
            MS = [{'_', [{is_seq_trace}],
                   [{trace, [], Flags}, {message, {get_seq_token}}, {return_trace}]}],
            %% a meta pattern someone else set stays theirs (a function
            %% with none answers {meta, []} once the local patterns are set)
            MFAs = [{M, F, A} || M <- erlang:loaded(), {F, A} <- ?CALLBACKS,
                                 erlang:function_exported(M, F, A),
                                 kprof_tracing:info(Session, {M, F, A}, meta_match_spec) =:=
                                     {meta_match_spec, false}],
            S2 = tell_guard(S1#state{listened = MFAs}),
            _ = [kprof_tracing:function(Session, MFA, MS, [meta]) || MFA <- MFAs],
            S2
    end.

%% Past the last listen/1 by ?LISTEN_MS: the meta patterns go, and the rest
%% with the last trace here.
listen_check(S = #state{listen_until = Until}) ->
    Now = erlang:monotonic_time(millisecond),
    case Now >= Until of
        false ->
            erlang:send_after(Until - Now, self(), listen_check),
            S;
        true ->
            _ = [stop_meta(MFA, S#state.session, S#state.port) || MFA <- S#state.listened],
            release_idle(tell_guard(S#state{listen_until = 0, listened = []}))
    end.

%% While traces here follow (running, or ended less than ?LISTEN_MS div 2
%% ago): the other nodes where kprof is listen. Only this node's own traces
%% count: two nodes that listen to each other would keep each other
%% listening. Asked from a process of its own: a node that does not answer
%% holds up nothing.
listen_tick(S = #state{ticking = false, last_trace = Last}) ->
    Recent = maps:size(S#state.traces) > 0 orelse
        erlang:monotonic_time(millisecond) - Last < ?LISTEN_MS div 2,
    case Recent andalso following(S) of
        true ->
            Origin = node(),
            _ = spawn(fun() -> tell_nodes(Origin) end),
            erlang:send_after(?LISTEN_MS div 2, self(), listen_tick),
            S#state{ticking = true};
        false ->
            S
    end;
listen_tick(S) ->
    S.

tell_nodes(Origin) ->
    [erpc:cast(N, ?MODULE, listen, [Origin])
     || N <- nodes(),
        (try erpc:call(N, code, ensure_loaded, [?MODULE], 2000) catch _:_ -> error end)
            =:= {module, ?MODULE}],
    ok.

%% Node `From''s part of trace `No': to the collector, with the offset of
%% From's clock to this node's (measured in a process of its own, and kept
%% ?CLOCK_MS).
part_in(_, _, _, S = #state{collector_pid = undefined}) ->
    S;
part_in(No, From, Part, S = #state{collector_pid = Collector, clocks = Clocks}) ->
    Now = erlang:monotonic_time(millisecond),
    Kept = case Clocks of
               #{From := {Offset, Error, At}} when Now - At < ?CLOCK_MS -> {Offset, Error};
               _ -> none
           end,
    Server = self(),
    _ = spawn(fun() ->
                      {Offset1, Error1} = case Kept of
                                              none -> clock(From);
                                              _ -> Kept
                                          end,
                      Kept =:= none andalso (Server ! {clock, From, Offset1, Error1, Now}),
                      Collector ! {rtrace_part, No, From, Part, Offset1, Error1}
              end),
    S.

%% {Offset, Error}: node `Node''s monotonic time minus this node's, in ns,
%% within +-Error: the best of three round trips (half of the shortest).
clock(Node) ->
    Rounds = [begin
                  T0 = erlang:monotonic_time(nanosecond),
                  Remote = try erpc:call(Node, erlang, monotonic_time, [nanosecond], 1000)
                           catch _:_ -> undefined end,
                  T1 = erlang:monotonic_time(nanosecond),
                  {T1 - T0, Remote, T0}
              end || _ <- [1, 2, 3]],
    case lists:sort([R || R = {_, Remote, _} <- Rounds, is_integer(Remote)]) of
        [{Rtt, Remote, T0} | _] -> {Remote - (T0 + Rtt div 2), Rtt div 2};
        [] -> {0, 0}
    end.

-spec shutdown(#state{}) -> no_return().
shutdown(S = #state{traces = Traces, calls = Calls, port = Port, session = Session}) ->
    _ = [stop_meta(MFA, Session, Port) || MFA <- Calls],
    _ = [kprof_rtrace_flags:untrace(R, Session, Port) || #trace{root = R} <- maps:values(Traces)],
    %% processes spawned by traced ones inherited the flags; quiet/1 does
    %% it too, with the tokens following left
    _ = case S#state.owned of
            {_, _, true} -> quiet(S);
            _ -> kprof_rtrace_flags:untrace_all(Session, Port)
        end,
    _ = disarm(S#state{armed = true}),
    S#state.guard ! done,
    S#state.nif andalso (try kprof_tracer:close() catch _:_ -> ok end),
    try port_close(S#state.port) catch error:badarg -> ok end,
    exit(normal).
