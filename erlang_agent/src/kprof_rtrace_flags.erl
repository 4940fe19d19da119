%%% @doc The process flags of kprof's request traces: which it sets, and
%%% how they are cleared. In kprof's own session (OTP 27 and later) every
%%% flag is kprof's; in the shared one, a process another tracer holds is
%%% left alone, and only where the tracer is kprof's (its trace port or the
%%% kprof_tracer NIF) are flags cleared. Clearing a running process's flags
%%% from another waits until it is scheduled out.
-module(kprof_rtrace_flags).

-export([flags/0, follow_flags/0, untrace/3, untrace_all/2, clear_kept/2, foreign_tracer/3,
         foreign_processes/2, is_kprof_tracer/2]).

%% What a request trace sets on its own process (and, with `send', on one
%% whose messages are followed).
-define(FLAGS, [call, return_to, arity, running, garbage_collection, procs, set_on_spawn,
                monotonic_timestamp]).
%% What clearing another process's flags leaves it until the send pattern
%% is gone, so that its tracer stays: the send pattern's `trace' gives the
%% receiver flags, letting go of the sender's lock meanwhile, and OTP 25
%% then reads the sender's tracer; cleared by then (all its flags gone),
%% that crashes the node (seen with `kprof trace --mfa', whose callers'
%% flags the collector has cleared as they go on sending).
-define(KEPT, [monotonic_timestamp]).

%% @doc The flags a request's own process gets; `send' too when its
%% messages are followed.
-spec flags() -> [atom()].
flags() ->
    ?FLAGS.

%% @doc The flags a process a request's message reaches gets, from the send
%% pattern (kprof_rtrace_follow's follow_spec/3): it is traced as the
%% request's processes are, its own messages are followed too (`send'), and
%% what it spawns while it works for the request is the request's.
-spec follow_flags() -> [atom()].
follow_flags() ->
    [send | ?FLAGS].

%% @doc The tracer of `Pid' when it is someone else's, else `false'
%% (always, in kprof's own session).
-spec foreign_tracer(pid(), kprof_tracing:session(), port() | undefined) -> term() | false.
foreign_tracer(Pid, Session, Port) ->
    case kprof_tracing:info(Session, Pid, tracer) of
        {tracer, []} -> false;
        {tracer, Tracer} ->
            case is_kprof_tracer(Tracer, Port) of
                true -> false;
                false -> Tracer
            end;
        _ -> false % not alive
    end.

%% @doc The processes another tracer traces: none outside the shared
%% session.
-spec foreign_processes(kprof_tracing:session(), port() | undefined) -> [pid()].
foreign_processes(Session, Port) ->
    case kprof_tracing:shared(Session) of
        true -> [P || P <- erlang:processes(), foreign_tracer(P, Session, Port) =/= false];
        false -> []
    end.

%% OTP 25's spec of erlang:trace_info/2 leaves out `{Module, State}', the
%% tracer of processes that kprof's erl_tracer NIF traces, which it does
%% return: dialyzer would call the second clause unreachable.
-dialyzer({no_match, is_kprof_tracer/2}).
%% @doc Whether a process's or a pattern's tracer is kprof's: its trace
%% port `Port', or the NIF.
-spec is_kprof_tracer(term(), port() | undefined) -> boolean().
is_kprof_tracer(Port, Port) -> true;
is_kprof_tracer({kprof_tracer, _}, _) -> true;
is_kprof_tracer(_, _) -> false.

%% @doc Clears kprof's flags on `Pid' if kprof traces it (another tracer's
%% process keeps its flags; a process of another node got none here); on
%% another process than the caller, all but ?KEPT.
-spec untrace(pid(), kprof_tracing:session(), port() | undefined) -> ok.
untrace(Pid, Session, Port) ->
    untrace(Pid, Session, Port,
            if Pid =:= self() -> [send | ?FLAGS]; true -> [send | ?FLAGS] -- ?KEPT end).

%% In kprof's own session every flag is kprof's: no check, which matters
%% on the request's path (kprof_rtrace:untrace_own/2): on OTP 27
%% trace:info/3 on a process takes 5 to 20 us, the clearing 1 us. In the
%% shared one, only where the tracer is kprof's.
untrace(Pid, Session, Port, Flags) when node(Pid) =:= node() ->
    case kprof_tracing:shared(Session) of
        false ->
            _ = kprof_tracing:process(Session, Pid, false, Flags),
            ok;
        true ->
            case kprof_tracing:info(Session, Pid, tracer) of
                {tracer, Tracer} when Tracer =/= [] ->
                    _ = is_kprof_tracer(Tracer, Port) andalso
                        kprof_tracing:process(Session, Pid, false, Flags),
                    ok;
                _ -> ok
            end
    end;
untrace(_, _, _, _) ->
    ok.

%% @doc Every process kprof traces: its tracer is kprof's. That includes
%% the processes traced ones spawned (they inherit flags and tracer through
%% set_on_spawn), which no list here holds; run only when every trace
%% stops at once. In the shared session, one pass over the processes, each
%% checked for kprof's tracer; in kprof's own every flag is kprof's, and
%% one call clears them all. All but ?KEPT: clear_kept/2 clears those.
-spec untrace_all(kprof_tracing:session(), port() | undefined) -> ok.
untrace_all(Session, Port) ->
    untrace_all(Session, Port, [send | ?FLAGS] -- ?KEPT).

untrace_all(Session, Port, Flags) ->
    _ = case kprof_tracing:shared(Session) of
            true -> [untrace(P, Session, Port, Flags) || P <- erlang:processes()];
            false -> kprof_tracing:process(Session, all, false, Flags)
        end,
    ok.

%% @doc The flags untrace/3 keeps on other processes: they go once the
%% send pattern is gone (kprof_rtrace_guard:disarm_owned/2), see ?KEPT.
-spec clear_kept(kprof_tracing:session(), port() | undefined) -> ok.
clear_kept(Session, Port) ->
    untrace_all(Session, Port, ?KEPT).
