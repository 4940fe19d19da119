%%% @doc The node is left as found: what request tracing sets in a node
%%% (kprof_rtrace's server), and how exactly that is undone, by the server
%%% as it disarms and stops (shutdown/1), and by its guard, a process of its
%%% own, when the server is killed.
%%%
%%% On OTP 27 and later the patterns and flags are in kprof's own trace
%%% session (kprof_tracing), open while the patterns are armed
%%% (kprof_rtrace_arming): closing it removes them all, and another
%%% session's (dbg's) are not touched. Before OTP 27 all tracers share one
%%% session: functions that had a call pattern (a user's `dbg:tp'/`dbg:tpl')
%%% are not armed; the set armed is remembered (owned()) and removed
%%% exactly (disarm_owned/2), and a pattern someone put on an armed function
%%% meanwhile stays; so does a meta pattern someone put in place of one of
%%% kprof's (stop_meta/3). Flags are cleared only on processes whose tracer
%%% is kprof's (the trace port or the kprof_tracer NIF); a process another
%%% tracer traces is never taken (one tracer a process:
%%% kprof_rtrace_flags). The system seq tracer goes back to none if it is
%%% still kprof's. The guard knows the same set (or holds the session): the
%%% server tells it what it owns before it sets it (tell_guard/1), and the
%%% guard undoes it when the server dies without its own shutdown.
-module(kprof_rtrace_guard).

-export([ensure_free/1, start/3, tell_guard/1, metas/1, disarm_owned/2, release_seq_tracer/0,
         stop_meta/3, shutdown/1, stop/1]).

-include("kprof_rtrace.hrl").

%% `all': every loaded function (no one else had a call pattern); else
%% modules armed whole ({M, '_', '_'}) and functions armed one by one (in
%% modules where someone else has call patterns).
-type armed_set() :: kprof_rtrace_patterns:armed_set().
%% The patterns kprof set: the armed set, whether it set the on_load
%% pattern too (then the modules loaded at that moment: any other module,
%% loaded since, got kprof's pattern from it, else false), and whether it
%% set the send pattern that follows a request's messages.
-type owned() :: {armed_set(), false | [module()], boolean()}.
-export_type([owned/0]).

%% @doc In the server as it starts, with nothing set yet in `Closed': the
%% node is another's to trace when another tracer (e.g. dbg) traces new
%% processes, or tier tracing runs on it (kprof_tiers; request traces wait
%% until it stops): then the server exits `{failed, Why}'; else `ok'.
-spec ensure_free(kprof_tracing:session()) -> ok.
ensure_free(Closed) ->
    case {kprof_tracing:info(Closed, new, tracer), whereis(kprof_tiers)} of
        {{tracer, []}, undefined} -> ok;
        {_, undefined} -> exit({failed, "another tracer (e.g. dbg) traces new processes"});
        _ -> exit({failed, "tier tracing runs on this node; request traces wait until it stops"})
    end.

%% @doc Starts the guard of server `Server' (the caller), which traces
%% through its trace port `Port', with nothing set yet in `Session'.
-spec start(pid(), port(), kprof_tracing:session()) -> pid().
start(Server, Port, Session) ->
    spawn(fun() -> guard(Server, Port, Session) end).

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

%% @doc The meta patterns kprof set: --mfa's, and listening's.
-spec metas(#state{}) -> [mfa()].
metas(#state{calls = Calls, listened = Listened}) -> Calls ++ Listened.

%% @doc The guard learns what the server owns now; the state.
-spec tell_guard(#state{}) -> #state{}.
tell_guard(S = #state{guard = Guard}) ->
    Guard ! {owned, S#state.session, S#state.owned, metas(S)},
    S.

%% @doc Removes exactly what kprof_rtrace_arming:arm/1 set: the on_load
%% pattern first (no module gets kprof's pattern any more), then the armed
%% set, then the patterns of the modules loaded since, which took kprof's
%% from on_load.
-spec disarm_owned(kprof_tracing:session(), owned()) -> ok.
disarm_owned(Session, {Set, OnLoad, true}) ->
    %% the send pattern first: no process is followed any more; one someone
    %% set since is theirs
    _ = case kprof_tracing:info(Session, send, match_spec) of
            {match_spec, [{['$1', '_'], _, [{trace, '$1', [], Flags} | _]} | _]} ->
                %% kprof's, with the tracer it names
                %% (kprof_rtrace_follow:follow_spec/3)
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

%% OTP 25's spec of seq_trace:get_system_tracer/0 leaves out a tracer
%% module, which it returns: dialyzer would call the match impossible.
-dialyzer({no_match, release_seq_tracer/0}).
%% @doc The system seq tracer goes back to none, if it is still kprof's NIF.
-spec release_seq_tracer() -> ok.
release_seq_tracer() ->
    _ = seq_trace:get_system_tracer() =:= ?NIF andalso seq_trace:set_system_tracer(false),
    ok.

%% @doc Removes kprof's meta pattern on `MFA', unless someone replaced it
%% (in the shared session); how many functions it removed it from.
-spec stop_meta(mfa(), kprof_tracing:session(), port()) -> non_neg_integer().
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

%% @doc The server stops: every trace ends, what kprof set goes, the guard
%% is told it has nothing left to do, the NIF's connection and the trace
%% port close.
-spec shutdown(#state{}) -> no_return().
shutdown(S = #state{traces = Traces, calls = Calls, port = Port, session = Session}) ->
    _ = [stop_meta(MFA, Session, Port) || MFA <- Calls],
    _ = [kprof_rtrace_flags:untrace(R, Session, Port) || #trace{root = R} <- maps:values(Traces)],
    %% processes spawned by traced ones inherited the flags;
    %% kprof_rtrace_follow:quiet/1 does it too, with the tokens following left
    _ = case S#state.owned of
            {_, _, true} -> kprof_rtrace_follow:quiet(S);
            _ -> kprof_rtrace_flags:untrace_all(Session, Port)
        end,
    _ = kprof_rtrace_arming:disarm(S#state{armed = true}),
    S#state.guard ! done,
    S#state.nif andalso (try kprof_tracer:close() catch _:_ -> ok end),
    try port_close(S#state.port) catch error:badarg -> ok end,
    exit(normal).

%% @doc kprof_rtrace:stop/0, for server `Server': its own shutdown/1.
-spec stop(pid()) -> ok.
stop(Server) ->
    Ref = monitor(process, Server),
    Server ! stop,
    receive {'DOWN', Ref, process, _, _} -> ok
    after 5000 ->
        %% too slow to shut down (a loaded host): killed, its guard undoes
        %% what it set. Gone when this returns, so that what comes next
        %% (kprof tiers) finds no server here
        exit(Server, kill),
        receive {'DOWN', Ref, process, _, _} -> ok
        after 5000 -> demonitor(Ref, [flush]), ok
        end
    end.
