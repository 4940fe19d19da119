%%% @doc The collector's lifecycle, for kprof_rtrace's server: the kprof
%%% program (`kprof trace --session') that the server starts with it and
%%% watches, which takes the trace events, turns them into stacks and writes
%%% one eflame-compatible folded file and one perf-script file per request.
%%%
%%% The server opens the trace port; the collector it starts connects to it,
%%% reads where files go (config/1), then brings the tracer NIF and connects
%%% it (use_nif/2), from when on new traces go through the NIF: events leave
%%% as compact records the NIF holds and writes 64 KB at a time (flush/1),
%%% instead of a term and a socket write each through the trace port. The
%%% first traces wait for it (kprof_rtrace_first). Its lines are the node's
%%% log of the traces it writes (line/2). A kprof attached from a shell
%%% collects instead (`{kprof, rtrace, #{collector => external}}', or
%%% kprof_rtrace:start_external/1: no program is started). The server, its
%%% port and the collector stop after `idle_ms' without traces, or when the
%%% collector goes away.
-module(kprof_rtrace_collector).

-export([start/1, config/1, use_nif/2, line/2, flush/1, flush_soon/1]).

-include("kprof_rtrace.hrl").

%% @doc The collector program, unless a kprof attached from a shell
%% collects (`Settings' has `collector => external'); its port, or
%% undefined.
-spec start(kprof_rtrace:settings()) -> port() | undefined.
start(Settings) ->
    case Settings of
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

%% @doc What a collector is told (kprof_rtrace:collector_config/0): the
%% trace port's TCP port, where files go, and this node's clock.
-spec config(#state{}) -> {[{atom(), term()}], #state{}}.
config(S = #state{settings = Settings, tcp_port = TcpPort}) ->
    {[{port, TcpPort}, {dir, unicode:characters_to_binary(maps:get(dir, Settings))},
      {time, erlang:monotonic_time(nanosecond)}], S}.

%% @doc The collector connects the NIF at 127.0.0.1:`TcpPort': new traces
%% go through it, and what waited for it is armed (following, listening).
%% `ok', or why not (the trace port then goes on serving).
-spec use_nif(inet:port_number(), #state{}) -> {ok | {error, term()}, #state{}}.
use_nif(TcpPort, S) ->
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
                ok ->
                    {ok, kprof_rtrace_follow:arm_listen(
                           kprof_rtrace_follow:arm_follow(
                             kprof_rtrace_arming:nif_session(S#state{nif = true})))};
                Other -> {{error, Other}, S}
            end;
        Other ->
            {{error, Other}, S}
    end.

%% @doc A line of the collector's. Each trace it writes, it names the files
%% of: at a hundred traces a second (the HTTP toggles' default rate limit) a
%% notice each would flood the node's log, and cost the node about 90 us
%% of CPU apiece where the log is a file, three times the trace's own
%% (tests/bench/rtrace_overhead). So only the first is a notice, saying
%% where the others go; the others are info. Any other line (a trace not
%% written, and why) stays a notice.
-spec line(string(), #state{}) -> #state{}.
line(Line, S) ->
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

%% @doc What the NIF holds goes out: ?WATCH_MS after a trace's end, every
%% ?WATCH_MS while traces run, and, when the socket did not take it all
%% (the collector is busy), again ?WATCH_MS later until it has, traces or
%% not: the last trace's end mark must not wait for the next trace.
-spec flush(#state{}) -> #state{}.
flush(S = #state{nif = true}) ->
    case try kprof_tracer:flush() catch _:_ -> gone end of
        ok -> S;
        pending -> flush_soon(S);
        _ -> S#state{nif = false} % the collector went away
    end;
flush(S) ->
    S.

%% @doc A flush ?WATCH_MS from now, unless one is due: the retry of one the
%% socket did not take all of, and a trace's end, which goes out a little
%% later rather than at once: the collector then reads and writes the
%% trace's files after the request's last work (an HTTP answer is sent
%% after the trace ends), not beside it on the same cores. Measured on a
%% 2-core host: see performance.md, "HTTP".
-spec flush_soon(#state{}) -> #state{}.
flush_soon(S = #state{flush_timer = true}) ->
    S;
flush_soon(S = #state{nif = true}) ->
    erlang:send_after(?WATCH_MS, self(), flush),
    S#state{flush_timer = true};
flush_soon(S) ->
    S.
