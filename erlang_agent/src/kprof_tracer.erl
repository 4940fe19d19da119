%%% @doc The erl_tracer NIF of request traces (c_src/kprof_tracer.c): events
%%% leave the node as compact records in 64 KB writes to the kprof
%%% collector's socket, instead of a term and a socket write each through
%%% the ip trace port. kprof_rtrace uses it when the NIF loads (from the
%%% kprof application's priv directory) and the collector asks for it;
%%% otherwise it keeps the ip trace port.
-module(kprof_tracer).

-export([load/0, connect/1, flush/0, close/0]).
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

%% @doc Connects the NIF to the collector listening on 127.0.0.1:Port.
-spec connect(inet:port_number()) -> ok | {error, term()}.
connect(_Port) -> erlang:nif_error(not_loaded).

%% @doc Writes out what the socket takes now, without waiting: `ok' when
%% nothing is left, `pending' when some is (call again later), `error' when
%% the connection is gone.
-spec flush() -> ok | pending | error.
flush() -> erlang:nif_error(not_loaded).

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
