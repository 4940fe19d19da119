%%% @doc Workload of tests/bench/trace_calls_cost: call/1, a request that
%%% casts to a gen_server and waits for its reply, made at a fixed rate by
%%% one process, so that the node's CPU time for a fixed number of calls
%%% can be compared with and without `kprof trace --mfa'.
-module(kprof_bench_calls).
-behaviour(gen_server).

-export([main/1, call/1, run/2]).
-export([init/1, handle_call/3, handle_cast/2]).

%% @doc Starts the server, then writes `Ready'.
-spec main(string()) -> ok.
main(Ready) ->
    {ok, _} = gen_server:start({local, kprof_bench_calls_srv}, ?MODULE, [], []),
    ok = file:write_file(Ready, "ready").

%% @doc One request.
-spec call(non_neg_integer()) -> ok.
call(K) ->
    gen_server:cast(kprof_bench_calls_srv, {K, self()}),
    receive {kprof_bench_calls, K} -> ok end.

%% @doc `N' calls, `PerMs' of them each millisecond; "done".
-spec run(pos_integer(), pos_integer()) -> string().
run(N, PerMs) ->
    Start = erlang:monotonic_time(microsecond),
    loop(0, N, PerMs, Start),
    "done".

loop(N, N, _, _) -> ok;
loop(I, N, PerMs, Start) ->
    ok = call(I),
    case (I + 1) rem PerMs of
        0 ->
            %% pace: call I + 1 is due at (I + 1) / PerMs ms
            Due = Start + (I + 1) * 1000 div PerMs,
            Wait = (Due - erlang:monotonic_time(microsecond)) div 1000,
            Wait > 0 andalso timer:sleep(Wait);
        _ -> ok
    end,
    loop(I + 1, N, PerMs, Start).

-spec init([]) -> {ok, []}.
init([]) -> {ok, []}.
-spec handle_call(term(), gen_server:from(), []) -> {reply, ok, []}.
handle_call(_, _, S) -> {reply, ok, S}.
-spec handle_cast({non_neg_integer(), pid()}, []) -> {noreply, []}.
handle_cast({K, From}, S) ->
    _ = erlang:phash2(K),
    From ! {kprof_bench_calls, K},
    {noreply, S}.
