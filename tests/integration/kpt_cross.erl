%%% @doc Workload of the `cross_node' integration test: node B runs a
%%% registered gen_server (kpt_remote) that does `traced_work' for the call
%%% `traced'; node A makes a traced request that calls it with
%%% gen_server:call({kpt_remote, B}, traced), as a Kazoo crossbar request
%%% calls a server on another node of its cluster.
-module(kpt_cross).
-behaviour(gen_server).

-export([main_b/2, request/1, traced_work/0, listening/0]).
-export([init/1, handle_call/3, handle_cast/2]).

%% @doc On node B: connects to node A, starts the server, writes `Ready'.
-spec main_b(node(), string()) -> ok.
main_b(A, Ready) ->
    pong = net_adm:ping(A),
    {ok, _} = gen_server:start({local, kpt_remote}, ?MODULE, [], []),
    ok = file:write_file(Ready, "ready").

%% @doc On node A: one traced request that calls node `B''s server; its
%% trace id as text.
-spec request(node()) -> string().
request(B) ->
    Id = kprof:trace_request(fun() ->
                                     ok = gen_server:call({kpt_remote, B}, traced),
                                     kprof:trace_id()
                             end),
    case Id of
        undefined -> "none";
        _ -> binary_to_list(Id)
    end.

%% @doc The server's work for the request.
-spec traced_work() -> ok.
traced_work() -> spin(20000).

spin(0) -> ok;
spin(N) -> _ = erlang:phash2(N), spin(N - 1).

%% @doc On node B: "yes" once request tracing there listens for other
%% nodes' traces (its system seq tracer is kprof's NIF and the server's
%% callback has kprof's meta pattern), else "no".
-spec listening() -> string().
listening() ->
    S = kprof_tracing:session_of(kprof_rtrace),
    case {seq_trace:get_system_tracer(),
          kprof_tracing:info(S, {?MODULE, handle_call, 3}, meta_match_spec)} of
        {{kprof_tracer, _}, {meta_match_spec, [_ | _]}} -> "yes";
        _ -> "no"
    end.

-spec init([]) -> {ok, []}.
init([]) -> {ok, []}.

-spec handle_call(traced, gen_server:from(), []) -> {reply, ok, []}.
handle_call(traced, _From, S) -> {reply, traced_work(), S}.

-spec handle_cast(term(), []) -> {noreply, []}.
handle_cast(_, S) -> {noreply, S}.

