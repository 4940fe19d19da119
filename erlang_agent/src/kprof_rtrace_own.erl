%%% @doc A request trace from inside its own process: what
%%% kprof:trace_request/2, kprof:trace_begin/1 and kprof:trace_end/0 run.
%%%
%%% What the process does between its flags and its marks is paid for on
%%% the request's path, event by event (about 0.75 us each), and is not the
%%% request's. So the order is:
%%% <ol>
%%% <li>kprof_rtrace's server registers the trace (the one call; from OTP
%%%   25.3, with the patterns armed, a message instead, and none at all for
%%%   a trace whose messages are not followed: kprof_rtrace_ticket), then
%%%   the process puts its dictionary entry and its seq_trace token,
%%%   untraced;</li>
%%% <li>it sets its own flags and writes its begin mark, the trace's first
%%%   record (mark/3);</li>
%%% <li>at the end it writes its end mark and clears its
%%%   flags right away (kprof_rtrace:untrace_own/2); the rest is
%%%   untraced.</li>
%%% </ol>
%%% This module, kprof, kprof_rtrace, kprof_rtrace_traces, kprof_rtrace_flags,
%%% kprof_tracing, kprof_tracer and the trace API they call have no call
%%% patterns while traces run (kprof_rtrace_patterns' ?OWN), nor have BIFs
%%% by default: what is left are the marks, and their calls' events where
%%% the trace port serves instead of the NIF.
-module(kprof_rtrace_own).

-export([begin_trace/1, end_trace/1, end_trace/0, id/0, running/1]).

%% the running trace in the process's dictionary
-define(KEY, kprof_rtrace_own).

-opaque trace() :: {Id :: binary(), kprof_tracing:session(), port() | undefined,
                    Label :: {kprof, pos_integer()} | undefined,
                    kprof_rtrace_ticket:run() | undefined}.
-export_type([trace/0]).

%% @doc Begins a trace of the calling process with `Options' (see
%% kprof_rtrace:defaults/0; OTP's calls are not frames unless `otp_calls'
%% or `bifs' is set: kprof_rtrace:begin_own/1); end it with end_trace/1. An
%% error when one runs already in the process or tracing cannot run now.
-spec begin_trace(kprof_rtrace:settings()) -> {ok, binary(), trace()} | {error, term()}.
begin_trace(Options) ->
    case get(?KEY) of
        undefined ->
            case kprof_rtrace:begin_own(Options) of
                {ok, Id, Bounds, {Session, Flags, Port}, Run} ->
                    T = {Id, Session, Port, follow(Bounds), Run},
                    put(?KEY, T),
                    case kprof_tracing:process(Session, self(), true, Flags) of
                        1 ->
                            mark(Session, begin_trace, {Id, Bounds}),
                            {ok, Id, T};
                        0 -> % another tracer took the process since the check
                            forget(T),
                            ok = kprof_rtrace_ticket:run_ended(Run),
                            kprof_rtrace:end_trace(Id),
                            {error, cannot_trace_process}
                    end;
                {error, _} = Error ->
                    Error
            end;
        {Id, _, _, _, _} ->
            {error, {already_tracing, Id}}
    end.

%% @doc Ends trace `T' of the calling process, unless it ended already
%% (end_trace/0 inside kprof:trace_request/2).
-spec end_trace(trace()) -> ok.
end_trace({Id, Session, Port, _, Run} = T) ->
    %% the mark first: an ended trace's is ignored
    mark(Session, end_trace, Id),
    case get(?KEY) of
        T ->
            ok = kprof_rtrace:untrace_own(Session, Port),
            forget(T),
            kprof_rtrace:ended(Id, Run);
        _ ->
            ok
    end.

%% @doc Ends the trace running in the calling process, if any.
-spec end_trace() -> ok.
end_trace() ->
    case get(?KEY) of
        undefined -> ok;
        T -> end_trace(T)
    end.

%% @doc The id of the trace running in the calling process, or undefined.
-spec id() -> binary() | undefined.
id() ->
    case get(?KEY) of
        {Id, _, _, _, _} -> Id;
        undefined -> undefined
    end.

%% @doc For kprof_rtrace's server: the id of the trace running in process
%% `Pid', or undefined (read from its dictionary, as id/0 in it).
-spec running(pid()) -> binary() | undefined.
running(Pid) ->
    case erlang:process_info(Pid, dictionary) of
        {dictionary, Dict} ->
            case lists:keyfind(?KEY, 1, Dict) of
                {_, {Id, _, _, _, _}} -> Id;
                false -> undefined
            end;
        undefined ->
            undefined
    end.

%% The mark: written by the NIF at once when it is the session's tracer
%% (kprof_tracer:mark/2: 1 us where the traced call and its return took 3
%% to 4 on OTP 27), else kprof_rtrace_mark's call, whose pattern gives it.
%% A NIF gone since the ticket (unloaded with kprof) costs the mark only:
%% the collector cuts that trace.
mark(Session, Which, Msg) ->
    case kprof_tracing:tracer(Session) of
        {kprof_tracer, _} ->
            try kprof_tracer:mark(Which, Msg) catch error:_ -> ok end;
        _ ->
            kprof_rtrace_mark:Which(Msg)
    end.

forget({_, _, _, Label, _}) ->
    _ = erase(?KEY),
    unfollow(Label).

%% The request's messages are followed into the processes they reach
%% (kprof_rtrace) when they carry a seq_trace token labelled {kprof, N},
%% whose `receive' flag tells kprof when a process takes one in: the
%% process gets one, unless it has a token already (a user's, or tier
%% tracing's), which stays untouched; its messages are then not followed.
follow(#{follow := N}) ->
    case seq_trace:get_token() of
        [] ->
            _ = seq_trace:set_token(label, {kprof, N}),
            _ = seq_trace:set_token('receive', true),
            {kprof, N};
        _ ->
            undefined
    end;
follow(_) ->
    undefined.

%% Only kprof's own token goes, before the end message to kprof_rtrace,
%% which must not carry it.
unfollow(undefined) ->
    ok;
unfollow(Label) ->
    case seq_trace:get_token(label) of
        {label, Label} -> _ = seq_trace:set_token([]), ok;
        _ -> ok
    end.
