%%% @doc The node side of kprof's tier-tracing integration test
%%% (tests/integration/tiers): the key-value sample app under a long-lived
%%% owner, request scenarios with known shapes, and the checks a test asks
%%% through erl_call.
%%%
%%% Scenarios (each request made with kprof:do_apply/3, identity = the
%%% function's name through identity/1):
%%% <ul>
%%% <li>`triple': calls tier `step' three times, 3 ms each;</li>
%%% <li>`recurse': tier `rec' calling itself 3 levels deep, 5 ms at the bottom;</li>
%%% <li>`spawner': spawns a process that runs tier `remote' (4 ms) and
%%%   waits for its answer;</li>
%%% <li>`marked': kprof:set_token/1 ... kprof:clear_token/0 around one `step'.</li>
%%% </ul>
-module(kpt_tiers).

-export([main/1, load/4, start_load/3, scenarios/1, identity/1, step/0, rec/1, remote_step/0,
         triple/0, recurse/0, spawner/0, reload/1, clean/0, in_node/2,
         http_start/0, http_start/2, kv/3, rtrace_setup/4, fast/0, fast_traces/1, patterns_left/0,
         stop_rtrace/0, collector_signal/1, backlog_trace/1, tracer_kind/0, stats_requests/0,
         hold_user_token/0, user_token/1, stop_holder/1, late_module_trace/0, late_module_next/0, hashes/0,
         bif_trace/1, outlived_traces/0, bad_options_during_trace/0]).

%% @doc Starts the key-value app, then writes `Ready'.
-spec main(string()) -> ok.
main(Ready) ->
    {ok, _} = kprof_kv:start(#{max_lifetime_ms => 600000}),
    ok = file:write_file(Ready, "ready").

%% @doc Runs the key-value load generator; returns "sent,read,update,create,
%% delete,errors,elapsed_ms" as text for the shell (erl_call output loses spaces).
%% erl_call cannot pass maps, hence the separate arguments.
-spec load(non_neg_integer(), pos_integer(), pos_integer(), none | do_apply) -> string().
load(Rate, Concurrency, DurationMs, Wrap) ->
    #{sent := Sent, errors := Errors, by_identity := By, elapsed_ms := Ms} =
        kprof_kv_load:run(#{rate => Rate, concurrency => Concurrency,
                            duration_ms => DurationMs, wrap => Wrap}),
    lists:flatten(io_lib:format("~p,~p,~p,~p,~p,~p,~p",
                                [Sent, maps:get(read, By), maps:get(update, By),
                                 maps:get(create, By), maps:get(delete, By), Errors, Ms])).

%% @doc Starts the load generator in the background.
-spec start_load(non_neg_integer(), pos_integer(), pos_integer()) -> ok.
start_load(Rate, Concurrency, DurationMs) ->
    _ = kprof_kv_load:start(#{rate => Rate, concurrency => Concurrency,
                              duration_ms => DurationMs}),
    ok.

%% @doc Runs `N' requests of each scenario, one after the other.
-spec scenarios(pos_integer()) -> ok.
scenarios(N) ->
    [begin
         kprof:do_apply(?MODULE, triple, []),
         kprof:do_apply(?MODULE, recurse, []),
         kprof:do_apply(?MODULE, spawner, []),
         kprof:set_token(marked),
         step(),
         kprof:clear_token()
     end || _ <- lists:seq(1, N)],
    ok.

%% @doc identity_f: the scenario's name.
-spec identity({module(), atom(), list()}) -> atom().
identity({_, F, _}) -> F.

-spec triple() -> ok.
triple() -> step(), step(), step(), ok.

-spec recurse() -> ok.
recurse() -> rec(3), ok.

-spec spawner() -> ok.
spawner() ->
    Self = self(),
    spawn(fun() -> remote_step(), Self ! done end),
    receive done -> ok after 5000 -> timeout end.

-spec step() -> ok.
step() -> timer:sleep(3).

-spec rec(non_neg_integer()) -> ok.
rec(0) -> timer:sleep(5);
rec(N) -> ok = rec(N - 1), ok.

-spec remote_step() -> ok.
remote_step() -> timer:sleep(4).

%% @doc Loads a fresh copy of module `M' (a code reload, as in a release
%% upgrade), which drops the trace patterns of its old code.
-spec reload(module()) -> ok | {error, term()}.
reload(M) ->
    code:soft_purge(M),
    case code:load_file(M) of
        {module, M} -> ok;
        Error -> Error
    end.

%% @doc Tier tracing started inside the node with kprof:start_trace/1 (the
%% kprof program at `Exe' does the work), with an identity_f fun, the stats
%% dumper writing `StatsFile' and print_calls; returns
%% "sent,reads,updates,table,bad_options" for the shell.
-spec in_node(string(), string()) -> string().
in_node(Exe, StatsFile) ->
    ok = application:set_env(kprof, executable, Exe),
    ok = kprof:start(),
    Bad = kprof:start_trace([{tier_config, [{db, {kprof_kv_db, query, 7}}]}]),
    ok = kprof:start_trace([{tier_config, [{handle, {kprof_kv_handler, handle, 1}},
                                           {db, {kprof_kv_db, query, 1}}]},
                            {identity_f, fun kprof_kv:identity/1},
                            {stats_dumper, {file, StatsFile}},
                            {report_interval, 300},
                            {print_calls, true}]),
    #{sent := Sent, by_identity := By} =
        kprof_kv_load:run(#{rate => 100, concurrency => 2, duration_ms => 1000,
                            wrap => do_apply}),
    timer:sleep(1000),
    Table = case kprof:stats() of
                #{table := T} when byte_size(T) > 0 -> has_table;
                Other -> Other
            end,
    ok = kprof:stop_trace(),
    lists:flatten(io_lib:format("~p,~p,~p,~p,~p",
                                [Sent, maps:get(read, By), maps:get(update, By), Table,
                                 element(1, Bad)])).

%% @doc Starts inets httpd on loopback, port chosen by the system, with
%% kprof_httpd first in its modules and kv/3 as an ESI script under
%% /kv/kpt_tiers:kv; returns the port.
-spec http_start() -> inet:port_number().
http_start() ->
    http_start("/kv", ?MODULE).

%% @doc inets httpd on loopback with kprof_httpd first, and `Alias' mapped
%% to the ESI functions of `Module'; its port.
-spec http_start(string(), module()) -> inet:port_number().
http_start(Alias, Module) ->
    ok = application:ensure_started(inets),
    Root = filename:basedir(user_cache, "kpt_httpd_" ++ atom_to_list(Module)),
    ok = filelib:ensure_dir(filename:join(Root, "x")),
    {ok, Pid} = inets:start(httpd, [{port, 0}, {bind_address, {127, 0, 0, 1}},
                                    {server_name, "kpt"}, {server_root, Root},
                                    {document_root, Root},
                                    {modules, [kprof_httpd, mod_alias, mod_esi, mod_get]},
                                    {customize, kprof_httpd},
                                    {erl_script_alias, {Alias, [Module]}}]),
    proplists:get_value(port, httpd:info(Pid)).

%% @doc The ESI script: one `step' tier call, then the answer.
-spec kv(term(), list(), string()) -> ok | {error, term()}.
kv(SessionID, _Env, _Input) ->
    step(),
    mod_esi:deliver(SessionID, "content-type: text/plain\r\n\r\nok\n").

%% @doc Request-trace settings: the kprof program, where traces go, whether
%% HTTP requests may ask for one, and how many a second.
-spec rtrace_setup(string(), string(), boolean(), number()) -> ok.
rtrace_setup(Exe, Dir, Allow, Rate) ->
    ok = application:set_env(kprof, executable, Exe),
    ok = application:set_env(kprof, rtrace, #{dir => Dir, allow => Allow,
                                                     rate_limit => Rate,
                                                     max_concurrent => 64,
                                                     linger_ms => 1000}).

%% @doc A sub-millisecond request: a few calls, no waiting.
-spec fast() -> integer().
fast() -> lists:sum(lists:seq(1, 20)).

%% @doc `N' traced fast requests in a row; their trace ids, comma-separated.
-spec fast_traces(pos_integer()) -> string().
fast_traces(N) ->
    Ids = [kprof:trace_request(fun() -> fast(), kprof:trace_id() end) || _ <- lists:seq(1, N)],
    lists:flatten(lists:join(",", [binary_to_list(I) || I <- Ids, is_binary(I)])).

%% @doc Two traces whose messages are not followed (from OTP 25.3 they
%% begin with no message to kprof's server) and that outlive their bound,
%% `max_duration_ms' 300: one in a process that exits inside it, one in
%% this process, which ends it 1 s after its begin. "Id1,Id2,Flagged":
%% Flagged, whether this process was still call-traced 600 ms in (a
%% process cleared by another keeps monotonic_timestamp alone, see
%% kprof_rtrace_flags).
-spec outlived_traces() -> string().
outlived_traces() ->
    Opts = #{max_processes => 0, max_duration_ms => 300},
    Self = self(),
    {Pid, Ref} = spawn_monitor(fun() ->
                                       {ok, Id} = kprof:trace_begin(Opts),
                                       fast(),
                                       Self ! {id, self(), Id}
                               end),
    Id1 = receive {id, Pid, I} -> I end,
    receive {'DOWN', Ref, process, Pid, _} -> ok end,
    {ok, Id2} = kprof:trace_begin(Opts),
    fast(),
    timer:sleep(600),
    {flags, Flags} = kprof_tracing:info(kprof_tracing:session_of(kprof_rtrace), self(), flags),
    ok = kprof:trace_end(),
    lists:flatten(io_lib:format("~s,~s,~p", [Id1, Id2, lists:member(call, Flags)])).

%% @doc Calls to a BIF (erlang:phash2/1), from hashes/2.
-spec hashes() -> integer().
hashes() -> hashes(100, 0).

hashes(0, Acc) -> Acc;
hashes(N, Acc) -> hashes(N - 1, Acc bxor erlang:phash2(N)).

%% @doc A traced call of hashes/0, with the setting `bifs' as given (it
%% applies when the patterns are armed: none may linger); its trace id.
-spec bif_trace(boolean()) -> string().
bif_trace(Bifs) ->
    Env = application:get_env(kprof, rtrace, #{}),
    ok = application:set_env(kprof, rtrace, Env#{bifs => Bifs}),
    binary_to_list(kprof:trace_request(fun() -> _ = hashes(), kprof:trace_id() end)).

%% @doc A tight loop of `N' calls traced with an 8 MB backlog guard: the
%% node emits faster than the events leave. Returns "TraceId,GrowthMB": how
%% much the node's memory grew at most meanwhile.
-spec backlog_trace(pos_integer()) -> string().
backlog_trace(N) ->
    Env = application:get_env(kprof, rtrace, #{}),
    ok = application:set_env(kprof, rtrace, Env#{max_backlog_mb => 8}),
    erlang:garbage_collect(),
    Before = erlang:memory(total),
    Self = self(),
    Watcher = spawn(fun() -> watch_memory(Self, 0) end),
    %% the most max_events takes: the backlog guard, not it, cuts
    Id = kprof:trace_request(#{max_events => 100000000},
                             fun() -> spin(N), kprof:trace_id() end),
    Watcher ! stop,
    Max = receive {max, M} -> M end,
    ok = application:set_env(kprof, rtrace, Env),
    lists:flatten(io_lib:format("~s,~p", [Id, max(0, Max - Before) div 1048576])).

watch_memory(Parent, Max) ->
    receive stop -> Parent ! {max, Max}
    after 20 -> watch_memory(Parent, max(Max, erlang:memory(total)))
    end.

spin(0) -> ok;
spin(N) -> fast(), spin(N - 1).

%% @doc What a request trace's events go through now, "nif" (the
%% kprof_tracer NIF) or "port" (runtime_tools' ip trace port), and the id
%% of the trace that found out ("none" if it was not traced): "nif,Id".
-spec tracer_kind() -> string().
tracer_kind() ->
    {Tracer, Id} = kprof:trace_request(
                     fun() ->
                             {kprof_tracing:info(kprof_tracing:session_of(kprof_rtrace), self(),
                                                 tracer),
                              kprof:trace_id()}
                     end),
    Kind = case Tracer of
               {tracer, {kprof_tracer, _}} -> "nif";
               _ -> "port"
           end,
    Kind ++ "," ++ case Id of
                       undefined -> "none";
                       _ -> binary_to_list(Id)
                   end.

%% @doc Stops request tracing in the node (its collector program too).
-spec stop_rtrace() -> ok.
stop_rtrace() -> kprof_rtrace:stop().

%% @doc Sends signal `Sig' ("STOP", "CONT") to the request-trace collector
%% this node started (found by its executable), from inside the node: in a
%% container, only its own pid namespace knows the collector's OS pid.
-spec collector_signal(string()) -> ok | none.
collector_signal(Sig) ->
    {ok, Exe} = application:get_env(kprof, executable),
    case [P || P <- erlang:ports(), erlang:port_info(P, name) =:= {name, Exe}] of
        [Port | _] ->
            {os_pid, OsPid} = erlang:port_info(Port, os_pid),
            _ = os:cmd("kill -" ++ Sig ++ " " ++ integer_to_list(OsPid)),
            ok;
        [] ->
            none
    end.

%% @doc How many functions of a few modules still carry a trace pattern.
-spec patterns_left() -> non_neg_integer().
patterns_left() ->
    S = kprof_tracing:session_of(kprof_rtrace),
    Late = [M || M <- [kpt_late, kpt_late2], erlang:module_loaded(M)],
    OnLoad = [x || element(2, kprof_tracing:info(S, on_load, traced)) =/= false],
    length(OnLoad) +
        length([MFA || M <- [lists, ?MODULE, kprof_kv, gen_server | Late],
                       {F, A} <- M:module_info(functions),
                       MFA <- [{M, F, A}],
                       element(2, kprof_tracing:info(S, MFA, traced)) =/= false]).

%% @doc A traced request that loads a module it then calls (kpt_late, made
%% here and loaded fresh each time): returns "Id,Left", the trace's id and
%% how many functions still carried patterns right after it. Counted here,
%% not by a later erl_call, which can take longer than linger_ms to start.
%% With `otp_calls => true', armed by this trace once the last patterns
%% went: only then does a module loaded while they are armed get a pattern
%% at once (without OTP's calls, a request's own trace by default, within
%% half a second: late_module_next/0).
-spec late_module_trace() -> string().
late_module_trace() ->
    Bin = late_module(kpt_late),
    ok = wait_unarmed(50),
    Id = kprof:trace_request(#{otp_calls => true},
                             fun() ->
                                     {module, kpt_late} = code:load_binary(kpt_late, "kpt_late.erl", Bin),
                                     42 = kpt_late:work(),
                                     kprof:trace_id()
                             end),
    binary_to_list(Id) ++ "," ++ integer_to_list(patterns_left()).

%% Module `Name' unloaded, and compiled afresh (work/0 calls inner/0,
%% which returns 42), for code:load_binary/3 in a traced request.
late_module(Name) ->
    _ = code:purge(Name),
    _ = code:delete(Name),
    _ = code:purge(Name),
    Forms = [{attribute, 1, module, Name},
             {attribute, 2, export, [{work, 0}]},
             {function, 3, work, 0, [{clause, 3, [], [], [{call, 3, {atom, 3, inner}, []}]}]},
             {function, 4, inner, 0, [{clause, 4, [], [], [{integer, 4, 42}]}]}],
    {ok, Name, Bin} = compile:forms(Forms),
    Bin.

%% @doc With a request's own defaults (OTP's calls not frames), no
%% pattern takes a module loaded later by itself: a request that loads one
%% (kpt_late2, made here) does so while a trace held open keeps the
%% patterns armed; the module gets kprof's pattern within a second
%% (waited for here, 5 s at most), and the next traced request calls it.
%% Returns that request's trace id.
-spec late_module_next() -> string().
late_module_next() ->
    Bin = late_module(kpt_late2),
    ok = wait_unarmed(50),
    Self = self(),
    Holder = spawn(fun() ->
                           kprof:trace_request(fun() ->
                                                       Self ! armed,
                                                       receive stop -> ok after 10000 -> ok end
                                               end)
                   end),
    receive armed -> ok after 5000 -> exit(no_holder) end,
    _ = kprof:trace_request(fun() ->
                                    {module, kpt_late2} =
                                        code:load_binary(kpt_late2, "kpt_late2.erl", Bin),
                                    42 = kpt_late2:work()
                            end),
    Armed = wait_pattern({kpt_late2, work, 0}, 50),
    Id = kprof:trace_request(fun() -> 42 = kpt_late2:work(), kprof:trace_id() end),
    Holder ! stop,
    case Armed of
        ok -> binary_to_list(Id);
        timeout -> "no_pattern_in_5s"
    end.

wait_pattern(_, 0) -> timeout;
wait_pattern(MFA, Tries) ->
    case kprof_tracing:info(kprof_tracing:session_of(kprof_rtrace), MFA, traced) of
        {traced, local} -> ok;
        _ -> timer:sleep(100), wait_pattern(MFA, Tries - 1)
    end.

%% @doc A trace that runs 300 ms (kpt_tiers:step/0 a hundred times), and
%% meanwhile begins with bad option values through every API: each must be
%% refused, and the running trace go on. Returns "Id,Refused": the running
%% trace's id and how many of the 6 bad begins were refused with an error
%% naming the option (or, for trace_request/2, ran untraced).
-spec bad_options_during_trace() -> string().
bad_options_during_trace() ->
    Self = self(),
    Runner = spawn(fun() ->
                           Id = kprof:trace_request(fun() ->
                                                            Self ! {running, kprof:trace_id()},
                                                            [step() || _ <- lists:seq(1, 100)],
                                                            kprof:trace_id()
                                                    end),
                           Self ! {done, Id}
                   end),
    Id = receive {running, I} -> I after 5000 -> exit(Runner, kill), no_trace end,
    Bad = [fun() -> kprof:trace_begin(#{max_duration_ms => 10000000000}) end,
           fun() -> kprof:trace_begin(#{max_events => "1000"}) end,
           fun() -> kprof:trace_begin(#{max_concurrent => 0}) end,
           fun() -> kprof_rtrace:begin_trace(self(), #{idle_ms => -1}) end,
           fun() -> kprof_rtrace:begin_trace(self(), #{linger_ms => infinity}, self) end],
    Refused = [R || F <- Bad, {error, {bad_option, _, _, _}} = R <- [F()]],
    Untraced = kprof:trace_request(#{max_processes => 1 bsl 70}, fun() -> kprof:trace_id() end),
    Done = receive {done, D} -> D after 10000 -> timeout end,
    Done = Id,
    lists:flatten(io_lib:format("~s,~p", [Id, length(Refused) + length([x || Untraced =:= undefined])])).

%% Waits, `Tries' times 100 ms at most, until no request-trace pattern is left.
wait_unarmed(0) -> timeout;
wait_unarmed(Tries) ->
    case patterns_left() of
        0 -> ok;
        _ -> timer:sleep(100), wait_unarmed(Tries - 1)
    end.

%% @doc "clean", or what tier tracing left behind: patterns on traced
%% functions, call-traced processes, trace flags for new processes, kprof
%% processes or settings.
-spec clean() -> string().
clean() ->
    MFAs = [{kprof_kv_parser, parse, 1}, {kprof_kv_handler, handle, 1}, {kprof_kv_db, query, 1},
            {kprof_kv_accounting, record, 2}, {kprof_kv_formatter, format, 1},
            {kprof_kv, request, 1}, {?MODULE, step, 0}, {?MODULE, rec, 1},
            {kprof_tier_mark, request, 2}, {kprof_tier_mark, begin_request, 1},
            {kprof_tier_mark, end_request, 0}],
    S = kprof_tracing:session_of(kprof_tiers),
    Patterns = [MFA || MFA <- MFAs, element(2, kprof_tracing:info(S, MFA, match_spec)) =/= false,
                       element(2, kprof_tracing:info(S, MFA, match_spec)) =/= undefined],
    Traced = [P || P <- processes(), {flags, F} <- [kprof_tracing:info(S, P, flags)], F =/= []],
    {flags, New} = kprof_tracing:info(S, new, flags),
    %% OTP 27 and later: kprof's own session, whose closing removes it all
    Sessions = kprof_tracing:sessions(),
    Procs = [R || R <- [kprof_tiers, kprof_tiers_guard], whereis(R) =/= undefined],
    Setting = persistent_term:get({kprof_tiers, settings}, none),
    Tokens = [{P, T} || P <- processes(),
                        {sequential_trace_token, T} <- [process_info(P, sequential_trace_token)],
                        T =/= []],
    case {Patterns, Traced, New, Procs, Setting, Tokens, Sessions} of
        {[], [], [], [], none, [], []} -> "clean";
        _ -> lists:flatten(io_lib:format("patterns=~p traced=~p new=~p procs=~p setting=~p "
                                         "tokens=~p sessions=~p",
                                         [Patterns, length(Traced), New, Procs, Setting,
                                          lists:sublist(Tokens, 3), Sessions]))
    end.

%% @doc The `requests' counter of kprof:stats()'s JSON line, as text.
-spec stats_requests() -> string().
stats_requests() ->
    #{json := Json} = kprof:stats(),
    {match, [N]} = re:run(Json, "\"requests\":([0-9]+)", [{capture, all_but_first, list}]),
    N.

%% @doc Spawns a process holding a token of another seq_trace user (label
%% user_label, flag send), waiting; returns its pid as text.
-spec hold_user_token() -> string().
hold_user_token() ->
    P = spawn(fun() ->
                      seq_trace:set_token(label, user_label),
                      seq_trace:set_token(send, true),
                      receive stop -> ok end
              end),
    pid_to_list(P).

%% @doc The label of the token `Pid' holds, as text ("none" for no token).
-spec user_token(string()) -> string().
user_token(Pid) ->
    case process_info(list_to_pid(Pid), sequential_trace_token) of
        {sequential_trace_token, []} -> "none";
        {sequential_trace_token, T} -> atom_to_list(element(2, T))
    end.

%% @doc Stops the process of hold_user_token/0.
-spec stop_holder(string()) -> ok.
stop_holder(Pid) ->
    list_to_pid(Pid) ! stop,
    ok.
