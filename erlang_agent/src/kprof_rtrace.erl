%%% @doc Single-request traces: the in-node half. It starts tracing of a
%%% request's process synchronously, before the request's work, and emits
%%% the events; the kprof program (`kprof trace --session', started and
%%% watched here) turns them into stacks and writes one eflame-compatible
%%% folded file and one perf-script file per request.
%%%
%%% == How a trace runs ==
%%% <ol>
%%% <li>`begin_trace/2' (a call to this server) checks the bounds, arms the
%%%   trace patterns if no trace runs yet (local call patterns on every loaded
%%%   function: they exist only while a trace runs), and sets the trace flags
%%%   `call', `return_to', `arity', `running', `garbage_collection', `procs',
%%%   `set_on_spawn' and `monotonic_timestamp' on the process, with the ip
%%%   trace port as tracer. When it returns, tracing is on.</li>
%%% <li>The process calls `kprof_rtrace_mark:begin_trace/1', whose pattern
%%%   puts the trace id and bounds into the stream: the collector learns the
%%%   process belongs to that trace. Processes it spawns inherit the flags;
%%%   the collector learns them from `spawn' events.</li>
%%% <li>At the end the process calls `kprof_rtrace_mark:end_trace/1' and
%%%   `end_trace/1' clears its flags. The collector asks this server to clear
%%%   the flags of the trace's other processes. After the last trace the
%%%   patterns are removed.</li>
%%% </ol>
%%% Bounds: concurrent traces (`max_concurrent'), duration (`max_duration_ms':
%%% a timer here stops the trace; the request goes on untraced) and events
%%% (`max_events': counted by the collector, which cuts the trace). Past a
%%% bound the file ends with a marker frame. The server, its port and the
%%% collector stop after `idle_ms' without traces. Traces asked for with a
%%% `rate_limit' (per second; the HTTP toggles do) take a token from a bucket
%%% that holds `rate_limit' tokens (at least one) and refills at that rate;
%%% with none left they are refused.
%%%
%%% Settings come from the application environment `{kprof, request_trace,
%%% Map}' merged with the options of each call; see defaults/0.
-module(kprof_rtrace).

-export([begin_trace/2, end_trace/1, defaults/0, collector_config/0, stop/0]).
-export([start_external/1, trace_pid/2, trace_calls/1, stop_calls/1, use_nif/1]).
%% spawned
-export([init/2]).

%% Request-trace settings: the application environment `{kprof,
%% request_trace, Map}' and the options of a call (see defaults/0).
-type settings() :: #{dir => file:filename_all(),
                      max_duration_ms => pos_integer(),
                      max_events => pos_integer(),
                      max_concurrent => pos_integer(),
                      queue_size => pos_integer(),
                      max_backlog_mb => pos_integer(),
                      idle_ms => pos_integer(),
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
-type bounds() :: #{max_events := pos_integer(), max_duration_ms := pos_integer(),
                    name => term()}.
-export_type([settings/0, bounds/0]).

-define(FLAGS, [call, return_to, arity, running, garbage_collection, procs, set_on_spawn,
                monotonic_timestamp]).
-define(CALL_TIMEOUT, 10000).
-define(WATCH_MS, 20). % also how often the NIF's buffer is flushed

%% @doc The settings and their defaults.
-spec defaults() -> settings().
defaults() ->
    #{dir => "/tmp/kprof-traces", max_duration_ms => 5000, max_events => 1000000,
      max_concurrent => 8, queue_size => 10000, max_backlog_mb => 64,
      idle_ms => 60000}.

settings(Options) ->
    Env = application:get_env(kprof, request_trace, #{}),
    maps:merge(maps:merge(defaults(), if is_map(Env) -> Env; true -> #{} end), Options).

%% @doc Starts tracing `Pid' (the caller, usually) as a new request trace.
%% Returns the trace id and its bounds (for kprof_rtrace_mark:begin_trace/1),
%% or an error when tracing cannot run now (the
%% request should then run untraced).
-spec begin_trace(pid(), settings()) -> {ok, binary(), bounds()} | {error, term()}.
begin_trace(Pid, Options) when is_pid(Pid), is_map(Options) ->
    case ensure_started() of
        {ok, Server} -> call(Server, {begin_trace, Pid, Options});
        {error, _} = E -> E
    end.

%% @doc Ends a trace (normally from the traced process, after its work).
-spec end_trace(binary()) -> ok.
end_trace(Id) ->
    case whereis(?MODULE) of
        undefined -> ok;
        Server -> call(Server, {end_trace, Id})
    end,
    ok.

%% @doc For the collector: the trace port and where files go.
-spec collector_config() -> [{atom(), term()}].
collector_config() ->
    case whereis(?MODULE) of
        undefined -> [];
        Server -> call(Server, collector_config)
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
            receive {'DOWN', Ref, process, _, _} -> ok after 5000 -> exit(Server, kill), ok end
    end.

call(Server, Request) ->
    Ref = monitor(process, Server),
    Server ! {call, self(), Ref, Request},
    receive
        {Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, process, _, Why} -> {error, {kprof_rtrace, Why}}
    after ?CALL_TIMEOUT ->
        demonitor(Ref, [flush]),
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
                {ok, _} -> collector_config();
                {error, _} = E -> E
            end;
        _ ->
            {error, "request tracing already runs on this node"}
    end.

%% @doc Starts a trace of the process `PidText' ("<0.123.0>") from outside.
-spec trace_pid(string(), settings()) -> {ok, binary(), pid()} | {error, term()}.
trace_pid(PidText, Options) ->
    case catch list_to_pid(PidText) of
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

%% @doc For `kprof trace --mfa': from now on, every process that calls
%% `{M, F, Arity}' is traced from that call on (a meta pattern whose match
%% spec sets the trace flags, so the call itself starts the trace); the
%% collector counts them and calls stop_calls/1.
-spec trace_calls(mfa()) -> ok | {error, term()}.
trace_calls({M, F, A} = MFA) when is_atom(M), is_atom(F), is_integer(A) ->
    case whereis(?MODULE) of
        undefined -> {error, not_started};
        Server -> call(Server, {trace_calls, MFA})
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

-record(trace, {id :: binary(), root :: pid(), timer :: reference(), pids = [] :: [pid()]}).
-record(state, {port :: port(), tcp_port :: inet:port_number(), settings :: settings(),
                collector :: port() | undefined, traces = #{} :: #{binary() => #trace{}},
                armed = false :: boolean(), seq = 0 :: non_neg_integer(),
                last_limited = 0 :: integer(), % when the bucket was last filled, us
                tokens = 1.0e9 :: float(),      % full: min(Burst, ...) caps it
                calls = [] :: [mfa()],           % traced by trace_calls/1
                baseline = 0 :: non_neg_integer(), % system memory when armed
                nif = false :: boolean(),          % kprof_tracer is connected
                flush_timer = false :: boolean()}). % a retry of flush/1 is due

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
    case {erlang:trace_info(new, tracer), whereis(kprof_tiers)} of
        {{tracer, []}, undefined} -> ok;
        {_, undefined} -> exit({failed, "another tracer (e.g. dbg) traces new processes"});
        _ -> exit({failed, "tier tracing runs on this node; request traces wait until it stops"})
    end,
    case kprof_tiers:open_trace_port(maps:get(queue_size, Settings)) of
        {ok, Port, TcpPort} ->
            Self = self(),
            spawn(fun() -> guard(Self) end),
            Collector = case Mode of
                            internal -> start_collector();
                            {external, Node} -> true = monitor_node(Node, true), undefined
                        end,
            Starter ! {self(), started},
            loop(#state{port = Port, tcp_port = TcpPort, settings = Settings,
                        collector = Collector,
                        last_limited = erlang:monotonic_time(microsecond)});
        {error, Why} ->
            exit({failed, Why})
    end.

%% The collector program, unless a kprof attached from a shell collects
%% (`{kprof, request_trace, #{collector => external}}').
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

loop(S = #state{settings = Settings}) ->
    Idle = maps:get(idle_ms, Settings),
    receive
        {call, From, Ref, Request} ->
            {Reply, S1} = handle(Request, S),
            From ! {Ref, Reply},
            loop(S1);
        {timeout, Id} ->
            loop(finish(Id, S));
        watch ->
            loop(watch(S));
        flush ->
            loop(flush(S#state{flush_timer = false}));
        {untrace, Pids} when is_list(Pids) ->
            _ = [catch erlang:trace(P, false, ?FLAGS) || P <- Pids, is_pid(P)],
            loop(S);
        {Port, {data, {_, Line}}} when Port =:= S#state.collector ->
            logger:notice("~ts", [Line]),
            loop(S);
        {Port, {exit_status, Status}} when Port =:= S#state.collector ->
            Status =:= 0 orelse logger:warning("kprof trace collector exited with ~p", [Status]),
            loop(S#state{collector = undefined});
        stop ->
            shutdown(S);
        {nodedown, _} ->
            shutdown(S);
        {'EXIT', Port, _} when Port =:= S#state.port ->
            shutdown(S);
        _ ->
            loop(S)
    after Idle ->
        case maps:size(S#state.traces) of
            0 -> shutdown(S);
            _ -> loop(S)
        end
    end.

handle({begin_trace, Pid, Options}, S0 = #state{traces = Traces}) ->
    %% the application environment as it is now: a change applies to the
    %% next trace
    S = S0#state{settings = settings(#{})},
    Settings = maps:merge(S#state.settings, Options),
    Now = erlang:monotonic_time(microsecond),
    %% only a caller that asks for it is rate limited (not the settings): a
    %% token bucket of Rate tokens (at least one) refilled at Rate a second
    {Limited, Tokens} =
        case Options of
            #{rate_limit := Rate} when is_number(Rate), Rate > 0 ->
                Burst = max(1.0, float(Rate)),
                Filled = min(Burst, S#state.tokens + (Now - S#state.last_limited) * Rate / 1.0e6),
                {Filled < 1.0, Filled};
            #{rate_limit := _} -> {true, 0.0};
            _ -> {false, S#state.tokens}
        end,
    case {Limited, maps:size(Traces) >= maps:get(max_concurrent, Settings)} of
        {true, _} ->
            {{error, rate_limited}, S};
        {_, true} ->
            {{error, busy}, S};
        _ when is_map_key(rate_limit, Options) ->
            handle({begin_trace, Pid, maps:remove(rate_limit, Options)},
                   S#state{last_limited = Now, tokens = Tokens - 1.0});
        _ ->
            S1 = arm(S),
            Seq = S1#state.seq + 1,
            Id = trace_id(Seq),
            erlang:trace(Pid, true, [tracer(S1) | ?FLAGS]),
            Timer = erlang:send_after(maps:get(max_duration_ms, Settings), self(), {timeout, Id}),
            T = #trace{id = Id, root = Pid, timer = Timer},
            {{ok, Id, maps:with([max_events, max_duration_ms, name], Settings)},
             S1#state{seq = Seq, traces = Traces#{Id => T}}}
    end;
handle({end_trace, Id}, S) ->
    {ok, finish(Id, S)};
handle({trace_calls, {M, F, A} = MFA}, S) ->
    case code:ensure_loaded(M) of
        {module, M} ->
            S1 = arm(S),
            Flags = [{{tracer, S1#state.port}} | ?FLAGS],
            %% the call sets the flags on its process and tells the collector
            %% (its meta event starts the trace); its return ends it. The
            %% port as meta tracer: `{meta, erl_tracer, Port}' is what the VM
            %% makes of `{meta, Port}' (trace_info/2 answers `{meta, Port}'
            %% for either), and the form erlang:trace_pattern/3's spec
            %% allows, which names only a pid.
            N = erlang:trace_pattern(MFA, [{'_', [], [{trace, [], Flags}, {return_trace}]}],
                                     [{meta, erl_tracer, S1#state.port}]),
            {case N of 0 -> {error, {no_such_function, M, F, A}}; _ -> ok end,
             S1#state{calls = [MFA | S1#state.calls]}};
        _ ->
            {{error, {no_such_module, M}}, S}
    end;
handle({stop_calls, MFA}, S) ->
    erlang:trace_pattern(MFA, false, [meta]),
    S1 = S#state{calls = lists:delete(MFA, S#state.calls)},
    case {S1#state.calls, maps:size(S1#state.traces)} of
        {[], 0} -> {ok, disarm(S1)};
        _ -> {ok, S1}
    end;
handle({use_nif, TcpPort}, S) ->
    case catch kprof_tracer:load() of
        ok ->
            case catch kprof_tracer:connect(TcpPort) of
                ok -> {ok, S#state{nif = true}};
                Other -> {{error, Other}, S}
            end;
        Other ->
            {{error, Other}, S}
    end;
handle(collector_config, S = #state{settings = Settings, tcp_port = TcpPort}) ->
    {[{port, TcpPort}, {dir, unicode:characters_to_binary(maps:get(dir, Settings))},
      {time, erlang:monotonic_time(nanosecond)}], S};
handle(_, S) ->
    {{error, unknown_request}, S}.

%% Ids: time-based and unique, never from request data.
trace_id(Seq) ->
    Rand = erlang:phash2({node(), erlang:unique_integer(), erlang:system_time()}, 1 bsl 24),
    list_to_binary(io_lib:format("~.36B~4.36.0B~5.36.0B",
                                 [erlang:system_time(second), Seq rem 1679616, Rand])).

finish(Id, S = #state{traces = Traces}) ->
    case maps:take(Id, Traces) of
        {#trace{root = Root, timer = Timer}, Rest} ->
            _ = erlang:cancel_timer(Timer),
            catch erlang:trace(Root, false, ?FLAGS),
            S1 = flush(S#state{traces = Rest}),
            case {maps:size(Rest), S1#state.calls} of
                {0, []} -> disarm(S1);
                _ -> S1
            end;
        error ->
            S
    end.

%% Undoes everything if the server dies without its own shutdown (killed).
guard(Server) ->
    Ref = monitor(process, Server),
    receive {'DOWN', Ref, process, Server, _} -> ok end,
    erlang:trace(all, false, ?FLAGS),
    erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    erlang:trace_pattern({'_', '_', '_'}, false, [meta]).

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
            erlang:trace(all, false, ?FLAGS),
            Ids = maps:keys(Traces),
            S1 = cut_marks(S, Ids, node_backlog),
            logger:warning("kprof: request traces cut: the node's trace queue grew past ~p MB",
                           [maps:get(max_backlog_mb, Settings)]),
            lists:foldl(fun finish/2, S1, Ids)
    end.

%% The marks come from this process, traced for the moment it makes them.
cut_marks(S, Ids, Why) ->
    erlang:trace(self(), true, [call, tracer(S)]),
    [kprof_rtrace_mark:end_trace({Id, Why}) || Id <- Ids],
    erlang:trace(self(), false, [call]),
    flush(S).

tracer(#state{nif = true}) -> {tracer, kprof_tracer, []};
tracer(#state{port = Port}) -> {tracer, Port}.

%% What the NIF holds goes out: at a trace's end, every ?WATCH_MS while
%% traces run, and, when the socket did not take it all (the collector is
%% busy), again ?WATCH_MS later until it has, traces or not: the last
%% trace's end mark must not wait for the next trace.
flush(S = #state{nif = true}) ->
    case catch kprof_tracer:flush() of
        ok -> S;
        pending when S#state.flush_timer -> S;
        pending ->
            erlang:send_after(?WATCH_MS, self(), flush),
            S#state{flush_timer = true};
        _ -> S#state{nif = false} % the collector went away
    end;
flush(S) ->
    S.

arm(S = #state{armed = true}) -> S;
arm(S) ->
    erlang:send_after(?WATCH_MS, self(), watch),
    {module, _} = code:ensure_loaded(kprof_rtrace_mark),
    erlang:trace_pattern({'_', '_', '_'}, true, [local]),
    %% the marks carry the trace's id and bounds into the stream
    erlang:trace_pattern({kprof_rtrace_mark, begin_trace, 1},
                         [{['$1'], [], [{message, '$1'}]}], [local]),
    erlang:trace_pattern({kprof_rtrace_mark, end_trace, 1},
                         [{['$1'], [], [{message, '$1'}]}], [local]),
    S#state{armed = true, baseline = erlang:memory(system)}.

disarm(S = #state{armed = false}) -> S;
disarm(S) ->
    erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    S#state{armed = false}.

-spec shutdown(#state{}) -> no_return().
shutdown(S = #state{traces = Traces, calls = Calls}) ->
    _ = [erlang:trace_pattern(MFA, false, [meta]) || MFA <- Calls],
    _ = [catch erlang:trace(R, false, ?FLAGS) || #trace{root = R} <- maps:values(Traces)],
    %% processes spawned by traced ones inherited the flags
    erlang:trace(all, false, ?FLAGS),
    _ = disarm(S#state{armed = true}),
    S#state.nif andalso (catch kprof_tracer:close()),
    catch port_close(S#state.port),
    exit(normal).
