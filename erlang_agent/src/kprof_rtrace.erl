%%% @doc Single-request traces: the in-node half. It starts tracing of a
%%% request's process synchronously, before the request's work, and emits
%%% the events; the kprof program (`kprof trace --session', started and
%%% watched here: kprof_rtrace_collector) turns them into stacks and writes
%%% one eflame-compatible folded file and one perf-script file per request.
%%%
%%% == How a trace runs ==
%%% <ol>
%%% <li>`begin_trace/3' (a call to this server; from OTP 25.3, while the
%%%   patterns are armed, `begin_own/1' needs none: kprof_rtrace_ticket)
%%%   checks the bounds (kprof_rtrace_bounds), arms the trace patterns if
%%%   no trace runs yet (kprof_rtrace_arming), and gives the trace flags,
%%%   with kprof's tracer, to the process, which sets them on itself
%%%   (kprof_rtrace_own; on another process, as for `kprof trace --pid', the
%%%   server sets them): kprof_rtrace_traces.</li>
%%% <li>The process calls `kprof_rtrace_mark:begin_trace/1', whose pattern
%%%   puts the trace id and bounds into the stream: the collector learns the
%%%   process belongs to that trace. Processes it spawns inherit the flags;
%%%   the collector learns them from `spawn' events.</li>
%%% <li>Through the NIF, the request's messages are followed into the
%%%   processes they reach, on this node and others (kprof_rtrace_follow).</li>
%%% <li>At the end the process calls `kprof_rtrace_mark:end_trace/1', clears
%%%   its own flags and tells this server (`end_trace/1' from another
%%%   process: a call in which this server clears them). After the last
%%%   trace the patterns linger `linger_ms', then go: the node is left as
%%%   found, by this server or, when it is killed, by its guard
%%%   (kprof_rtrace_guard).</li>
%%% </ol>
%%% `kprof trace --mfa' begins traces at a function's calls
%%% (kprof_rtrace_calls).
%%%
%%% The server (registered `kprof_rtrace') is a loop whose state
%%% (kprof_rtrace.hrl) those modules take and give back: it takes each
%%% message to the module of its concern, and holds the calls that begin
%%% traces until what they need is there (the NIF: kprof_rtrace_first; the
%%% BIFs' patterns gone: kprof_rtrace_arming).
%%%
%%% Settings come from the application environment `{kprof, rtrace,
%%% Map}' merged with the options of each call; see defaults/0.
-module(kprof_rtrace).

-export([begin_trace/2, begin_trace/3, begin_own/1, end_trace/1, untrace_own/2, ended/2,
         defaults/0, settings/1,
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
                      %% BIF calls as frames of their own; read when
                      %% patterns are armed, not per trace (kprof_rtrace_arming)
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

-include("kprof_rtrace.hrl").

-define(CALL_TIMEOUT, 10000).

%% @doc The settings and their defaults.
-spec defaults() -> settings().
defaults() ->
    #{dir => "/tmp/kprof-traces", max_duration_ms => 5000, max_events => 1000000,
      max_concurrent => 8, queue_size => 10000, max_backlog_mb => 64,
      idle_ms => 60000, linger_ms => 5000, max_processes => 16, bifs => false,
      otp_calls => true}.

%% @doc The settings a begin or a release reads: the defaults, the
%% application environment's (bad values left out, kprof_settings) and
%% `Options', each over the one before. The one place that merges them.
-spec settings(settings()) -> settings().
settings(Options) ->
    settings(kprof_settings:rtrace(), Options).

settings(Env, Options) ->
    maps:merge(maps:merge(defaults(), Env), Options).

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
    case kprof_settings:check_options(Options) of
        ok -> begin_checked(Pid, Options, By);
        {error, _} = Bad -> Bad
    end.

%% Options are checked before anything runs: no bad value reaches the
%% server (kprof_settings).
begin_checked(Pid, Options, By) ->
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
%% Unless `Options' or the settings set `otp_calls' (or `bifs'), OTP's
%% calls are not frames: a request asked for this trace itself.
-spec begin_own(settings()) ->
          {ok, binary(), bounds(), {kprof_tracing:session(), [atom()], port() | undefined},
           kprof_rtrace_ticket:run() | undefined}
          | {error, term()}.
begin_own(Options) ->
    case kprof_settings:check_options(Options) of
        ok -> own_checked(Options);
        {error, _} = Bad -> Bad
    end.

%% A trace the process asks for itself has OTP's calls as its callers'
%% time unless its options or the settings set `otp_calls', or ask for BIF
%% frames (`bifs'), which are all in OTP's modules (docs/request-traces.md).
%% The environment is read once: requests pay for each read.
own_checked(Options0) ->
    Env = kprof_settings:rtrace(),
    Options = own_defaults(Options0, maps:merge(Env, Options0)),
    case kprof_rtrace_traces:begin_own(settings(Env, Options), Options) of
        none ->
            case begin_checked(self(), Options, self) of
                {ok, Id, Bounds, Tracing} -> {ok, Id, Bounds, Tracing, undefined};
                Error -> Error
            end;
        Begun ->
            Begun
    end.

own_defaults(Options = #{otp_calls := _}, _) ->
    Options;
own_defaults(Options, Set) ->
    Options#{otp_calls => maps:get(otp_calls, Set, maps:get(bifs, Set, false))}.

%% @doc Ends a trace begun by begin_trace/2: a call in which this server
%% clears the process's flags (clearing them on another process that runs
%% waits until it is scheduled out).
-spec end_trace(binary()) -> ok.
end_trace(Id) ->
    _ = call_running({end_trace, Id}, ok),
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
    call_running(collector_config, []).

%% @doc As collector_config/0, for a collector that takes the parts other
%% nodes trace of this node's requests (messages to `Collector', its pid).
-spec collector_config(pid()) -> [{atom(), term()}].
collector_config(Collector) when is_pid(Collector) ->
    call_running({collector_config, Collector}, []).

%% @doc From node `Origin', whose request traces follow their messages:
%% for the next 10 s, a process of this node that takes in a message of
%% one of them is traced here too, and its part of the trace goes back to
%% `Origin' (see kprof_rtrace_follow). Starts request tracing here if
%% needed (its collector, the tracer NIF); `Origin' says it again while it
%% follows.
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
        Server -> kprof_rtrace_guard:stop(Server)
    end.

%% A call to the server if it runs, else `NotRunning'.
call_running(Request, NotRunning) ->
    case whereis(?MODULE) of
        undefined -> NotRunning;
        Server -> call(Server, Request)
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
    call_running({trace_calls, MFA, Options}, {error, not_started}).

%% @doc Stops tracing new calls of `MFA'.
-spec stop_calls(mfa()) -> ok.
stop_calls(MFA) ->
    call_running({stop_calls, MFA}, ok).

%% @doc For the collector started by this node: from now on, new traces go
%% through the kprof_tracer NIF, connected to the collector at
%% 127.0.0.1:`TcpPort' (events leave as compact records written 64 KB at a
%% time, instead of a term and a socket write each through the trace
%% port). `ok', or why not (the trace port then goes on serving).
-spec use_nif(inet:port_number()) -> ok | {error, term()}.
use_nif(TcpPort) ->
    call_running({use_nif, TcpPort}, {error, not_started}).

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
    ok = kprof_rtrace_guard:ensure_free(Closed),
    case kprof_tiers:open_trace_port(maps:get(queue_size, Settings)) of
        {ok, Port, TcpPort} ->
            Guard = kprof_rtrace_guard:start(self(), Port, Closed),
            Collector = case Mode of
                            internal -> kprof_rtrace_collector:start(settings(#{}));
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

loop(S0) ->
    S = #state{settings = Settings} = kprof_rtrace_arming:publish(S0),
    Idle = maps:get(idle_ms, Settings),
    receive
        {begun, Id, Pid, Ms} -> % a begin with the ticket
            loop(kprof_rtrace_traces:begun(Id, Pid, Ms, S));
        recheck ->
            loop(kprof_rtrace_arming:recheck(S));
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
            loop(kprof_rtrace_traces:finish(Id, S));
        {end_trace, Id} -> % its process cleared its own flags
            loop(kprof_rtrace_traces:finish(Id, false, S));
        {run_timeout, Id, Pid} -> % a trace begun with no message
            loop(kprof_rtrace_traces:run_timeout(Id, Pid, S));
        {listen, Origin} when is_atom(Origin) ->
            loop(kprof_rtrace_follow:listen_on(S));
        listen_check ->
            loop(kprof_rtrace_follow:listen_check(S));
        listen_tick ->
            loop(kprof_rtrace_follow:listen_tick(S#state{ticking = false}));
        {rtrace_part_out, No, Origin, Part} when is_atom(Origin) ->
            loop(kprof_rtrace_follow:part_out(No, Origin, Part, S));
        {rtrace_part, No, From, Part} when is_atom(From) ->
            loop(kprof_rtrace_follow:part_in(No, From, Part, S));
        {clock, Node, Offset, Error, At} ->
            loop(S#state{clocks = (S#state.clocks)#{Node => {Offset, Error, At}}});
        {linger, Ref} when Ref =:= S#state.linger_timer ->
            loop(kprof_rtrace_arming:lingered(S#state{linger_timer = undefined}));
        watch ->
            loop(kprof_rtrace_bounds:watch(S));
        {arm_loaded, Ref} ->
            loop(kprof_rtrace_arming:arm_loaded(Ref, S));
        {reached, Pids} when is_list(Pids); Pids =:= all ->
            loop(kprof_rtrace_follow:untrace_reached(kprof_rtrace_follow:add_reached(Pids, S)));
        flush ->
            loop(kprof_rtrace_collector:flush(S#state{flush_timer = false}));
        {untrace, Pids} when is_list(Pids) ->
            _ = [kprof_rtrace_flags:untrace(P, S#state.session, S#state.port)
                 || P <- Pids, is_pid(P)],
            loop(S);
        {Port, {data, {_, Line}}} when Port =:= S#state.collector ->
            loop(kprof_rtrace_collector:line(Line, S));
        {Port, {exit_status, Status}} when Port =:= S#state.collector ->
            Status =:= 0 orelse logger:warning("kprof trace collector exited with ~p", [Status]),
            loop(release_first(S#state{collector = undefined}));
        stop ->
            kprof_rtrace_guard:shutdown(S);
        {nodedown, _} ->
            kprof_rtrace_guard:shutdown(S);
        {'EXIT', Port, _} when Port =:= S#state.port ->
            kprof_rtrace_guard:shutdown(S);
        _ ->
            loop(S)
    after Idle ->
        case maps:size(S#state.traces) =:= 0 andalso kprof_rtrace_arming:settled(S) of
            {true, S1} -> kprof_rtrace_guard:shutdown(S1);
            {false, S1} -> loop(S1);
            false -> loop(S)
        end
    end.

handle({begin_trace, Pid, Options, By}, S) ->
    %% the application environment as it is now: a change applies to the
    %% next trace
    kprof_rtrace_traces:begin_trace(Pid, Options, By, S#state{settings = settings(#{})});
handle({end_trace, Id}, S) ->
    {ok, kprof_rtrace_traces:finish(Id, S)};
handle({trace_calls, {_, _, _} = MFA, Options}, S) ->
    kprof_rtrace_calls:trace(MFA, Options, S);
handle({stop_calls, MFA}, S) ->
    kprof_rtrace_calls:stop(MFA, S);
handle({use_nif, TcpPort}, S) ->
    kprof_rtrace_collector:use_nif(TcpPort, S);
handle({collector_config, Collector}, S) ->
    handle(collector_config, S#state{collector_pid = Collector});
handle(collector_config, S) ->
    kprof_rtrace_collector:config(S);
handle(_, S) ->
    {{error, unknown_request}, S}.

%% A trace waiting for the BIFs' patterns to go (kprof_rtrace_traces) is
%% held, and answered with them gone (it passed the rate limit already); so
%% is trace_calls/2, whose meta pattern waits for them.
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
    lists:foldl(fun begin_or_hold/2, kprof_rtrace_follow:arm_listen(S), Calls).
