%%% Workloads with a known answer for native CPU sampling (tests/integration/
%%% native_cpu):
%%%   burst: gen_servers answering calls with short CPU bursts of about 2,000
%%%     reductions in one of three functions, 6:3:1, clients calling them in a
%%%     loop; the case where reading stacks with process_info lands on
%%%     receives;
%%%   spin: processes each spinning in a function of its own, for
%%%     attribution;
%%%   bif: a process whose time goes into a BIF's C code (erlang:phash2/1
%%%     of a list of 2,000 integers), for the unwinding of C frames;
%%%   deep: a process 20 calls deep in deep/1 (not tail calls) under
%%%     deep_loop/0, spinning in deep_leaf/1 at the bottom: a known call
%%%     chain;
%%%   load: kpt_load loaded from a directory while a profile runs, and
%%%     again from another (its old code purged), a process running its
%%%     loop/0 through both.
%%% main/1 writes "NAME PID" lines to the ready file and then owns the
%%% processes forever (a node started with -eval would end them otherwise).
-module(kpt_burst).
-behaviour(gen_server).
-export([main/1, start_spinners/0, stop_spinners/0, stop_clients/0, start_bif_loop/0,
         start_deep/0, load_code/1]).
-export([init/1, handle_call/3, handle_cast/2]).
-export([burst_a/2, burst_b/2, burst_c/2, spin_one/1, spin_two/1, spin_three/1, bif_loop/2,
         deep_loop/0, deep/1, deep_leaf/1]).

-define(SERVERS, 2).
-define(BURST, 2000).

-spec main(string()) -> no_return().
main(Ready) ->
    Servers = [begin {ok, S} = gen_server:start(?MODULE, [], []), S end
               || _ <- lists:seq(1, ?SERVERS)],
    Clients = [spawn(fun() -> client(S) end) || S <- Servers],
    register(kpt_burst_clients, spawn(fun() -> hold(Clients) end)),
    ok = file:write_file(Ready, [["server ", pid_to_list(S), "\n"] || S <- Servers]),
    receive after infinity -> ok end.

hold(Pids) ->
    receive
        stop -> [exit(P, kill) || P <- Pids], hold([])
    end.

client(Server) ->
    gen_server:call(Server, work),
    client(Server).

%% @doc Stops the clients: the servers then wait.
-spec stop_clients() -> ok.
stop_clients() ->
    kpt_burst_clients ! stop,
    ok.

%% @doc Starts three processes, each spinning in its own function; returns
%% "one <0.N.0>,two <0.M.0>,three <0.K.0>".
-spec start_spinners() -> string().
start_spinners() ->
    Spinners = [{one, spawn(?MODULE, spin_one, [0])}, {two, spawn(?MODULE, spin_two, [0])},
                {three, spawn(?MODULE, spin_three, [0])}],
    persistent_term:put(kpt_burst_spinners, Spinners),
    lists:flatten(lists:join(",", [[atom_to_list(N), " ", pid_to_list(P)]
                                   || {N, P} <- Spinners])).

%% @doc Stops the spinners.
-spec stop_spinners() -> ok.
stop_spinners() ->
    [exit(P, kill) || {_, P} <- persistent_term:get(kpt_burst_spinners, [])],
    ok.

%% @doc Starts a process hashing a list in a loop; returns its pid as text.
-spec start_bif_loop() -> string().
start_bif_loop() ->
    P = spawn(?MODULE, bif_loop, [lists:seq(1, 2000), 0]),
    persistent_term:put(kpt_burst_bif_loop, P),
    pid_to_list(P).

-spec init([]) -> {ok, non_neg_integer()}.
init([]) -> {ok, 0}.

-spec handle_call(work, gen_server:from(), non_neg_integer()) ->
          {reply, non_neg_integer(), non_neg_integer()}.
handle_call(work, _From, N) ->
    R = case N rem 10 of
            K when K < 6 -> burst_a(?BURST, N);
            K when K < 9 -> burst_b(?BURST, N);
            _ -> burst_c(?BURST, N)
        end,
    {reply, R, N + 1}.

-spec handle_cast(term(), non_neg_integer()) -> {noreply, non_neg_integer()}.
handle_cast(_, N) -> {noreply, N}.

%% Pure Erlang loops (no BIF calls): their time is theirs in every profiler.
-spec burst_a(non_neg_integer(), integer()) -> integer().
burst_a(0, Acc) -> Acc;
burst_a(K, Acc) -> burst_a(K - 1, (Acc * 31 + K) band 16#ffffff).

-spec burst_b(non_neg_integer(), integer()) -> integer().
burst_b(0, Acc) -> Acc;
burst_b(K, Acc) -> burst_b(K - 1, (Acc * 17 + K) band 16#ffffff).

-spec burst_c(non_neg_integer(), integer()) -> integer().
burst_c(0, Acc) -> Acc;
burst_c(K, Acc) -> burst_c(K - 1, (Acc * 13 + K) band 16#ffffff).

-spec spin_one(integer()) -> no_return().
spin_one(Acc) -> spin_one((Acc * 7 + 1) band 16#ffffff).

-spec spin_two(integer()) -> no_return().
spin_two(Acc) -> spin_two((Acc * 11 + 1) band 16#ffffff).

-spec spin_three(integer()) -> no_return().
spin_three(Acc) -> spin_three((Acc * 5 + 1) band 16#ffffff).

%% Nearly all its time is in phash2's C code (a light BIF), called from here.
-spec bif_loop([integer()], integer()) -> no_return().
bif_loop(List, Acc) -> bif_loop(List, Acc bxor erlang:phash2(List)).

%% @doc Starts the deep process (stopped by stop_spinners/0); its pid.
-spec start_deep() -> string().
start_deep() ->
    P = spawn(?MODULE, deep_loop, []),
    persistent_term:put(kpt_burst_spinners,
                        [{deep, P} | persistent_term:get(kpt_burst_spinners, [])]),
    pid_to_list(P).

%% deep_leaf/1 returns (after about 0.3 s), else the compiler would know
%% that deep/1 never does, and make its calls tail calls
-spec deep_loop() -> no_return().
deep_loop() ->
    _ = deep(20),
    deep_loop().

-spec deep(non_neg_integer()) -> non_neg_integer().
deep(0) -> deep_leaf(100000000);
deep(N) ->
    R = deep(N - 1),
    R + 1.

-spec deep_leaf(non_neg_integer()) -> 0.
deep_leaf(0) -> 0;
deep_leaf(K) -> deep_leaf(K - 1).

%% @doc Loads `Dir'/kpt_load.beam, the older version purged first, and
%% the first time starts a process running kpt_load:loop/0; once it has
%% left the version just replaced (it calls loop/0 by its module), purges
%% that too. "ok".
-spec load_code(string()) -> string().
load_code(Dir) ->
    _ = code:purge(kpt_load),
    {module, kpt_load} = code:load_abs(filename:join(Dir, "kpt_load")),
    case persistent_term:get(kpt_load_runner, undefined) of
        undefined -> persistent_term:put(kpt_load_runner, spawn(fun() -> kpt_load:loop() end));
        _ -> timer:sleep(200), false = code:purge(kpt_load)
    end,
    "ok".
