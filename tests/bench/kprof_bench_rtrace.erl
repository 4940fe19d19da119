%%% @doc The node side of tests/bench/rtrace_overhead: a tight loop of local
%%% calls timed untraced and inside kprof:trace_request/1, the key-value
%%% sample app's request latency untraced and traced, and the node's memory
%%% during a long trace.
-module(kprof_bench_rtrace).

-include_lib("inets/include/httpd.hrl").

-export([main/1, disarmed/0, loop_cost/1, latency/1, node_cpu/1, memory_growth/1, f/1,
         tracer/0]).
-export([http_start/0, esi/3, do/1, null_http_open/0, null_http_close/0]).

%% The null HTTP case's session, set, and flags (null_http_open/0).
-define(NULL_HTTP, {?MODULE, null_http}).

%% @doc Starts the key-value app, then writes `Ready'.
-spec main(string()) -> ok.
main(Ready) ->
    {ok, _} = kprof_kv:start(#{max_lifetime_ms => 1800000}),
    ok = file:write_file(Ready, "ready").

-spec f(integer()) -> integer().
f(X) -> X + 1.

loop(0) -> ok;
loop(N) -> f(N), loop(N - 1).

time_ns(Fun) ->
    T0 = erlang:monotonic_time(nanosecond),
    Fun(),
    erlang:monotonic_time(nanosecond) - T0.

%% @doc "untraced_ns_per_call,traced_ns_per_call,calls,events": `N'
%% iterations of a loop that makes 2 calls each (f/1, then itself) and emits
%% 3 events (call, return_to, call). Call disarmed/0 first.
-spec loop_cost(pos_integer()) -> string().
loop_cost(N) ->
    Untraced = lists:min([time_ns(fun() -> loop(N) end) || _ <- lists:seq(1, 3)]),
    Traced = kprof:trace_request(#{max_events => 4 * N, max_duration_ms => 600000},
                                 fun() -> time_ns(fun() -> loop(N) end) end),
    Calls = 2 * N,
    lists:flatten(io_lib:format("~.3f,~.3f,~p,~p", [Untraced / Calls, Traced / Calls, Calls, 3 * N])).

%% @doc Which tracer a request trace gets now: "nif" (kprof_tracer) or "port".
-spec tracer() -> string().
tracer() ->
    %% kprof's own session from OTP 27, the shared one before
    case kprof:trace_request(fun() ->
                                     kprof_tracing:info(kprof_tracing:session_of(kprof_rtrace),
                                                        self(), tracer)
                             end) of
        {tracer, {kprof_tracer, _}} -> "nif";
        _ -> "port"
    end.

%% @doc "untraced_us,cold_us,warm_us,untraced_armed_us,loop_ns,loop_armed_ns,
%% alone_us,empty_us,null_us": medians of `N' key-value requests each:
%% traced with `linger_ms' 0 (each trace arms and disarms every loaded
%% function, as before patterns lingered); then, in turns, untraced, traced
%% with the default linger (the patterns stay armed between traces), traced
%% alone (its messages not followed), a traced request that does nothing,
%% and the request with a trace's flags but its events given to a tracer
%% that does nothing (null_tracer/1); untraced a while after the traces,
%% the patterns lingering. Then a tight loop's ns per untraced call,
%% without and with the patterns armed.
-spec latency(pos_integer()) -> string().
latency(N) ->
    Req = fun() -> kprof_kv:request(<<"GET k1">>) end,
    Traced = fun() -> kprof:trace_request(Req) end,
    ok = wait_disarmed(30000),
    timer:sleep(200), % the other modules' patterns go too
    Loop = loop_ns(),
    Env = application:get_env(kprof, rtrace, #{}),
    ok = application:set_env(kprof, rtrace, Env#{linger_ms => 0}),
    %% each after the last one's patterns went: back to back, a begin
    %% without the call (OTP 25.3 and later) comes before the server has
    %% seen the last end, and keeps them
    Cold = median([begin ok = wait_disarmed(5000), element(1, timer:tc(Traced)) end
                   || _ <- lists:seq(1, N)]),
    ok = application:set_env(kprof, rtrace, Env),
    %% the untraced request and the warm variants in turns, a block of each
    %% per round, so that the machine's drift (two shared cores) falls on
    %% all of them alike; a pause before each block lets the servers
    %% following reached lose their flags
    Alone = fun() -> kprof:trace_request(#{max_processes => 0}, Req) end,
    Empty = fun() -> kprof:trace_request(fun() -> ok end) end,
    Rounds = 10,
    Block = max(1, N div Rounds),
    Samples = lists:append(
                [block(V, F, Block) || _ <- lists:seq(1, Rounds),
                                       {V, F} <- [{untraced, Req}, {warm, Traced},
                                                  {alone, Alone}, {empty, Empty},
                                                  {null, null}]]),
    Of = fun(V) -> median([T || {V1, T} <- Samples, V1 =:= V]) end,
    {U, Warm, AloneUs, EmptyUs} = {Of(untraced), Of(warm), Of(alone), Of(empty)},
    timer:sleep(200), % the servers lose the flags following gave them
    UArmed = median([element(1, timer:tc(Req)) || _ <- lists:seq(1, N)]),
    LoopArmed = loop_ns(),
    lists:flatten(io_lib:format("~p,~p,~p,~p,~.2f,~.2f,~p,~p,~p",
                                [U, Cold, Warm, UArmed, Loop, LoopArmed, AloneUs, EmptyUs,
                                 Of(null)])).

%% A block of `Block' timed runs of `F' after 20 ms: [{Kind, Us}]. The
%% null kind's session is open only for its block: from OTP 27 it sets
%% patterns of its own, and every breakpoint would otherwise have two
%% sessions to look at in the other kinds' blocks too (8 us more for a
%% request traced alone on OTP 27, 2 us more untraced).
block(null, null, Block) ->
    {Session, Null} = null_tracer(fun() -> kprof_kv:request(<<"GET k1">>) end),
    Samples = block(null, Null, Block),
    _ = kprof_tracing:close(Session),
    Samples;
block(Kind, F, Block) ->
    timer:sleep(20),
    [{Kind, element(1, timer:tc(F))} || _ <- lists:seq(1, Block)].

%% The VM's own share of a request traced alone: `Req' with what a trace of
%% its process alone sets (kprof_rtrace_flags's flags, kprof_rtrace_patterns'
%% patterns), in a session whose events go to a tracer NIF that does nothing
%% (kprof_bench_null), the flags set before and cleared after, as a trace's
%% begin and end do. No tracer that looks at its events costs less. Before
%% OTP 27 the patterns are the node's: kprof's, lingering between the
%% traces in turn with it, serve; from 27 the session sets its own (its
%% breakpoints then have kprof's lingering session to look at too, which
%% puts this floor a little high). Returns the session, for
%% kprof_tracing:close/1, and the fun.
null_tracer(Req) ->
    {module, _} = code:ensure_loaded(kprof_bench_null),
    Session = kprof_tracing:open(kprof_rtrace, {kprof_bench_null, []}),
    _ = kprof_tracing:shared(Session) orelse null_patterns(Session),
    Flags = kprof_rtrace_flags:flags(),
    {Session, fun() ->
                      _ = kprof_tracing:process(Session, self(), true, Flags),
                      _ = Req(),
                      kprof_tracing:process(Session, self(), false, Flags)
              end}.

%% What kprof arms for a request's own trace with the settings of now
%% (`otp_calls' false unless set), in `Session'; the set, for unset/2.
null_patterns(Session) ->
    Set = kprof_rtrace_patterns:choose(Session, maps:get(otp_calls, kprof_settings:rtrace(), false)),
    ok = kprof_rtrace_patterns:set(Session, Set),
    ok = kprof_rtrace_patterns:bifs_off(Session, Set, kprof_rtrace_patterns:builtins()),
    Set.

%% @doc Opens the null HTTP case: a request with the header `x-null-trace'
%% runs with a trace's flags in a session whose events go to the tracer
%% that does nothing, and the patterns kprof arms for a header's trace
%% (null_patterns/1), set here whatever the release (no kprof trace runs
%% meanwhile: kprof's patterns must have gone, see disarmed/0). The VM's
%% own share of a request traced alone through inets. "ok".
-spec null_http_open() -> string().
null_http_open() ->
    ok = wait_disarmed(30000),
    {module, _} = code:ensure_loaded(kprof_bench_null),
    Session = kprof_tracing:open(kprof_rtrace, {kprof_bench_null, []}),
    Set = null_patterns(Session),
    persistent_term:put(?NULL_HTTP, {Session, Set, kprof_rtrace_flags:flags()}),
    "ok".

%% @doc Closes what null_http_open/0 opened. "ok".
-spec null_http_close() -> string().
null_http_close() ->
    {Session, Set, _} = persistent_term:get(?NULL_HTTP),
    ok = kprof_rtrace_patterns:unset(Session, Set),
    _ = kprof_tracing:close(Session),
    _ = persistent_term:erase(?NULL_HTTP),
    "ok".

%% @doc The inets module just before kprof_httpd in the bench server's
%% list: a request with the header `x-null-trace' runs kprof_httpd's do/1
%% (which runs the modules after it, as for every request) with the null
%% case's flags on its process, set before and cleared after as a trace's
%% begin and end do; its spawns inherit them. Others go on to kprof_httpd.
-spec do(#mod{}) -> {proceed, list()} | {break, list()} | done.
do(ModData = #mod{parsed_header = Headers}) ->
    case lists:keymember("x-null-trace", 1, Headers) of
        false ->
            {proceed, ModData#mod.data};
        true ->
            {Session, _, Flags} = persistent_term:get(?NULL_HTTP),
            _ = kprof_tracing:process(Session, self(), true, Flags),
            try kprof_httpd:do(ModData)
            after kprof_tracing:process(Session, self(), false, Flags)
            end
    end.

%% @doc Waits until no request-trace pattern is armed (they linger after a
%% trace): then untraced code is untraced. "ok" or "timeout".
-spec disarmed() -> string().
disarmed() ->
    Result = wait_disarmed(30000),
    timer:sleep(200), % the other modules' patterns go too
    atom_to_list(Result).

%% ns per call of loop/1 (the fastest of 3 runs).
loop_ns() ->
    N = 200000,
    lists:min([time_ns(fun() -> loop(N) end) || _ <- lists:seq(1, 3)]) / (2 * N).

%% Until no request-trace pattern is armed (f/1 is armed with every loaded
%% function).
wait_disarmed(Ms) when Ms =< 0 ->
    timeout;
wait_disarmed(Ms) ->
    %% in kprof's own session from OTP 27, the shared one before
    Session = kprof_tracing:session_of(kprof_rtrace),
    case kprof_tracing:info(Session, {?MODULE, f, 1}, traced) of
        {traced, false} -> ok;
        _ -> timer:sleep(5), wait_disarmed(Ms - 5)
    end.

%% @doc "traced_us,untraced_us,server_reductions,traced_logged_us": the
%% node's CPU time (its threads' schedstat) per request that does nothing,
%% traced (the begin and end in its process, the NIF's marks, the
%% request-trace server's work for it, done in the pause after its block)
%% and untraced, and the server's reductions per trace; then traced again
%% with the node's logger at level notice, its default, as the collector
%% names each trace's files (the server logs the first as a notice, the
%% rest at info), where the first rounds hold back all but warnings.
%% `Rounds' rounds of a block of 200 of each kind, each block followed by
%% 20 ms, in which the server and the collector finish; the pauses' own
%% cost falls on all kinds (kprof_bench_session:node_cpu_ns/0).
-spec node_cpu(pos_integer()) -> string().
node_cpu(Rounds) ->
    Traced = fun() -> kprof:trace_request(fun() -> ok end) end,
    #{level := Level} = logger:get_primary_config(),
    ok = logger:set_primary_config(level, warning),
    Quiet = node_cpu([{traced, Traced}, {untraced, fun() -> ok end}], Rounds),
    ok = logger:set_primary_config(level, notice),
    Logged = node_cpu([{traced, Traced}], Rounds),
    ok = logger:set_primary_config(level, Level),
    Of = fun(Samples, K, I) -> median([element(I, S) || S <- Samples, element(1, S) =:= K]) end,
    lists:flatten(io_lib:format("~.1f,~.1f,~p,~.1f",
                                [Of(Quiet, traced, 2) / 1000, Of(Quiet, untraced, 2) / 1000,
                                 round(Of(Quiet, traced, 3)), Of(Logged, traced, 2) / 1000])).

node_cpu(Kinds, Rounds) ->
    Block = 200,
    _ = [F() || {_, F} <- Kinds, _ <- lists:seq(1, Block)],
    timer:sleep(100),
    Server = whereis(kprof_rtrace),
    Reds = fun() -> {reductions, R} = process_info(Server, reductions), R end,
    [begin
         C0 = kprof_bench_session:node_cpu_ns(),
         R0 = Reds(),
         _ = [F() || _ <- lists:seq(1, Block)],
         timer:sleep(20),
         {Kind, (kprof_bench_session:node_cpu_ns() - C0) / Block, (Reds() - R0) / Block}
     end || _ <- lists:seq(1, Rounds), {Kind, F} <- Kinds].

%% @doc "before_kb,during_max_kb,after_kb": the node's total memory around
%% a traced loop of `N' iterations (sampled every 50 ms during it).
-spec memory_growth(pos_integer()) -> string().
memory_growth(N) ->
    erlang:garbage_collect(),
    Before = erlang:memory(total),
    Self = self(),
    Sampler = spawn(fun() -> sample(Self, 0) end),
    kprof:trace_request(#{max_events => 4 * N, max_duration_ms => 600000},
                        fun() -> loop(N) end),
    Sampler ! stop,
    Max = receive {max, M} -> M end,
    timer:sleep(200),
    lists:flatten(io_lib:format("~p,~p,~p", [Before div 1024, Max div 1024, erlang:memory(total) div 1024])).

sample(Parent, Max) ->
    receive stop -> Parent ! {max, Max}
    after 50 -> sample(Parent, max(Max, erlang:memory(total)))
    end.

%% @doc inets httpd on loopback, kprof_httpd first in its modules (as a
%% user's release has it), `/b/kprof_bench_rtrace:esi' its ESI function;
%% its port, as text.
-spec http_start() -> string().
http_start() ->
    ok = application:ensure_started(inets),
    Root = filename:basedir(user_cache, "kprof_bench_httpd"),
    ok = filelib:ensure_dir(filename:join(Root, "x")),
    {ok, Pid} = inets:start(httpd, [{port, 0}, {bind_address, {127, 0, 0, 1}},
                                    {server_name, "kprof_bench"}, {server_root, Root},
                                    {document_root, Root},
                                    {modules, [?MODULE, kprof_httpd, mod_alias, mod_esi,
                                               mod_get]},
                                    {customize, kprof_httpd},
                                    {erl_script_alias, {"/b", [?MODULE]}}]),
    integer_to_list(proplists:get_value(port, httpd:info(Pid))).

%% @doc The ESI function: a sub-millisecond answer (a key-value GET).
-spec esi(term(), list(), string()) -> ok | {error, term()}.
esi(SessionID, _Env, _Input) ->
    <<_/binary>> = kprof_kv:request(<<"GET k1">>),
    mod_esi:deliver(SessionID, "content-type: text/plain\r\n\r\nok\n").

median(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)).
