%%% @doc Workload of the `follow' integration test: a request handler that
%%% calls two gen_servers (a cache and a db) and a worker from a pool, as a
%%% Kazoo crossbar request calls its clients, then a plain receive loop (no
%%% OTP behaviour), then hands part of the request to a proc_lib worker it
%%% spawns, which calls a gen_server of its own (wdb). The servers do
%%% `traced_work' for requests made with the tag `traced' and
%%% `untraced_work' for the others, so a trace shows whose work it holds.
-module(kpt_follow).
-behaviour(gen_server).

-export([main/1, req/3, handle/1, load_start/1, load_stop/0, servers/0,
         traced_work/0, untraced_work/0, worker_work/0, concurrent/1, flags_left/0,
         traced_servers/0, slow_pair/0, otp_calls/1, otp_frames/1, armed/0]).
-export([init/1, handle_call/3, handle_cast/2]).

%% @doc Starts the servers and the pool, then writes `Ready'.
-spec main(string()) -> ok.
main(Ready) ->
    {ok, _} = gen_server:start({local, kpt_cache}, ?MODULE, server, []),
    {ok, _} = gen_server:start({local, kpt_db}, ?MODULE, server, []),
    {ok, _} = gen_server:start({local, kpt_wdb}, ?MODULE, server, []),
    true = register(kpt_plain, spawn(fun plain_loop/0)),
    Workers = [element(2, gen_server:start(?MODULE, server, [])) || _ <- lists:seq(1, 3)],
    {ok, _} = gen_server:start({local, kpt_pool}, ?MODULE, {pool, Workers}, []),
    ok = file:write_file(Ready, "ready").

%% @doc The ESI script: a traced-kind request.
-spec req(term(), list(), string()) -> ok | {error, term()}.
req(SessionID, _Env, _Input) ->
    ok = handle(traced),
    mod_esi:deliver(SessionID, "content-type: text/plain\r\n\r\nok\n").

%% @doc One request: the cache, the db, a pooled worker, the plain loop,
%% then a worker of its own.
-spec handle(traced | untraced) -> ok.
handle(Tag) ->
    ok = gen_server:call(kpt_cache, Tag),
    ok = gen_server:call(kpt_db, Tag),
    Worker = gen_server:call(kpt_pool, checkout),
    ok = gen_server:call(Worker, Tag),
    gen_server:cast(kpt_pool, {checkin, Worker}),
    kpt_plain ! {self(), Tag},
    receive {kpt_plain, done} -> ok end,
    Self = self(),
    Own = proc_lib:spawn_link(fun() ->
                                      worker_work(),
                                      ok = gen_server:call(kpt_wdb, Tag),
                                      Self ! {self(), done}
                              end),
    receive {Own, done} -> ok end.

%% @doc The work of the worker a request spawns.
-spec worker_work() -> ok.
worker_work() -> spin(300).

%% A process that is no OTP behaviour: a receive loop.
plain_loop() ->
    receive
        {From, traced} -> traced_work(), From ! {kpt_plain, done};
        {From, untraced} -> untraced_work(), From ! {kpt_plain, done}
    end,
    plain_loop().

%% @doc Work done for a traced request.
-spec traced_work() -> ok.
traced_work() -> spin(300).

%% @doc Work done for an untraced one.
-spec untraced_work() -> ok.
untraced_work() -> spin(300).

spin(0) -> ok;
spin(N) -> _ = erlang:phash2(N), spin(N - 1).

%% @doc `N' processes making untraced requests in a loop until load_stop/0.
-spec load_start(pos_integer()) -> ok.
load_start(N) ->
    Pids = [spawn(fun Loop() -> ok = handle(untraced), Loop() end) || _ <- lists:seq(1, N)],
    persistent_term:put(kpt_follow_load, Pids).

-spec load_stop() -> ok.
load_stop() ->
    [exit(P, kill) || P <- persistent_term:get(kpt_follow_load, [])],
    _ = persistent_term:erase(kpt_follow_load),
    ok.

%% @doc "Cache,Db,Worker1+Worker2+Worker3,Plain,Wdb": the servers' pids, as
%% text (erl_call loses spaces).
-spec servers() -> string().
servers() ->
    {ok, Workers} = gen_server:call(kpt_pool, workers),
    lists:flatten(io_lib:format("~p,~p,~s,~p,~p",
                                [whereis(kpt_cache), whereis(kpt_db),
                                 lists:join("+", [pid_to_list(W) || W <- Workers]),
                                 whereis(kpt_plain), whereis(kpt_wdb)])).

%% @doc `N' traced requests at once, each in its own process; their ids.
-spec concurrent(pos_integer()) -> string().
concurrent(N) ->
    Self = self(),
    Ps = [spawn(fun() ->
                        Id = kprof:trace_request(fun() -> ok = handle(traced), kprof:trace_id() end),
                        Self ! {self(), Id}
                end) || _ <- lists:seq(1, N)],
    Ids = [receive {P, Id} -> Id after 30000 -> timeout end || P <- Ps],
    lists:flatten(lists:join(",", [binary_to_list(I) || I <- Ids, is_binary(I)])).

%% @doc Two traced requests that keep their trace only past 20 ms: a fast
%% one, then one made slow; "FastId,SlowId".
-spec slow_pair() -> string().
slow_pair() ->
    Id = fun() -> binary_to_list(kprof:trace_id()) end,
    Fast = kprof:trace_request(#{slower_than_ms => 20}, fun() -> ok = handle(traced), Id() end),
    Slow = kprof:trace_request(#{slower_than_ms => 20},
                               fun() -> ok = handle(traced), timer:sleep(30), Id() end),
    Fast ++ "," ++ Slow.

%% @doc "clean", or the processes that still carry trace flags or a
%% seq_trace token, whether the send pattern is still set, kprof's session
%% still open (OTP 27 and later) and the system seq tracer still set.
-spec flags_left() -> string().
flags_left() ->
    S = kprof_tracing:session_of(kprof_rtrace),
    Traced = [P || P <- processes(), {flags, F} <- [kprof_tracing:info(S, P, flags)], F =/= []],
    Tokens = [{P, T} || P <- processes(),
                        {sequential_trace_token, T} <- [process_info(P, sequential_trace_token)],
                        T =/= []],
    case {Traced, Tokens, kprof_tracing:info(S, send, match_spec), kprof_tracing:sessions(),
          seq_trace:get_system_tracer()} of
        {[], [], {match_spec, true}, [], false} -> "clean";
        Other -> lists:flatten(io_lib:format("~p", [Other]))
    end.

%% @doc How many of the servers (cache, db, pool, workers, the plain loop,
%% wdb) carry trace flags.
-spec traced_servers() -> non_neg_integer().
traced_servers() ->
    {ok, Workers} = gen_server:call(kpt_pool, workers),
    Servers = [whereis(kpt_cache), whereis(kpt_db), whereis(kpt_pool), whereis(kpt_plain),
               whereis(kpt_wdb) | Workers],
    S = kprof_tracing:session_of(kprof_rtrace),
    length([P || P <- Servers, kprof_tracing:info(S, P, flags) =/= {flags, []}]).

%%% gen_server: the cache, the db and the workers (`server'), and the pool

-spec init(server | {pool, [pid()]}) -> {ok, term()}.
init(server) -> {ok, server};
init({pool, Workers}) -> {ok, {Workers, Workers}}.

-spec handle_call(term(), gen_server:from(), term()) -> {reply, term(), term()}.
handle_call(traced, _From, server) -> {reply, traced_work(), server};
handle_call(untraced, _From, server) -> {reply, untraced_work(), server};
handle_call(workers, _From, S = {All, _}) -> {reply, {ok, All}, S};
handle_call(checkout, From, {All, []}) ->
    %% all busy: wait a little, as a pool with a queue would
    timer:sleep(1),
    handle_call(checkout, From, {All, All});
handle_call(checkout, _From, {All, [W | Free]}) -> {reply, W, {All, Free}}.

-spec handle_cast(term(), term()) -> {noreply, term()}.
handle_cast({checkin, W}, {All, Free}) -> {noreply, {All, [W | lists:delete(W, Free)]}}.

%% @doc Sets the request-trace setting `otp_calls' (read when the patterns
%% are armed next), or with `default' removes it.
-spec otp_calls(boolean() | default) -> ok.
otp_calls(default) ->
    {ok, Env} = application:get_env(kprof, rtrace),
    application:set_env(kprof, rtrace, maps:remove(otp_calls, Env));
otp_calls(On) ->
    {ok, Env} = application:get_env(kprof, rtrace),
    application:set_env(kprof, rtrace, Env#{otp_calls => On}).

%% @doc Whether the request-trace patterns are armed (they linger after a
%% trace): handle/1 has one then, in kprof's own session from OTP 27, the
%% shared one before.
-spec armed() -> boolean().
armed() ->
    Session = kprof_tracing:session_of(kprof_rtrace),
    kprof_tracing:info(Session, {?MODULE, handle, 1}, traced) =/= {traced, false}.

%% @doc "N,M": of the distinct modules of the called frames of a folded
%% file (neither the roots, pids, nor the frames right above them, where a
%% process's stack restarts when it returns below where its trace began),
%% how many are loaded from OTP's own lib directory (code:lib_dir/0), and
%% how many in all.
-spec otp_frames(string()) -> string().
otp_frames(Folded) ->
    {ok, Text} = file:read_file(Folded),
    Mods = lists:usort(
             [binary_to_atom(hd(binary:split(Frame, <<":">>)))
              || Line <- binary:split(Text, <<"\n">>, [global, trim_all]),
                 [Stack | _] <- [binary:split(Line, <<" ">>)],
                 [_Root, _First | Called] <- [binary:split(Stack, <<";">>, [global])],
                 Frame <- Called,
                 binary:match(Frame, <<":">>) =/= nomatch]),
    Lib = code:lib_dir(),
    Otp = [M || M <- Mods, lists:prefix(Lib, path(code:which(M)))],
    lists:flatten(io_lib:format("~b,~b", [length(Otp), length(Mods)])).

path(Path) when is_list(Path) -> Path;
path(preloaded) -> code:lib_dir(); % erts's
path(_) -> "".
