%%% @doc The tracer of tests/bench/kprof_bench_null.c, which does nothing
%%% with its events: what the VM's own tracing costs a traced process
%%% (kprof_bench_rtrace:latency/1). Its NIF is loaded from beside this
%%% module's .beam.
-module(kprof_bench_null).

-export([enabled/3, trace/5]).
-on_load(init/0).

init() ->
    erlang:load_nif(filename:join(filename:dirname(code:which(?MODULE)), ?MODULE_STRING), 0).

-spec enabled(atom(), term(), pid() | port() | undefined) -> trace.
enabled(_, _, _) ->
    erlang:nif_error(not_loaded).

-spec trace(atom(), term(), pid() | port() | undefined, term(), map()) -> ok.
trace(_, _, _, _, _) ->
    erlang:nif_error(not_loaded).
