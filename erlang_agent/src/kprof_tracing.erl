%%% @doc Where kprof's trace settings live: the one home of the node's trace
%%% API for kprof_rtrace and kprof_tiers.
%%%
%%% On OTP 27 and later kprof traces in a trace session of its own
%%% (trace:session_create/3): its flags and patterns sit beside those of
%%% other sessions (dbg makes its own) without touching them, a user's
%%% tracer goes on receiving its events from a process kprof traces too, and
%%% closing the session removes everything kprof set there at once. The
%%% session also goes when its last handle is garbage collected: a killed
%%% owner leaves nothing behind once its guard lets go.
%%%
%%% Before OTP 27 there is one session, shared by every tracer of the node
%%% (erlang:trace/3, erlang:trace_pattern/3): a process has one tracer and a
%%% function one call pattern, so kprof's callers check what is someone
%%% else's before they set anything, and undo exactly what they set
%%% (shared/1 tells them which case they are in).
%%%
%%% The functions take what the `trace' module's take, with the session's
%%% tracer implied; a closed session (closed/0, or close/1's result) sets
%%% nothing and reports nothing traced.
%%%
%%% A look from a shell: `kprof_tracing:sessions()' names kprof's sessions
%%% alive in the node, and `kprof_tracing:info(kprof_tracing:session_of(kprof_rtrace),
%%% Pid, flags)' says what kprof's request traces set on `Pid' (the process
%%% that opens a session keeps it in its dictionary).
-module(kprof_tracing).

-export([open/2, close/1, closed/0, shared/1, tracer/1, process/4, function/4, send/2,
         info/3, action_flags/2, session_of/1, sessions/0]).

%% kprof's tracers: the ip trace port of runtime_tools, or the
%% kprof_tracer erl_tracer NIF with its state.
-type tracer() :: port() | {kprof_tracer, term()}.
-opaque session() :: {shared, tracer() | none} | {own, reference() | tuple(), tracer()} | closed.
-export_type([session/0, tracer/0]).

-define(KEY, kprof_trace_session). % in the dictionary of the process that opened it
%% the names kprof's sessions get
-define(NAMES, [kprof_rtrace, kprof_tiers]).

%% @doc A session whose events go to `Tracer': kprof's own on OTP 27 and
%% later, named `Name' (trace:session_info/1 shows it), else the node's
%% shared one. Close it with close/1.
-spec open(kprof_rtrace | kprof_tiers, tracer()) -> session().
open(Name, Tracer) ->
    case has_sessions() of
        true ->
            S = {own, apply(trace, session_create, [Name, Tracer, []]), Tracer},
            put(?KEY, S),
            S;
        false -> {shared, Tracer}
    end.

%% @doc Removes everything set in kprof's own session (flags, patterns,
%% meta patterns, the send pattern). The shared session is the callers' to
%% clean. Returns the closed session.
-spec close(session()) -> session().
close(S = {own, Handle, _}) ->
    _ = apply(trace, session_destroy, [Handle]),
    _ = get(?KEY) =:= S andalso erase(?KEY),
    closed;
close({shared, _}) ->
    {shared, none};
close(closed) ->
    closed.

%% @doc The session of a caller that has none open: on the shared session,
%% it can still clear flags and patterns and ask about them.
-spec closed() -> session().
closed() ->
    case has_sessions() of
        true -> closed;
        false -> {shared, none}
    end.

%% @doc The session that the kprof process registered as `Name' has open,
%% else closed/0's.
-spec session_of(kprof_rtrace | kprof_tiers) -> session().
session_of(Name) ->
    Dictionary = case whereis(Name) of
                     undefined -> [];
                     Pid -> case process_info(Pid, dictionary) of
                                {dictionary, D} -> D;
                                undefined -> []
                            end
                 end,
    case lists:keyfind(?KEY, 1, Dictionary) of
        {?KEY, S} -> S;
        false -> closed()
    end.

%% @doc kprof's own sessions alive in the node, as trace:session_info/1
%% names them (none before OTP 27): once kprof has stopped, none.
-spec sessions() -> [term()].
sessions() ->
    case has_sessions() of
        true -> [S || S <- apply(trace, session_info, [all]), lists:member(name(S), ?NAMES)];
        false -> []
    end.

%% @doc Whether the session is the node's shared one (before OTP 27), where
%% a process or function may be another tracer's.
-spec shared(session()) -> boolean().
shared({shared, _}) -> true;
shared(_) -> false.

%% @doc The session's tracer, or `none' when it is closed or the shared
%% session of closed/0.
-spec tracer(session()) -> tracer() | none.
tracer({own, _, Tracer}) -> Tracer;
tracer({shared, Tracer}) -> Tracer;
tracer(closed) -> none.

%% @doc Sets (`true') or clears (`false') trace flags of a process, of
%% `all' processes, or of `new' ones; as trace:process/4. A process that is
%% gone counts 0.
-spec process(session(), pid() | all | new, boolean(), [atom()]) -> non_neg_integer().
process(closed, _, _, _) ->
    0;
process({own, Handle, _}, PidSpec, How, Flags) ->
    try apply(trace, process, [Handle, PidSpec, How, Flags]) catch error:badarg -> 0 end;
process({shared, Tracer}, PidSpec, true, Flags) when Tracer =/= none ->
    try erlang:trace(PidSpec, true, [tracer_flag(Tracer) | Flags]) catch error:badarg -> 0 end;
process({shared, _}, PidSpec, false, Flags) ->
    try erlang:trace(PidSpec, false, Flags) catch error:badarg -> 0 end.

%% @doc Sets or removes a call pattern, as trace:function/4: `meta' in
%% `Flags' sends meta events to the session's tracer.
-spec function(session(), mfa() | {module(), '_', '_'} | {'_', '_', '_'} | on_load,
               trace_match_spec() | boolean(), [local | meta]) -> non_neg_integer().
function(closed, _, _, _) ->
    0;
function({own, Handle, _}, MFA, Spec, Flags) ->
    apply(trace, function, [Handle, MFA, Spec, Flags]);
function({shared, Tracer}, MFA, Spec, Flags) ->
    erlang:trace_pattern(MFA, Spec, [meta_flag(F, Tracer) || F <- Flags]).

%% @doc Sets the pattern of message sending, as trace:send/3.
-spec send(session(), trace_match_spec() | boolean()) -> non_neg_integer().
send(closed, _) ->
    0;
send({own, Handle, _}, Spec) ->
    apply(trace, send, [Handle, Spec, []]);
send({shared, _}, Spec) ->
    send_pattern(Spec).

%% @doc What the session sets on a process, a function or an event, as
%% trace:info/3; a closed session reports nothing set.
-spec info(session(), pid() | new | mfa() | on_load | send, atom()) -> term().
info(closed, What, Item) ->
    untraced(What, Item);
info({own, Handle, _}, What, Item) ->
    try apply(trace, info, [Handle, What, Item]) catch error:badarg -> untraced(What, Item) end;
info({shared, _}, What, Item) ->
    erlang:trace_info(What, Item).

%% @doc The flags of a match spec's `{trace, Disable, Enable}' that gives
%% a process `Flags' with the session's tracer: the shared session's must
%% name it, kprof's own implies it.
-spec action_flags(session(), [atom()]) -> [atom() | {{tracer, _}} | {{tracer, _, _}}].
action_flags({shared, Tracer}, Flags) when Tracer =/= none ->
    [{tracer_flag(Tracer)} | Flags];
action_flags(_, Flags) ->
    Flags.

-type trace_match_spec() :: [{[term()] | '_' | atom(), [term()], [term()]}].

%% {Name, Id} on OTP 27
name(S) when is_tuple(S) -> element(1, S);
name(S) -> S.

%% From the release, not from the `trace' module: asking whether a module
%% that OTP 25 and 26 lack can be loaded is a call to the code server, which
%% searches the code path each time; in a node whose schedulers are busy on
%% a loaded host, the request-trace server spent seconds there per trace.
has_sessions() ->
    list_to_integer(erlang:system_info(otp_release)) >= 27.

tracer_flag({Module, State}) -> {tracer, Module, State};
tracer_flag(Port) -> {tracer, Port}.

%% The port as meta tracer: `{meta, erl_tracer, Port}' is what the VM makes
%% of `{meta, Port}' (trace_info/2 answers `{meta, Port}' for either), and
%% the form erlang:trace_pattern/3's spec allows, which names only a pid.
meta_flag(meta, {Module, State}) -> {meta, Module, State};
meta_flag(meta, Port) -> {meta, erl_tracer, Port};
meta_flag(Flag, _) -> Flag.

untraced(send, match_spec) -> {match_spec, true};
untraced(What, tracer) when is_pid(What); What =:= new -> {tracer, []};
untraced(What, flags) when is_pid(What); What =:= new -> {flags, []};
untraced(_, Item) -> {Item, false}.

%% OTP 25's spec of erlang:trace_pattern/2,3 leaves out `send', which the
%% function takes (as erlang:trace_pattern/3's documentation says).
-dialyzer({[no_fail_call, no_return], send_pattern/1}).
send_pattern(MS) ->
    erlang:trace_pattern(send, MS, []).
