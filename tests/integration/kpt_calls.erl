%%% @doc Workload of the `trace_calls' integration test (`kprof trace --mfa'),
%%% with no kprof code in it: request/2 casts to a gen_server
%%% (kpt_calls_srv), which sends to a plain receive loop (kpt_calls_plain),
%%% which replies to the caller. Each of the three does work named by the
%%% request's kind (get_work, put_work, delete_work), so a trace shows
%%% which requests it holds. Every 200th request of run/1 is made slow on
%%% purpose (slow_work: 30 ms).
-module(kpt_calls).
-behaviour(gen_server).

-export([main/1, request/2, run/1, load_start/1, load_stop/0, servers/0, left/0, hold_server/1,
         get_work/0, put_work/0, delete_work/0, slow_work/0]).
-export([init/1, handle_call/3, handle_cast/2]).

%% @doc Starts the server and the plain loop, then writes `Ready'.
-spec main(string()) -> ok.
main(Ready) ->
    {ok, _} = gen_server:start({local, kpt_calls_srv}, ?MODULE, [], []),
    true = register(kpt_calls_plain, spawn(fun plain_loop/0)),
    ok = file:write_file(Ready, "ready").

%% @doc One request of kind `Kind'; the `Seq'th of its caller (every 200th
%% is slow).
-spec request(get | put | delete, non_neg_integer()) -> ok.
request(Kind, Seq) ->
    work(Kind),
    Seq rem 200 =:= 199 andalso slow_work(),
    gen_server:cast(kpt_calls_srv, {Kind, self()}),
    receive {kpt_calls, done} -> ok end.

%% @doc `N' requests, kinds in turn, from the calling process: "Slow"
%% (how many were made slow) when done.
-spec run(pos_integer()) -> string().
run(N) ->
    Kinds = {get, put, delete},
    [request(element(I rem 3 + 1, Kinds), I) || I <- lists:seq(0, N - 1)],
    integer_to_list(N div 200).

%% @doc `N' processes making requests of every kind in a loop until
%% load_stop/0 (none slow: their sequence stops short of 199).
-spec load_start(pos_integer()) -> ok.
load_start(N) ->
    Pids = [spawn(fun() -> load_loop(I) end) || I <- lists:seq(1, N)],
    persistent_term:put(kpt_calls_load, Pids).

load_loop(I) ->
    request(element(I rem 3 + 1, {get, put, delete}), I rem 100),
    timer:sleep(1),
    load_loop(I + 1).

-spec load_stop() -> ok.
load_stop() ->
    [exit(P, kill) || P <- persistent_term:get(kpt_calls_load, [])],
    _ = persistent_term:erase(kpt_calls_load),
    ok.

%% @doc A node too slow to answer, made on purpose: the next request-trace
%% server to start (none runs now) is suspended 20 ms after it registers,
%% for `Ms', then resumed; `ok', or `running' when one runs already.
-spec hold_server(pos_integer()) -> ok | running.
hold_server(Ms) ->
    case whereis(kprof_rtrace) of
        undefined -> _ = spawn(fun() -> hold(Ms, 100000) end), ok;
        _ -> running
    end.

hold(_, 0) ->
    ok;
hold(Ms, N) ->
    case whereis(kprof_rtrace) of
        undefined ->
            timer:sleep(1),
            hold(Ms, N - 1);
        P ->
            timer:sleep(20), % its start's reply goes first
            erlang:suspend_process(P),
            timer:sleep(Ms),
            catch erlang:resume_process(P) % killed meanwhile, by kprof_rtrace:stop/0
    end.

%% @doc "Srv,Plain": the two processes a request reaches, as text.
-spec servers() -> string().
servers() ->
    lists:flatten(io_lib:format("~p,~p", [whereis(kpt_calls_srv), whereis(kpt_calls_plain)])).

%% @doc "clean", or what kprof left in the node (this node has no kprof
%% code of its own to ask): processes with trace flags or a seq_trace
%% token, a send pattern, a system seq tracer, call patterns on this
%% module's or gen_server's functions, trace sessions (OTP 27 and later).
-spec left() -> string().
left() ->
    Flags = [P || P <- processes(), erlang:trace_info(P, flags) =/= {flags, []}],
    Tokens = [P || P <- processes(),
                   process_info(P, sequential_trace_token) =/= {sequential_trace_token, []}],
    Patterns = [{M, F, A} || M <- [?MODULE, gen_server], {F, A} <- M:module_info(functions),
                             I <- [traced, meta],
                             element(2, erlang:trace_info({M, F, A}, I)) =/= false],
    Sessions = case erlang:function_exported(trace, session_info, 1) of
                   true -> [S || S <- apply(trace, session_info, [all]),
                                 lists:member(kprof_rtrace, tuple_to_list({S}) ++
                                                  [element(1, S) || is_tuple(S)])];
                   false -> []
               end,
    case {Flags, Tokens, erlang:trace_info(send, match_spec), seq_trace:get_system_tracer(),
          Patterns, Sessions} of
        {[], [], {match_spec, true}, false, [], []} -> "clean";
        Other -> lists:flatten(io_lib:format("~p", [Other]))
    end.

work(get) -> get_work();
work(put) -> put_work();
work(delete) -> delete_work().

%% @doc The work of a request of one kind, wherever it runs.
-spec get_work() -> ok.
get_work() -> spin(200).
-spec put_work() -> ok.
put_work() -> spin(200).
-spec delete_work() -> ok.
delete_work() -> spin(200).

%% @doc What makes a request slow.
-spec slow_work() -> ok.
slow_work() -> timer:sleep(30).

spin(0) -> ok;
spin(N) -> _ = erlang:phash2(N), spin(N - 1).

plain_loop() ->
    receive
        {Kind, From} -> work(Kind), From ! {kpt_calls, done}
    end,
    plain_loop().

%%% gen_server: kpt_calls_srv

-spec init([]) -> {ok, []}.
init([]) -> {ok, []}.

-spec handle_call(term(), gen_server:from(), []) -> {reply, ok, []}.
handle_call(_, _From, S) -> {reply, ok, S}.

-spec handle_cast({atom(), pid()}, []) -> {noreply, []}.
handle_cast({Kind, From}, S) ->
    work(Kind),
    kpt_calls_plain ! {Kind, From},
    {noreply, S}.
