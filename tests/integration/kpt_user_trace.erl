%%% @doc A user's own tracing, set before kprof runs, for the integration
%%% test tests/integration/user_trace: kprof must leave it exactly as set and
%%% leave nothing of its own.
%%%
%%% `setup/0' starts, under a long-lived owner process, a dbg tracer (a
%%% process counting its events in an ETS table), a user process traced
%%% with `[call, procs]', a local pattern on lists:seq/2 (a module kprof's
%%% request traces arm) and one on the BIF ets:lookup/2, a global pattern with a match spec, a meta pattern
%%% and a call_count pattern, and remembers what erlang:trace_info/2 says of
%%% them. `check/0' says whether it all is unchanged, still delivers events,
%%% and whether any other function or process carries a pattern or flags.
-module(kpt_user_trace).

-export([setup/0, check/0, user_pid/0, user_fun/1, meta_fun/0, counted/0, poke/1, trace_user/0,
         share_user/0, kill_rtrace/0]).

-define(USER_MFAS, [{lists, seq, 2}, {ets, lookup, 2}, {?MODULE, user_fun, 1},
                    {?MODULE, meta_fun, 0}, {?MODULE, counted, 0}]).

%% @doc Sets the user's tracing; returns ok once it is in place.
-spec setup() -> ok.
setup() ->
    Self = self(),
    spawn(fun() -> owner(Self) end),
    receive {user_trace, Reply} -> Reply after 20000 -> timeout end.

owner(Parent) ->
    register(kpt_user_owner, self()),
    ets:new(kpt_user_events, [named_table, public]),
    ets:insert(kpt_user_events, {n, 0}),
    {ok, Tracer} = dbg:tracer(process, {fun(_, N) ->
                                                ets:update_counter(kpt_user_events, n, 1), N
                                        end, 0}),
    User = spawn(fun user_loop/0),
    register(kpt_user_proc, User),
    {ok, _} = dbg:p(User, [call, procs]),
    {ok, _} = dbg:tpl(lists, seq, 2, []),
    {ok, _} = dbg:tpl(ets, lookup, 2, []), % a BIF
    {ok, _} = dbg:tp(?MODULE, user_fun, 1, [{'_', [], [{return_trace}]}]),
    1 = erlang:trace_pattern({?MODULE, meta_fun, 0}, [{'_', [], [{return_trace}]}],
                             [{meta, Tracer}]),
    1 = erlang:trace_pattern({?MODULE, counted, 0}, true, [call_count]),
    persistent_term:put(kpt_user_trace, snapshot()),
    Parent ! {user_trace, ok},
    receive stop -> ok end.

%% @doc The traced user process.
-spec user_pid() -> pid().
user_pid() -> whereis(kpt_user_proc).

user_loop() ->
    receive
        {apply, From, M, F, A} -> From ! {self(), try apply(M, F, A) catch C:R -> {'EXIT', {C, R}} end};
        _ -> ok
    end,
    user_loop().

%% @doc Makes the user process call kprof_kv:request/1 (a function `kprof
%% trace --mfa' traces): it must not be taken from its tracer.
-spec poke(binary()) -> term().
poke(Req) ->
    apply_in_user(kprof_kv, request, [Req]).

%% @doc A request trace asked for on the user's traced process: kprof must
%% refuse it in the shared session (before OTP 27: one tracer a process).
-spec trace_user() -> term().
trace_user() ->
    kprof_rtrace:begin_trace(user_pid(), #{}).

%% @doc OTP 27 and later: a request trace of the user's traced process, in
%% kprof's own session, while the user's tracer goes on getting its events.
%% "Id" of the trace, or what went wrong.
-spec share_user() -> string().
share_user() ->
    case kprof_rtrace:begin_trace(user_pid(), #{}) of
        {ok, Id, Bounds} ->
            %% the marks tell the collector whose trace the process's events are
            apply_in_user(kprof_rtrace_mark, begin_trace, [{Id, Bounds}]),
            Delivers = delivers(),
            Kprofs = kprof_tracing:info(kprof_tracing:session_of(kprof_rtrace), user_pid(), flags),
            apply_in_user(kprof_rtrace_mark, end_trace, [Id]),
            ok = kprof_rtrace:end_trace(Id),
            case {Delivers, Kprofs} of
                {true, {flags, [_ | _]}} -> binary_to_list(Id);
                _ -> lists:flatten(io_lib:format("user_tracer_gets_events=~p kprof_flags=~p",
                                                 [Delivers, Kprofs]))
            end;
        Other ->
            lists:flatten(io_lib:format("~p", [Other]))
    end.

%% @doc Kills the request-trace server (its guard must undo what it set).
-spec kill_rtrace() -> boolean().
kill_rtrace() ->
    case whereis(kprof_rtrace) of
        undefined -> false;
        Pid -> exit(Pid, kill)
    end.

apply_in_user(M, F, A) ->
    User = user_pid(),
    User ! {apply, self(), M, F, A},
    receive {User, R} -> R after 5000 -> timeout end.

-spec user_fun(term()) -> term().
user_fun(X) -> X.

-spec meta_fun() -> ok.
meta_fun() -> ok.

-spec counted() -> ok.
counted() -> ok.

snapshot() ->
    User = user_pid(),
    {[{MFA, erlang:trace_info(MFA, all)} || MFA <- ?USER_MFAS],
     erlang:trace_info(User, tracer), lists:sort(element(2, erlang:trace_info(User, flags))),
     erlang:trace_info(new, tracer), erlang:trace_info(new, flags)}.

%% @doc "ok", or what differs: the user's patterns (all of trace_info),
%% the user process's tracer and flags, whether the user's tracer still
%% gets events, any other function with a pattern of any kind, any other
%% process with trace flags.
-spec check() -> string().
check() ->
    Before = persistent_term:get(kpt_user_trace),
    %% call_count counts on: compare without the count
    Now = snapshot(),
    Same = strip_count(Now) =:= strip_count(Before),
    Delivers = delivers(),
    Patterns = [MFA || M <- erlang:loaded(),
                       {F, A} <- erlang:get_module_info(M, functions),
                       MFA <- [{M, F, A}],
                       not lists:member(MFA, ?USER_MFAS),
                       erlang:trace_info(MFA, all) =/= {all, false}],
    User = user_pid(),
    Traced = [{P, erlang:trace_info(P, tracer), erlang:trace_info(P, flags)}
              || P <- erlang:processes(), P =/= User,
                 element(2, erlang:trace_info(P, flags)) =/= []],
    %% OTP 27 and later: what kprof set is in its own session, gone with it
    Sessions = kprof_tracing:sessions(),
    case {Same, Delivers, Patterns, Traced, Sessions} of
        {true, true, [], [], []} -> "ok";
        _ ->
            lists:flatten(io_lib:format(
              "user_state_same=~p user_tracer_gets_events=~p other_patterns=~p(~p) "
              "other_traced=~p kprof_sessions=~p now=~p before=~p",
              [Same, Delivers, length(Patterns), lists:sublist(Patterns, 5),
               lists:sublist(Traced, 5), Sessions, Now, Before]))
    end.

strip_count({MFAs, T, F, NT, NF}) ->
    {[{MFA, strip_item(All)} || {MFA, All} <- MFAs], T, F, NT, NF}.

strip_item({all, Items}) when is_list(Items) ->
    [case I of {call_count, N} when is_integer(N) -> {call_count, counting}; _ -> I end
     || I <- Items];
strip_item(Other) -> Other.

%% The user process's traced call reaches the user's tracer (it was not
%% taken by kprof's tracer).
delivers() ->
    [{n, N0}] = ets:lookup(kpt_user_events, n),
    apply_in_user(?MODULE, user_fun, [1]),
    wait_events(N0, 50).

wait_events(_, 0) -> false;
wait_events(N0, K) ->
    case ets:lookup(kpt_user_events, n) of
        [{n, N}] when N > N0 -> true;
        _ -> timer:sleep(20), wait_events(N0, K - 1)
    end.
