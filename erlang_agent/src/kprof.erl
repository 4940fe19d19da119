%%% @doc The kprof API for code running in the profiled node: marking the
%%% requests that tier tracing times.
%%%
%%% A request is marked at its entry point, by wrapping it
%%% (`do_apply/3') or by a begin/end pair (`set_token/0,1' and
%%% `clear_token/0') for code that cannot be wrapped. Marking costs one
%%% `persistent_term' read when no tier tracing runs, so the calls can stay in
%%% production code. While `kprof tiers' runs, the mark sets a seq_trace
%%% token in the process (label: the process's pid); every tier function
%%% called under that token, in this process or in processes reached by its
%%% messages or spawned by it, is timed and attributed to the request.
%%%
%%% The identity of a request (e.g. `create', `read') groups its timings; it
%%% comes from the `identity_f' option (`fun({M, F, Args}) -> Identity') for
%%% `do_apply/3', or is given to `set_token/1'. Requests without one are
%%% grouped as `undefined'.
-module(kprof).

-export([start/0, start_trace/1, stop_trace/0, stats/0]).
-export([do_apply/3, do_apply/4, set_token/0, set_token/1, clear_token/0]).
-export([trace_request/1, trace_request/2, trace_begin/0, trace_begin/1, trace_end/0,
         trace_id/0]).

-define(SETTINGS, {kprof_tiers, settings}).

%% @doc Starts the kprof application (the original kprof API; tracing
%% itself starts with start_trace/1).
-spec start() -> ok | {error, term()}.
start() ->
    case application:ensure_all_started(kprof) of
        {ok, _} -> ok;
        Error -> Error
    end.

%% @doc Starts tier tracing of this node with `Options' (see
%% kprof_tiers:normalize/1: `{tier_config, [{Name, {M, F, Arity}}]}',
%% `{identity_f, Fun}', `{print_calls, Bool}', `{stats_dumper, {file, Path}}',
%% `{sample_rate, Float}', `{slow_threshold, Us}', `{report_interval, Ms}',
%% `{entry, MFA}', overload settings). The kprof program does the work
%% outside the VM (see kprof_session); this returns once tracing runs.
-spec start_trace([kprof_tiers:option()]) -> ok | {error, string()}.
start_trace(Options) ->
    case kprof_tiers:normalize(Options) of
        {ok, _} -> kprof_session:start(Options);
        {error, _} = Error -> Error
    end.

%% @doc Stops tier tracing: every trace pattern, flag and setting is removed,
%% the program writes its final report.
-spec stop_trace() -> ok.
stop_trace() ->
    kprof_session:stop().

%% @doc Applies `M:F(A)' as one traced request (when tier tracing runs and
%% this request is sampled), and returns its result. The caller's previous
%% seq_trace token is restored afterwards.
-spec do_apply(module(), atom(), [term()]) -> term().
do_apply(M, F, A) when is_atom(M), is_atom(F), is_list(A) ->
    run(M, F, A, identity_f).

%% @doc As do_apply/3, with the request's identity given (`identity_f' is
%% not called).
-spec do_apply(module(), atom(), [term()], term()) -> term().
do_apply(M, F, A, Identity) when is_atom(M), is_atom(F), is_list(A) ->
    run(M, F, A, {identity, Identity}).

run(M, F, A, How) ->
    case persistent_term:get(?SETTINGS, undefined) of
        undefined ->
            apply(M, F, A);
        #{active := Active, identity_f := IdentityF, sample_rate := Rate} ->
            case atomics:get(Active, 1) =:= 1 andalso sampled(Rate) of
                false ->
                    apply(M, F, A);
                true ->
                    Identity = case How of
                                   {identity, I} -> I;
                                   identity_f -> identity(IdentityF, {M, F, A})
                               end,
                    Previous = seq_trace:get_token(),
                    try
                        kprof_tier_mark:request(Identity, fun() -> apply(M, F, A) end)
                    after
                        seq_trace:set_token(Previous)
                    end
            end
    end.

%% @doc Starts a traced request in the calling process, with no identity.
-spec set_token() -> ok.
set_token() ->
    set_token(undefined).

%% @doc Starts a traced request of `Identity' (an atom or a string) in the
%% calling process; it lasts until `clear_token/0'.
-spec set_token(term()) -> ok.
set_token(Identity) ->
    case persistent_term:get(?SETTINGS, undefined) of
        #{active := Active, sample_rate := Rate} ->
            case atomics:get(Active, 1) =:= 1 andalso sampled(Rate) of
                true -> kprof_tier_mark:begin_request(Identity);
                false -> ok
            end;
        _ ->
            ok
    end.

%% @doc Ends the request started by `set_token/0,1' in this process and
%% clears the seq_trace token.
-spec clear_token() -> ok.
clear_token() ->
    case seq_trace:get_token() of
        [] -> ok;
        _ ->
            kprof_tier_mark:end_request(),
            _ = seq_trace:set_token([]),
            ok
    end.

%% @doc The latest statistics of the tier tracing running on this node: a
%% map with `table' (the text table) and `json' (the line of counts since
%% start), or `undefined' when none runs or no report has come yet.
-spec stats() -> kprof_tiers:report() | undefined.
stats() ->
    kprof_tiers:report().

%% @doc Runs `Fun' in the calling process as one traced request and returns
%% its result. Tracing is on before `Fun' starts (so even a sub-millisecond
%% request is traced) and follows the processes it spawns; the kprof program
%% writes `DIR/TIME-ID.folded' (eflame-compatible: microseconds, `sleep' for
%% time scheduled out), its flame graph `DIR/TIME-ID.svg' and
%% `DIR/TIME-ID.perf'. When tracing cannot run (a
%% bound, no kprof program), `Fun' runs untraced. kprof:trace_id/0 gives the
%% id inside `Fun'.
%%
%% A trace a request asks for itself shows the request's own code: calls
%% into Erlang/OTP's and Elixir's applications are their callers' time
%% (`otp_calls => false'), unless the options or the application
%% environment set `otp_calls => true'. Why: through inets, OTP's calls are
%% twenty times the events of the request's own, and their tracing cost
%% would widen OTP's frames in the picture (docs/request-traces.md).
-spec trace_request(fun(() -> Result)) -> Result.
trace_request(Fun) ->
    trace_request(#{}, Fun).

%% @doc As trace_request/1 with options overriding the application
%% environment `{kprof, rtrace, Map}' (kprof_rtrace:settings(): for
%% instance `max_duration_ms', `max_events', `otp_calls', `dir'). Options
%% that are not what their key takes (kprof_settings:check_options/1) leave
%% the request untraced, with a warning in the node's log (at most one a
%% minute).
-spec trace_request(kprof_rtrace:settings(), fun(() -> Result)) -> Result.
trace_request(Options, Fun) when is_map(Options), is_function(Fun, 0) ->
    case kprof_rtrace_own:begin_trace(Options) of
        {ok, _Id, Trace} ->
            try Fun() after kprof_rtrace_own:end_trace(Trace) end;
        {error, {bad_option, _, _, _} = Bad} ->
            kprof_settings:warn(Bad),
            Fun();
        {error, _} ->
            Fun()
    end.

%% @doc Starts a traced request in the calling process (for code that cannot
%% be wrapped); trace_end/0 ends it. As trace_request/1, OTP's calls are
%% their callers' time unless `otp_calls => true' is set.
-spec trace_begin() -> {ok, binary()} | {error, term()}.
trace_begin() ->
    trace_begin(#{}).

%% @doc As trace_begin/0 with options, as trace_request/2 takes them. A bad
%% option is `{error, {bad_option, Key, Value, Takes}}', Takes saying what
%% the key takes.
-spec trace_begin(kprof_rtrace:settings()) -> {ok, binary()} | {error, term()}.
trace_begin(Options) when is_map(Options) ->
    case kprof_rtrace_own:begin_trace(Options) of
        {ok, Id, _} -> {ok, Id};
        {error, _} = Error -> Error
    end.

%% @doc Ends the traced request of the calling process, if any.
-spec trace_end() -> ok.
trace_end() ->
    kprof_rtrace_own:end_trace().

%% @doc The id of the request trace running in this process, or undefined.
-spec trace_id() -> binary() | undefined.
trace_id() ->
    kprof_rtrace_own:id().

sampled(Rate) when Rate >= 1.0 -> true;
sampled(Rate) -> rand:uniform() =< Rate.

identity(undefined, _) ->
    undefined;
identity(IdentityF, MFA) ->
    try IdentityF(MFA) catch _:_ -> undefined end.

