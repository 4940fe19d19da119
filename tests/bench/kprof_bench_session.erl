%%% @doc What arming request-trace patterns costs in the node's shared trace
%%% session and in a trace session of kprof's own (OTP 27 and later), for
%%% tests/bench/trace_session_cost. kprof_rtrace arms a local pattern on every
%%% loaded function for its first trace and removes it after the last: on the
%%% shared session with erlang:trace_pattern/3, on its own by opening a
%%% session, one trace:function/4 and closing it (kprof_tracing).
%%%
%%% `main/1' loads the modules of kernel, stdlib, compiler and inets (a node
%%% with an application's worth of code), then runs `Reps' repetitions, each
%%% timing `Cycles' arm-and-remove cycles of each kind, interleaved, and
%%% prints one line of medians per cycle: wall time of the caller (what a
%%% traced request waits, cold) and the node's CPU time (schedstat of all
%%% its threads).
-module(kprof_bench_session).

-export([main/1, node_cpu_ns/0]).

-spec main([string()]) -> ok.
main([CyclesText, RepsText]) ->
    Cycles = list_to_integer(CyclesText),
    Reps = list_to_integer(RepsText),
    load_modules(),
    Functions = lists:sum([length(M:module_info(functions)) || M <- erlang:loaded(),
                                                                 M =/= erlang]),
    Own = own_sessions(),
    Kinds = [shared | [own || Own]],
    Runs = [[{K, run(K, Cycles)} || K <- Kinds] || _ <- lists:seq(1, Reps)],
    Med = fun(K, I) ->
                  median([element(I, V) || Run <- Runs, {K1, V} <- Run, K1 =:= K])
          end,
    io:format("OTP ~s: ~b modules, ~b functions; per arm-and-remove cycle (medians of ~b x ~b):~n",
              [erlang:system_info(otp_release), length(erlang:loaded()), Functions, Reps, Cycles]),
    [io:format("  ~-30s wall ~8.1f us   node CPU ~8.1f us~n",
               [label(K), Med(K, 1), Med(K, 2)]) || K <- Kinds],
    Own orelse io:format("  (no trace sessions before OTP 27)~n"),
    ok.

label(shared) -> "shared session (trace_pattern)";
label(own) -> "kprof's own session".

own_sessions() ->
    _ = code:ensure_loaded(trace),
    erlang:function_exported(trace, session_create, 3).

load_modules() ->
    Apps = [kernel, stdlib, compiler, inets],
    [code:ensure_loaded(list_to_atom(filename:basename(F, ".beam")))
     || A <- Apps, Dir <- [code:lib_dir(A)], is_list(Dir),
        F <- filelib:wildcard(filename:join([Dir, "ebin", "*.beam"]))],
    ok.

%% {wall us, node CPU us} per cycle, over `Cycles' cycles.
run(Kind, Cycles) ->
    Cpu0 = node_cpu_ns(),
    {Us, ok} = timer:tc(fun() -> cycles(Kind, Cycles) end),
    Cpu = node_cpu_ns() - Cpu0,
    {Us / Cycles, Cpu / 1000 / Cycles}.

cycles(_, 0) ->
    ok;
cycles(shared, N) ->
    _ = erlang:trace_pattern({'_', '_', '_'}, true, [local]),
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    cycles(shared, N - 1);
cycles(own, N) ->
    S = kprof_tracing:open(kprof_rtrace, self()),
    _ = kprof_tracing:function(S, {'_', '_', '_'}, true, [local]),
    _ = kprof_tracing:close(S),
    cycles(own, N - 1).

%% @doc The CPU time of all the node's threads so far, ns (the first field
%% of each one's schedstat): arming stops every scheduler at a code
%% barrier. Also kprof_bench_rtrace's.
-spec node_cpu_ns() -> non_neg_integer().
node_cpu_ns() ->
    {ok, Tids} = file:list_dir("/proc/self/task"),
    lists:sum([case file:read_file("/proc/self/task/" ++ T ++ "/schedstat") of
                   {ok, B} ->
                       [Ns | _] = string:lexemes(binary_to_list(B), " \n"),
                       list_to_integer(Ns);
                   _ ->
                       0 % a thread gone
               end || T <- Tids]).

median(L) ->
    lists:nth((length(L) + 1) div 2, lists:sort(L)).
