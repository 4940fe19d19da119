%%% @doc The erl_tracer NIF of request traces (c_src/kprof_tracer.c): events
%%% leave the node as compact records in 64 KB writes to the kprof
%%% collector's socket, instead of a term and a socket write each through
%%% the ip trace port. kprof_rtrace uses it when the NIF loads (from the
%%% kprof application's priv directory) and the collector asks for it;
%%% otherwise it keeps the ip trace port.
-module(kprof_tracer).

-export([load/0, load/2, loaded/0, connect/1, flush/0, close/0, mark/2]).
%% tier tracing
-export([connect/2, rearm/0]).
%% erl_tracer
-export([enabled/3, trace/5]).

%% @doc Loads the NIF from priv/kprof_tracer.so; `ok' or `{error, Why}'.
-spec load() -> ok | {error, term()}.
load() ->
    %% priv/ beside the directory this module was loaded from (an installed
    %% application, or a build tree: build/agent_ebin and build/priv), else
    %% the kprof application's priv/
    Beside = filename:join(filename:dirname(filename:dirname(code:which(?MODULE))), "priv"),
    Dirs = [Beside | [D || D <- [code:priv_dir(kprof)], is_list(D)]],
    case [D || D <- Dirs, filelib:is_regular(filename:join(D, "kprof_tracer.so"))] of
        [] ->
            {error, {no_nif, Dirs}};
        [Dir | _] ->
            case erlang:load_nif(filename:join(Dir, "kprof_tracer"), 0) of
                ok -> ok;
                {error, {reload, _}} -> ok;
                {error, _} = E -> E
            end
    end.

%% @doc Loads the NIF from `Path' (the .so file's full name, ".so"
%% included), which kprof wrote for this node (sampler/node/nif.c) when the
%% node has no kprof application: `ok' when the NIF is loaded, now or
%% before; `{error, {not_same_host, Why}}' when the file is missing,
%% unreadable or not the bytes whose MD5 is `Md5' (the node runs on another
%% host than kprof, or does not see kprof's /tmp, e.g. under systemd's
%% PrivateTmp; `Why' is the file error or `md5_differs'); `{error, Why}'
%% when the NIF does not load. Never raises: it runs inside the profiled
%% node.
-spec load(file:filename(), <<_:128>>) -> ok | {error, term()}.
load(Path, Md5) ->
    %% everything inside the try: a clause that does not match, or a
    %% badarg from load_nif/2, must not escape into the rpc
    try
        case file:read_file(Path) of
            {error, Why} ->
                {error, {not_same_host, Why}};
            {ok, Bytes} ->
                case erlang:md5(Bytes) =:= Md5 of
                    false ->
                        {error, {not_same_host, md5_differs}};
                    true ->
                        case erlang:load_nif(filename:rootname(Path), 0) of
                            ok ->
                                ok;
                            {error, _} = E ->
                                %% already loaded into this module's current
                                %% code (reload) is as good as loaded now;
                                %% into its old code only (upgrade) is not:
                                %% the current code's functions are stubs
                                case loaded() of
                                    true -> ok;
                                    false -> E
                                end
                        end
                end
        end
    catch
        Class:Reason -> {error, {Class, Reason}}
    end.

%% @doc Whether the NIF is loaded into this module's current code. Asks
%% enabled/3 about `trace_status', which the NIF answers without touching
%% its state, and the stub answers by raising.
-spec loaded() -> boolean().
loaded() ->
    try enabled(trace_status, [], self()) of
        _ -> true
    catch
        error:_ -> false
    end.

%% @doc Connects the NIF to the collector listening on 127.0.0.1:Port.
-spec connect(inet:port_number()) -> ok | {error, term()}.
connect(_Port) -> erlang:nif_error(not_loaded).

%% @doc Connects the NIF to the collector on 127.0.0.1:Port for tier
%% tracing: calls go out as SEQ_CALL records (token label and request
%% identity), and the NIF trips once more than `FillMark' bytes wait or an
%% event is dropped: it discards every event from then on, flush/0 says
%% `{tripped, Bytes}', until rearm/0.
-spec connect(inet:port_number(), pos_integer()) -> ok | {error, term()}.
connect(_Port, _FillMark) -> erlang:nif_error(not_loaded).

%% @doc Tier tracing: events are taken again after a trip.
-spec rearm() -> ok.
rearm() -> erlang:nif_error(not_loaded).

%% @doc Writes out what the socket takes now, without waiting: `ok' when
%% nothing is left, `pending' when some is (call again later), `error' when
%% the connection is gone, `{tripped, Bytes}' when tier tracing's breaker
%% tripped with Bytes waiting (see connect/2).
-spec flush() -> ok | pending | error | {tripped, non_neg_integer()}.
flush() -> erlang:nif_error(not_loaded).

%% @doc The calling process's begin or end mark, `Msg' whole, as its call
%% of kprof_rtrace_mark:begin_trace/1 or end_trace/1 gives it to the NIF,
%% for a process whose own trace runs through the NIF (kprof_rtrace_own):
%% one NIF call in the order of its events, instead of a traced call and
%% its return. `ok', also with no connection.
-spec mark(begin_trace | end_trace, term()) -> ok.
mark(_Which, _Msg) -> erlang:nif_error(not_loaded).

%% @doc Flushes and closes the connection; tracing through it stops.
-spec close() -> ok.
close() -> erlang:nif_error(not_loaded).

%% @private erl_tracer
-spec enabled(atom(), term(), pid() | port()) -> trace | discard | remove.
enabled(_Tag, _State, _Tracee) -> erlang:nif_error(not_loaded).

%% @private erl_tracer
-spec trace(atom(), term(), pid() | port(), term(),
            #{extra => term(), match_spec_result => term(), monotonic => integer(),
              scheduler_id => non_neg_integer(), timestamp => integer()}) -> ok.
trace(_Tag, _State, _Tracee, _Term, _Opts) -> erlang:nif_error(not_loaded).
