%%% Workloads whose CPU states are known, for tests/integration/cpu_states:
%%% kprof's native samples per state set beside the VM's own microstate
%%% accounting (msacc) over the same seconds.
%%%   erlang: processes spinning in Erlang code (emulator);
%%%   gc: processes building and dropping large lists (gc);
%%%   socket: pairs of processes ping-ponging over TCP on loopback (port,
%%%     check_io);
%%%   trickle: a light timer-driven load, for a node started with
%%%     +sbwt very_long, whose schedulers then spin for work (busy wait).
%%%     Eight timers, each waking a peer: one alone often leaves both on
%%%     one scheduler, which then waits in poll rather than spinning, and
%%%     the node's whole CPU is then a few hundred samples.
%%% main/2 starts one and writes the ready file; msacc/1 measures.
-module(kpt_states).
-export([main/2, msacc/1, socket_owners/0]).

-spec main(string(), erlang | gc | socket | trickle) -> no_return().
main(Ready, Load) ->
    start(Load),
    ok = file:write_file(Ready, "ready\n"),
    receive after infinity -> ok end.

start(erlang) ->
    [spawn(fun() -> spin(0) end) || _ <- [1, 2]];
start(gc) ->
    [spawn(fun() -> churn() end) || _ <- [1, 2]];
start(socket) ->
    {ok, Listen} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(Listen),
    [begin
         spawn(fun() ->
                       {ok, S} = gen_tcp:accept(Listen),
                       echo(S)
               end),
         spawn(fun() ->
                       {ok, C} = gen_tcp:connect({127, 0, 0, 1}, Port,
                                                 [binary, {active, false}, {nodelay, true}]),
                       ping(C)
               end)
     end || _ <- [1, 2, 3, 4]];
start(trickle) ->
    [spawn(fun() -> trickle() end) || _ <- lists:seq(1, 8)].

spin(N) -> spin((N * 7 + 3) rem 1000003).

churn() ->
    _ = lists:seq(1, 20000),
    churn().

echo(S) ->
    {ok, B} = gen_tcp:recv(S, 0),
    ok = gen_tcp:send(S, B),
    echo(S).

ping(C) ->
    ok = gen_tcp:send(C, <<0:1024>>),
    {ok, _} = gen_tcp:recv(C, 128),
    ping(C).

trickle() ->
    Peer = spawn(fun() -> peer() end),
    trickle(Peer).

trickle(Peer) ->
    receive after 1 -> ok end,
    Peer ! {self(), lists:sum(lists:seq(1, 50))},
    receive done -> ok end,
    trickle(Peer).

peer() ->
    receive {From, _} -> From ! done end,
    peer().

%% @doc The processes the node's TCP sockets are connected to, as
%% "<0.N.S>" texts joined by commas (no space: erl_call's answer is read
%% without them).
-spec socket_owners() -> string().
socket_owners() ->
    Owners = [pid_to_list(Owner) || P <- erlang:ports(),
                                    erlang:port_info(P, name) =:= {name, "tcp_inet"},
                                    {connected, Owner} <- [erlang:port_info(P, connected)]],
    lists:flatten(lists:join(",", Owners)).

%% @doc Microstate accounting over the next `Ms` milliseconds, as
%% "TYPE/STATE/MICROSECONDS;" items summed over the threads of each type
%% (no space: erl_call's answer is read without them).
%% msacc is switched off after, as it was (the test node has it off).
-spec msacc(pos_integer()) -> string().
msacc(Ms) ->
    msacc:start(Ms),
    Stats = msacc:stats(),
    Sums = lists:foldl(
             fun(#{type := Type, counters := Counters}, Acc) ->
                     maps:fold(fun(State, Us, A) ->
                                       K = {Type, State},
                                       A#{K => maps:get(K, A, 0) + Us}
                               end, Acc, Counters)
             end, #{}, Stats),
    lists:flatten([io_lib:format("~p/~p/~p;", [T, S, Us])
                   || {{T, S}, Us} <- lists:sort(maps:to_list(Sums))]).
