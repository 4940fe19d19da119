%%% @doc The in-node half of tier tracing: trace patterns, the trace port and
%%% their cleanup. It emits events and parses nothing; matching calls with
%%% returns, attributing them to requests and aggregating happen in the C
%%% program (`kprof tiers'), which reads the trace port over TCP.
%%%
%%% == What is traced ==
%%% <ul>
%%% <li>Every tier function gets a local trace pattern that fires only while
%%%   the calling process has a seq_trace token
%%%   (`[{'_', [{is_seq_trace}], [{message, {get_seq_token}}, {exception_trace}]}]'),
%%%   so code outside a traced request pays only the match.</li>
%%% <li>A request starts where the token is set: at the `entry' function,
%%%   whose match spec sets the token with the calling pid as label and emits
%%%   the identity argument (no code change in the target), or at
%%%   `kprof_tier_mark' (called by `kprof:do_apply/3' and
%%%   `kprof:set_token/1'), whose patterns do the same.</li>
%%% <li>Every process gets the trace flags `call', `arity' (events carry
%%%   `{M, F, Arity}', not the arguments) and `monotonic_timestamp', with
%%%   kprof's erl_tracer NIF (kprof_tracer) as tracer when kprof brought it
%%%   and listens for it: its memory is a fixed buffer, and it trips when
%%%   1 MB waits. Otherwise the ip trace port of runtime_tools: it drops
%%%   events when its queue is full and says so (the C side then pauses
%%%   tracing), and what waits for it is bounded only by the backlog check
%%%   below.</li>
%%% </ul>
%%%
%%% == Processes ==
%%% The <em>agent</em> (registered `kprof_tiers') owns the trace port or
%%% connects the kprof_tracer NIF, arms and disarms the patterns
%%% (pause/resume on overload), re-arms patterns a code reload removed
%%% (checked every ?REARM_MS), answers clock requests, keeps the C side's
%%% last report for `kprof:stats()', and is the node's own breaker: when the
%%% NIF tripped (nif_flush/1, every ?NIF_FLUSH_MS) or the trace messages
%%% waiting for the port pass a mark (check_fill/1) it disarms the patterns
%%% itself and sends the C side `{kprof_tiers_backlog, Bytes, NodeTime}',
%%% which counts the pause and sends `resume' after its cool-down. The
%%% <em>guard</em> monitors the agent and the C node and undoes everything
%%% when either goes: patterns, trace flags, the NIF's connection, the
%%% settings term, and the seq_trace tokens of
%%% kprof's requests (see clear_tokens/0).
%%%
%%% kprof removes only what it set. On OTP 27 and later its patterns and
%%% flags are in a trace session of its own (kprof_tracing), beside any
%%% other (dbg's), and closing it removes them. Before, in the one session
%%% all tracers share: a tier function that already has a call pattern (a
%%% user's `dbg:tp') makes it refuse to start, a pattern someone puts on a
%%% tier function while it runs stays, and flags are cleared only on
%%% processes whose tracer is kprof's trace port (`erlang:trace(all, ...)'
%%% leaves processes another tracer traces alone when it sets flags).
-module(kprof_tiers).

-export([start/2, start/3, stop/0, parse_text/1, normalize/1, report/0, open_trace_port/1,
         clear_tokens/0, kprof_token/1]).
%% spawned
-export([agent_init/3, guard_init/4]).

-define(REARM_MS, 500).
%% The node-side breaker (see backlog/0 and check_interval/0): tripped when
%% the backlog passes the mark; checked every 20-100 ms, so that checking
%% costs at most 0.1% of a core where it can (0.44% with 16 schedulers), and
%% every 10 ms while it grows.
-define(FILL_CHECK_FAST_MS, 10).
-define(FILL_GROWING_BYTES, 1048576).
-define(FILL_CHECK_MIN_MS, 20).
-define(FILL_CHECK_MAX_MS, 100).
-define(FILL_MARK_BYTES, 4 * 1048576).
-define(SETTINGS, {kprof_tiers, settings}).
-define(MAX_TIERS, 64).
-define(NIF_TRACER, {kprof_tracer, kprof_tiers}).
%% The NIF trips past this much waiting (kprof_tracer:connect/2): with its
%% id tables (2.5 MB), what a storm can cost the node through it.
-define(NIF_FILL_MARK, 1048576).
%% The NIF writes 64 KB at a time; below that rate, this often.
-define(NIF_FLUSH_MS, 20).

-type tier_option() :: {atom() | string(), mfa()}.
-type option() :: tier_option()
                | {tier_config, [tier_option()]}
                | {entry, mfa()}
                | {identity_arg, pos_integer()}
                | {identity_f, fun((mfa_args()) -> term()) | {module(), atom()}}
                | {sample_rate, number()}
                | {print_calls, boolean()}
                | {slow_threshold, non_neg_integer()}
                | {report_interval, pos_integer()}
                | {stats_dumper, {file, file:filename()} | false}
                | {max_lag, pos_integer()}
                | {cooldown, pos_integer()}
                | {queue_size, pos_integer()}
                | {max_identities, pos_integer()}.
-type mfa_args() :: {module(), atom(), [term()]}.
%% The options checked, every default filled in (normalize/1).
-type config() :: #{tiers := [{binary(), mfa()}],
                    entry := mfa() | none,
                    identity_arg := 0..255,
                    identity_f := fun((mfa_args()) -> term()) | undefined,
                    sample_rate := float(),
                    print_calls := boolean(),
                    slow_threshold := non_neg_integer(),
                    report_interval := pos_integer(),
                    stats_file := binary(),
                    max_lag := pos_integer(),
                    cooldown := pos_integer(),
                    queue_size := pos_integer(),
                    max_identities := pos_integer(),
                    via => via(),
                    %% the guard's copy: where the flags and patterns it removes are
                    session => kprof_tracing:session()}.
%% How events leave the node: runtime_tools' ip trace port, or the
%% kprof_tracer NIF connected to kprof on 127.0.0.1:Port (bounded by
%% construction; see kprof_tracer:connect/2).
-type via() :: trace_port | {nif, inet:port_number()}.
%% The C side's last report: the text table and the JSON line of counts
%% since start.
-type report() :: #{table := binary(), json := binary()}.
-export_type([option/0, config/0, report/0, via/0]).

%%% ---------------------------------------------------------------------
%%% Configuration

%% @doc Parses the text of a tier file: Erlang terms, each ending with a dot,
%% as `file:consult/1' reads them. Errors name the line.
-spec parse_text(binary() | string()) -> {ok, [term()]} | {error, string()}.
parse_text(Text) when is_binary(Text) ->
    parse_text(unicode:characters_to_list(Text));
parse_text(Text) when is_list(Text) ->
    parse_forms(Text, 1, []).

parse_forms(Text, Line, Acc) ->
    Scanned = case erl_scan:tokens([], Text, Line) of
                  %% the last dot at the very end: only eof completes it
                  {more, Cont} -> erl_scan:tokens(Cont, eof, Line);
                  Done -> Done
              end,
    case Scanned of
        {done, {ok, Tokens, End}, Rest} ->
            case {lists:last(Tokens), erl_parse:parse_term(Tokens)} of
                {{dot, _}, {ok, Term}} -> parse_forms(Rest, End, [Term | Acc]);
                {{dot, _}, {error, {L, Mod, Why}}} -> {error, at_line(L, Mod:format_error(Why))};
                _ -> {error, at_line(End, "the last term does not end with a dot")}
            end;
        {done, {eof, _}, _} ->
            {ok, lists:reverse(Acc)};
        {done, {error, {L, erl_scan, {unterminated, _, _}}, _}, _} ->
            {error, at_line(L, "an unterminated string, atom or character")};
        {done, {error, {_, erl_scan, scan}, _}, _} ->
            {error, at_line(Line, "the last term does not end with a dot")};
        {done, {error, {L, Mod, Why}, _}, _} ->
            {error, at_line(L, Mod:format_error(Why))}
    end.

at_line(L, Text) ->
    lists:flatten(io_lib:format("line ~p: ~ts", [line_of(L), Text])).

line_of({L, _Col}) -> L;
line_of(L) -> L.

%% @doc Checks options and returns them as a map with every default filled
%% in, or the first problem as one sentence. Tier functions must exist
%% (their module is loaded if needed) with the given arity.
-spec normalize([option()]) -> {ok, config()} | {error, string()}.
normalize(Options) when is_list(Options) ->
    Defaults = #{tiers => [], entry => none, identity_arg => 0, identity_f => undefined,
                 sample_rate => 1.0, print_calls => false, slow_threshold => 0,
                 report_interval => 5000, stats_file => <<>>, max_lag => 1000,
                 cooldown => 5000, queue_size => 50000, max_identities => 200},
    try
        Map = lists:foldl(fun option/2, Defaults, Options),
        check_whole(Map#{tiers := lists:reverse(maps:get(tiers, Map))})
    catch
        throw:{bad, Why} -> {error, Why}
    end;
normalize(_) ->
    {error, "the options are not a list"}.

option({tier_config, List}, M) when is_list(List) ->
    lists:foldl(fun(T, Acc) -> tier(T, Acc) end, M, List);
option({entry, MFA}, M) -> M#{entry := function(MFA, "entry")};
option({identity_arg, N}, M) when is_integer(N), N >= 1, N =< 255 -> M#{identity_arg := N};
option({identity_f, F}, M) when is_function(F, 1) -> M#{identity_f := F};
option({identity_f, {Mod, Fun}}, M) when is_atom(Mod), is_atom(Fun) ->
    %% a tier file cannot hold a fun: name an exported function instead
    {Mod, Fun, 1} = function({Mod, Fun, 1}, "identity_f"),
    erlang:function_exported(Mod, Fun, 1)
        orelse bad("identity_f: ~tp:~tp/1 is not exported", [Mod, Fun]),
    M#{identity_f := fun Mod:Fun/1};
option({sample_rate, R}, M) when is_number(R), R > 0, R =< 1 -> M#{sample_rate := float(R)};
option({print_calls, B}, M) when is_boolean(B) -> M#{print_calls := B};
option({slow_threshold, U}, M) when is_integer(U), U >= 0 -> M#{slow_threshold := U};
option({report_interval, Ms}, M) when is_integer(Ms), Ms >= 100 -> M#{report_interval := Ms};
option({stats_dumper, false}, M) -> M#{stats_file := <<>>};
option({stats_dumper, {file, P}}, M) when is_list(P); is_binary(P) ->
    M#{stats_file := unicode:characters_to_binary(P)};
option({max_lag, Ms}, M) when is_integer(Ms), Ms >= 1 -> M#{max_lag := Ms};
option({cooldown, Ms}, M) when is_integer(Ms), Ms >= 100 -> M#{cooldown := Ms};
option({queue_size, N}, M) when is_integer(N), N >= 10, N =< 10000000 -> M#{queue_size := N};
option({max_identities, N}, M) when is_integer(N), N >= 2, N =< 100000 -> M#{max_identities := N};
option({Key, _} = Opt, _) when Key =:= entry; Key =:= identity_arg; Key =:= identity_f;
                               Key =:= sample_rate; Key =:= print_calls;
                               Key =:= slow_threshold; Key =:= report_interval;
                               Key =:= stats_dumper; Key =:= max_lag; Key =:= cooldown;
                               Key =:= queue_size; Key =:= max_identities;
                               Key =:= tier_config ->
    bad("bad value in ~0tp", [Opt]);
option({_Name, {_, _, _}} = T, M) -> tier(T, M);
option(Other, _) -> bad("unknown option ~0tp (a tier is {Name, {Module, Function, Arity}})",
                        [Other]).

tier({Name, MFA}, M = #{tiers := Tiers}) ->
    Bin = tier_name(Name),
    case lists:keymember(Bin, 1, Tiers) of
        true -> bad("tier ~ts is given twice", [Bin]);
        false -> ok
    end,
    M#{tiers := [{Bin, function(MFA, Bin)} | Tiers]};
tier(Other, _) ->
    bad("bad tier ~0tp (a tier is {Name, {Module, Function, Arity}})", [Other]).

tier_name(Name) when is_atom(Name) -> tier_name(atom_to_list(Name));
tier_name(Name) when is_binary(Name) -> tier_name(unicode:characters_to_list(Name));
tier_name(Name) when is_list(Name) ->
    case io_lib:printable_unicode_list(Name) andalso Name =/= [] andalso length(Name) =< 64
        andalso hd(Name) =/= $_ of
        true -> unicode:characters_to_binary(Name);
        false -> bad("bad tier name ~0tp (printable, 1-64 characters, not starting with _)",
                     [Name])
    end;
tier_name(Name) ->
    bad("bad tier name ~0tp", [Name]).

function({Mod, Fun, Arity} = MFA, What) when is_atom(Mod), is_atom(Fun), is_integer(Arity),
                                              Arity >= 0, Arity =< 255 ->
    case code:ensure_loaded(Mod) of
        {module, Mod} -> ok;
        {error, _} -> bad("~ts: unknown module ~tp (not loaded and not in the code path)",
                          [What, Mod])
    end,
    Funs = Mod:module_info(functions),
    case lists:member({Fun, Arity}, Funs) of
        true ->
            MFA;
        false ->
            case [A || {F, A} <- Funs, F =:= Fun] of
                [] -> bad("~ts: unknown function ~tp:~tp (no function of that name)",
                          [What, Mod, Fun]);
                As -> bad("~ts: wrong arity ~tp:~tp/~p (~tp:~tp has arity ~ts)",
                          [What, Mod, Fun, Arity, Mod, Fun, join([integer_to_list(A) || A <- As])])
            end
    end;
function(Other, What) ->
    bad("~ts: ~0tp is not {Module, Function, Arity}", [What, Other]).

join(Strings) -> lists:join(", ", Strings).

check_whole(M = #{tiers := Tiers, entry := Entry, identity_arg := Arg}) ->
    length(Tiers) =< ?MAX_TIERS orelse bad("more than ~p tiers", [?MAX_TIERS]),
    Tiers =/= [] orelse Entry =/= none orelse bad("no tiers given", []),
    MFAs = [MFA || {_, MFA} <- Tiers] ++ [Entry || Entry =/= none],
    length(lists:usort(MFAs)) =:= length(MFAs)
        orelse bad("one function is given twice (as two tiers, or as a tier and the entry)", []),
    [bad("a tier cannot be kprof_tier_mark", []) || {kprof_tier_mark, _, _} <- MFAs],
    case Entry of
        none when Arg > 0 -> bad("identity_arg needs an entry function", []);
        {_, _, Arity} when Arg > Arity ->
            bad("identity_arg ~p: the entry function has ~p arguments", [Arg, Arity]);
        _ -> ok
    end,
    {ok, M}.

-spec bad(io:format(), [term()]) -> no_return().
bad(Format, Args) ->
    throw({bad, lists:flatten(io_lib:format(Format, Args))}).

%%% ---------------------------------------------------------------------
%%% Start and stop

%% @doc As start/3 through the ip trace port.
-spec start(pid(), [option()] | {text, binary()} | session) ->
          {ok, [{atom(), term()}]} | {error, {config, string()} | string() | term()}.
start(Owner, What) ->
    start(Owner, What, trace_port).

%% @doc Starts tier tracing for `Owner' (a process of the kprof C node):
%% checks `Options' (see normalize/1; `session': those given to
%% kprof:start_trace/1, `{text, Bin}': a tier file's text), opens the trace port and arms the
%% patterns. Events leave through `Via': `{nif, Port}' asks for the
%% kprof_tracer NIF (loaded already, or from the kprof application's priv/),
%% which connects to 127.0.0.1:Port before this returns; when it cannot,
%% the ip trace port serves and the reply says why (`nif_refused').
%% Returns the normalized settings the C side needs: `via' (nif or
%% trace_port), the trace port's TCP `port' (0 with the NIF) and the node's
%% monotonic `time' (ns).
%% Errors: `{error, {config, Sentence}}' for bad options or tier file text,
%% `{error, Sentence}' when the node cannot trace now.
-spec start(pid(), [option()] | {text, binary()} | session, via()) ->
          {ok, [{atom(), term()}]} | {error, {config, string()} | string() | term()}.
start(Owner, session, Via) ->
    start(Owner, kprof_session:options(), Via);
start(Owner, {text, Text}, Via) ->
    case parse_text(Text) of
        {ok, Terms} -> start(Owner, Terms, Via);
        {error, Why} -> {error, {config, Why}}
    end;
start(Owner, Options, Via) when is_pid(Owner), is_list(Options) ->
    case normalize(Options) of
        {error, Why} -> {error, {config, Why}};
        {ok, Config} -> start_agent(Owner, Config#{via => Via})
    end.

%% @doc Stops tier tracing, if it runs; the guard removes every pattern and
%% flag before this returns (or within 2 s).
-spec stop() -> ok.
stop() ->
    case whereis(kprof_tiers) of
        undefined -> ok;
        Agent ->
            Ref = monitor(process, Agent),
            Agent ! stop,
            receive {'DOWN', Ref, process, _, _} -> ok
            after 2000 -> demonitor(Ref, [flush]), exit(Agent, kill), ok
            end,
            wait_guard(20)
    end.

%% The guard cleans up right after the agent goes: wait for it so that the
%% caller sees a clean node.
wait_guard(0) -> ok;
wait_guard(N) ->
    case whereis(kprof_tiers_guard) of
        undefined -> ok;
        _ -> timer:sleep(100), wait_guard(N - 1)
    end.

%% @doc The last report the C side sent (a map with `table' text and the
%% `json' line of the counts since start), or `undefined'.
-spec report() -> report() | undefined.
report() ->
    case whereis(kprof_tiers) of
        undefined -> undefined;
        Agent ->
            %% the reply goes to an alias: one that comes after the
            %% timeout never reaches the caller, often a user's process
            Ref = monitor(process, Agent, [{alias, demonitor}]),
            Agent ! {report, Ref, Ref},
            receive
                {Ref, Report} -> demonitor(Ref, [flush]), Report;
                {'DOWN', Ref, process, _, _} -> undefined
            after 5000 ->
                demonitor(Ref, [flush]),
                receive {Ref, _} -> ok after 0 -> ok end, % sent before the alias went
                undefined
            end
    end.

%% Another tracer can be in the way only in the shared session (before OTP
%% 27): kprof's own starts empty.
start_agent(Owner, Config) ->
    Closed = kprof_tracing:closed(),
    case {kprof_tracing:info(Closed, new, tracer), whereis(kprof_rtrace)} of
        {{tracer, []}, Pid} when is_pid(Pid) ->
            {error, "request traces run on this node (kprof_rtrace); tier tracing waits "
                    "until they stop"};
        {{tracer, []}, undefined} ->
            case [MFA || {MFA, _} <- patterns(Config), element(1, MFA) =/= kprof_tier_mark,
                         kprof_tracing:info(Closed, MFA, traced) =/= {traced, false}] of
                [] -> spawn_agent(Owner, Config);
                [{M, F, A} | _] ->
                    {error, lists:flatten(io_lib:format(
                        "~tp:~tp/~p already has a trace pattern (dbg?); kprof does not "
                        "replace it: remove it first", [M, F, A]))}
            end;
        {{tracer, Other}, _} ->
            {error, lists:flatten(io_lib:format(
                "another tracer (~0tp, e.g. dbg) traces new processes; stop it first", [Other]))}
    end.

spawn_agent(Owner, Config) ->
    Self = self(),
    Agent = spawn(?MODULE, agent_init, [Self, Owner, Config]),
    Ref = monitor(process, Agent),
    receive
        {Agent, started, Reply} -> demonitor(Ref, [flush]), {ok, Reply};
        {Agent, error, Why} -> demonitor(Ref, [flush]), {error, Why};
        {'DOWN', Ref, process, Agent, Why} -> {error, {agent_died, Why}}
    after 10000 ->
        demonitor(Ref, [flush]),
        exit(Agent, kill),
        {error, timeout}
    end.

%%% ---------------------------------------------------------------------
%%% Patterns

tier_spec() ->
    [{'_', [{is_seq_trace}], [{message, {get_seq_token}}, {exception_trace}]}].

%% A request starts: label the token with the calling pid (unique among the
%% requests running at one time; a tuple built in a match spec does not
%% survive the token's travel) and emit the identity with the token.
entry_spec(Arity, IdentityArg) ->
    Args = [if I =:= IdentityArg -> '$1'; true -> '_' end || I <- lists:seq(1, Arity)],
    Identity = if IdentityArg > 0 -> '$1'; true -> undefined end,
    [{Args, [], [{set_seq_token, label, {self}}, {message, [Identity, {get_seq_token}]},
                 {exception_trace}]}].

patterns(#{tiers := Tiers, entry := Entry, identity_arg := Arg}) ->
    Marks = [{{kprof_tier_mark, request, 2},
              [{['$1', '_'], [], [{set_seq_token, label, {self}},
                                  {message, ['$1', {get_seq_token}]}, {exception_trace}]}]},
             {{kprof_tier_mark, begin_request, 1},
              [{['$1'], [], [{set_seq_token, label, {self}},
                             {message, ['$1', {get_seq_token}]}]}]},
             {{kprof_tier_mark, end_request, 0},
              [{[], [{is_seq_trace}], [{message, {get_seq_token}}]}]}],
    EntryPattern = case Entry of
                       none -> [];
                       {_, _, Arity} -> [{Entry, entry_spec(Arity, Arg)}]
                   end,
    Marks ++ EntryPattern ++ [{MFA, tier_spec()} || {_, MFA} <- Tiers].

arm(Session, Patterns) ->
    _ = [kprof_tracing:function(Session, MFA, Spec, [local]) || {MFA, Spec} <- Patterns],
    ok.

%% Only patterns still kprof's: one someone set on a tier function meanwhile
%% (in the shared session) stays.
disarm(Session, Patterns) ->
    _ = [kprof_tracing:function(Session, MFA, false, [local])
         || {MFA, Spec} <- Patterns,
            kprof_tracing:info(Session, MFA, match_spec) =:= {match_spec, Spec}],
    ok.

%% Patterns a code reload removed (the new code has no breakpoints): set
%% them again. Returns how many were re-armed.
rearm(Session, Patterns) ->
    lists:sum([rearm_one(Session, MFA, Spec) || {MFA, Spec} <- Patterns]).

rearm_one(Session, {M, _, _} = MFA, Spec) ->
    %% any call pattern, kprof's or one someone set since, is kept
    case kprof_tracing:info(Session, MFA, traced) of
        {traced, T} when T =/= false -> 0;
        _ ->
            case erlang:module_loaded(M) of
                true -> kprof_tracing:function(Session, MFA, Spec, [local]);
                false -> 0
            end
    end.

%%% ---------------------------------------------------------------------
%%% The guard

%% @private
-spec guard_init(pid(), pid(), node(), config()) -> no_return().
guard_init(Starter, Agent, OwnerNode, Config) ->
    process_flag(trap_exit, true),
    process_flag(priority, high),
    register(kprof_tiers_guard, self()),
    Ref = monitor(process, Agent),
    true = monitor_node(OwnerNode, true),
    ok = kprof_unload:watch(self()),
    Starter ! {self(), guarding},
    receive
        {'DOWN', Ref, process, Agent, _} -> ok;
        {nodedown, OwnerNode} ->
            %% gone, the agent can no longer arm anything, and its trace
            %% port closes
            exit(Agent, kill),
            receive {'DOWN', Ref, process, Agent, _} -> ok after 2000 -> ok end
    end,
    cleanup(Config),
    exit(normal).

%% kprof's own session goes whole; in the shared one, what kprof set.
cleanup(Config = #{session := Session}) ->
    Tracer = kprof_tracing:tracer(Session),
    _ = case kprof_tracing:shared(Session) of
            true -> disarm(Session, patterns(Config)), untrace_all(Session);
            false -> kprof_tracing:close(Session)
        end,
    close_nif(Tracer),
    _ = persistent_term:erase(?SETTINGS),
    clear_tokens().

%% The NIF's connection is kprof's: closing it ends the C side's stream, as
%% the trace port's closing does. Request traces may have taken the NIF
%% since the agent went: theirs stays.
close_nif(?NIF_TRACER) ->
    whereis(kprof_rtrace) =:= undefined andalso kprof_tracer:close(),
    ok;
close_nif(_) ->
    ok.

%% @doc Removes the seq_trace tokens kprof's requests left (tier tracing's,
%% and request traces' that followed messages), when no one else's is there.
%% kprof's requests leave seq_trace tokens behind however they were marked:
%% the entry's and the marks' match specs set them, and every message a
%% request sends carries one on, so a server that answered a request keeps
%% its token until it next receives a message without one. Only
%% seq_trace:reset_trace/0 reaches them all, and it empties every token,
%% a user's too: it runs only when every token in the node is one of kprof's
%% (kprof_token/1). Otherwise the user's tokens and kprof's stay, and the
%% logger says so.
-spec clear_tokens() -> ok.
clear_tokens() ->
    Tokens = [T || P <- erlang:processes(),
                   {sequential_trace_token, T} <- [process_info(P, sequential_trace_token)],
                   T =/= []],
    case lists:partition(fun kprof_token/1, Tokens) of
        {[], _} ->
            ok;
        {_, []} ->
            seq_trace:reset_trace(),
            ok;
        {Ours, Others} ->
            logger:warning("kprof: ~b seq_trace tokens of kprof's requests stay in this node: "
                           "~b processes hold tokens of another seq_trace user, which "
                           "resetting would empty; each goes at its process's next message "
                           "without a token", [length(Ours), length(Others)])
    end.

%% @doc kprof's tokens: labelled with a pid (the request's process, see
%% entry_spec/2, or a call `kprof trace --mfa' follows: kprof_rtrace_calls),
%% or, from a request trace, {kprof, N} (kprof:trace_begin/1); with no trace
%% flags, or only the `receive' flag (request traces').
-define(SEQ_RECEIVE_FLAG, 2). % the `receive' flag in a token's flags
-spec kprof_token(tuple()) -> boolean().
kprof_token({Flags, {kprof, N}, _Serial, _From, _LastCnt}) ->
    is_integer(N) andalso (Flags =:= 0 orelse Flags =:= ?SEQ_RECEIVE_FLAG);
kprof_token({Flags, Label, _Serial, _From, _LastCnt}) ->
    is_pid(Label) andalso (Flags =:= 0 orelse Flags =:= ?SEQ_RECEIVE_FLAG);
kprof_token(_) -> false.

-define(FLAGS, [call, arity, monotonic_timestamp]).

%% Clears the flags kprof set in the shared session: on processes (and new
%% ones) whose tracer is its trace port or NIF. Processes another tracer
%% traces never got them. Once the port is closed (the agent gone) its
%% processes are no longer traced; this covers a port that is still open,
%% and the NIF.
untrace_all(Session) ->
    Tracer = {tracer, kprof_tracing:tracer(Session)},
    _ = kprof_tracing:info(Session, new, tracer) =:= Tracer
        andalso kprof_tracing:process(Session, new, false, ?FLAGS),
    _ = [kprof_tracing:process(Session, P, false, ?FLAGS)
         || P <- erlang:processes(), kprof_tracing:info(Session, P, tracer) =:= Tracer],
    ok.

%%% ---------------------------------------------------------------------
%%% The agent

-record(state, {patterns :: [{mfa(), term()}],
                session :: kprof_tracing:session(),
                active :: atomics:atomics_ref(),
                owner :: pid(),
                fill_base = 0 :: integer(),
                fill_every = ?FILL_CHECK_MAX_MS :: pos_integer(),
                paused = false :: boolean(),
                nif = false :: boolean(), % events go through kprof_tracer
                rearms = 0 :: non_neg_integer(),
                report = undefined :: report() | undefined}).

%% @private
-spec agent_init(pid(), pid(), config()) -> ok.
agent_init(Starter, Owner, Config) ->
    process_flag(priority, high),
    try register(kprof_tiers, self()) of
        true -> agent_start(Starter, Owner, Config)
    catch
        error:badarg -> Starter ! {self(), error, "tier tracing already runs on this node"}, ok
    end.

agent_start(Starter, Owner, Config) ->
    case open_tracer(Config) of
        {ok, Tracer, ViaReply} ->
            Active = atomics:new(1, []),
            persistent_term:put(?SETTINGS, #{active => Active,
                                             identity_f => maps:get(identity_f, Config),
                                             sample_rate => maps:get(sample_rate, Config)}),
            Session = kprof_tracing:open(kprof_tiers, Tracer),
            Guard = spawn(?MODULE, guard_init, [self(), self(), node(Owner),
                                                Config#{session => Session}]),
            receive {Guard, guarding} -> ok after 5000 -> exit(guard_timeout) end,
            Patterns = patterns(Config),
            %% A pattern set on a module that is not loaded matches nothing.
            {module, _} = code:ensure_loaded(kprof_tier_mark),
            %% `all' skips processes another tracer traces in the shared
            %% session
            _ = kprof_tracing:process(Session, all, true, ?FLAGS),
            arm(Session, Patterns),
            atomics:put(Active, 1, 1),
            Starter ! {self(), started, ViaReply ++ reply(Config)},
            case whereis(kprof_session) of
                undefined -> ok;
                InNode -> InNode ! {kprof_tiers, started}, ok
            end,
            erlang:send_after(?REARM_MS, self(), rearm),
            S = #state{patterns = Patterns, session = Session, active = Active, owner = Owner},
            case Tracer of
                ?NIF_TRACER ->
                    %% bounded by construction: the NIF trips itself
                    erlang:send_after(?NIF_FLUSH_MS, self(), nif_flush),
                    loop(S#state{nif = true});
                _ ->
                    Every = check_interval(),
                    erlang:send_after(Every, self(), fill_check),
                    loop(S#state{fill_base = backlog(), fill_every = Every})
            end;
        {error, Why} ->
            Starter ! {self(), error, Why},
            ok
    end.

%% The tracer events go through, and what the C side must know of it.
open_tracer(#{via := {nif, TcpPort}, queue_size := QSize}) ->
    case connect_nif(TcpPort) of
        ok ->
            {ok, ?NIF_TRACER, [{via, nif}, {port, 0}]};
        {error, Why} ->
            Refused = unicode:characters_to_binary(io_lib:format("~0tp", [Why])),
            case open_trace_port(QSize) of
                {ok, Port, TcpPort1} ->
                    {ok, Port, [{via, trace_port}, {port, TcpPort1}, {nif_refused, Refused}]};
                Error ->
                    Error
            end
    end;
open_tracer(#{queue_size := QSize}) ->
    case open_trace_port(QSize) of
        {ok, Port, TcpPort} -> {ok, Port, [{via, trace_port}, {port, TcpPort}]};
        Error -> Error
    end.

%% The NIF as kprof brought it, or from the kprof application's priv/.
connect_nif(TcpPort) ->
    try
        ok = case kprof_tracer:loaded() of
                 true -> ok;
                 false -> kprof_tracer:load()
             end,
        ok = kprof_tracer:connect(TcpPort, ?NIF_FILL_MARK)
    catch
        error:{badmatch, {error, Why}} -> {error, Why};
        _:Why -> {error, Why}
    end.

%% Trace messages the port has not taken yet wait in the node's system
%% memory, outside any process, ETS table or binary: a storm of tier events
%% grew it by 250 MB before the C side, which measures lag, could tell.
%% This is that memory: system memory less code, atoms, ETS and binaries.
backlog() ->
    [{system, Sys}, {atom, Atom}, {binary, Bin}, {code, Code}, {ets, Ets}] =
        erlang:memory([system, atom, binary, code, ets]),
    Sys - Atom - Bin - Code - Ets.

%% erlang:memory/1 asks every scheduler's allocators: 50 us with 2
%% schedulers, 440 us with 16 (measured). The check runs every 1,000 times
%% what it costs here (the fastest of 5 calls: one slowed down by a busy
%% machine must not stretch it), within the bounds: the longer the interval,
%% the more a storm grows before it is seen (at 100 MB/s, 10 MB per 100 ms).
check_interval() ->
    Us = lists:min([element(1, timer:tc(fun backlog/0)) || _ <- lists:seq(1, 5)]),
    max(?FILL_CHECK_MIN_MS, min(?FILL_CHECK_MAX_MS, Us)).

%% Trips the breaker here once the backlog has grown
%% ?FILL_MARK_BYTES past what it was when the patterns were armed: the
%% patterns go at once, and the C side, told so, counts the pause and
%% resumes after its cool-down as for its own trips.
check_fill(S) ->
    {After, S1} = fill(S),
    erlang:send_after(After, self(), fill_check),
    S1.

%% The state after one check, and when to check next.
fill(S = #state{paused = true, fill_every = Every}) ->
    {Every, S};
fill(S = #state{fill_base = Base, fill_every = Every, owner = Owner}) ->
    case backlog() - Base of
        Grown when Grown > ?FILL_MARK_BYTES ->
            Paused = pause(S),
            Owner ! {kprof_tiers_backlog, Grown, erlang:monotonic_time(nanosecond)},
            {Every, Paused};
        Grown when Grown > ?FILL_GROWING_BYTES ->
            {?FILL_CHECK_FAST_MS, S};
        _ ->
            {Every, S}
    end.

%% Writes out what the NIF holds; when its breaker tripped, tracing pauses
%% here and the C side is told, as for the backlog check (fill/1).
nif_flush(S = #state{owner = Owner}) ->
    case kprof_tracer:flush() of
        {tripped, Bytes} when not S#state.paused ->
            Paused = pause(S),
            Owner ! {kprof_tiers_backlog, Bytes, erlang:monotonic_time(nanosecond)},
            Paused;
        _ ->
            S
    end.

%% Tracing stops at once: do_apply/set_token see it off, the patterns go.
pause(S = #state{patterns = Patterns, session = Session, active = Active}) ->
    atomics:put(Active, 1, 0),
    disarm(Session, Patterns),
    S#state{paused = true}.

%% @doc Opens runtime_tools' ip trace port (a TCP listener the kprof C
%% program connects to; it holds `QSize' events, then drops and says so),
%% owned by the caller. Used by tier tracing and by request traces.
-spec open_trace_port(pos_integer()) -> {ok, port(), inet:port_number()} | {error, string()}.
open_trace_port(QSize) ->
    try
        Port = (dbg:trace_port(ip, {0, QSize}))(),
        %% a list, or a binary on some releases: read by position, not with
        %% a binary pattern (see kprof_agent's module doc)
        [_, Hi, Lo] = case erlang:port_control(Port, $p, "") of
                          L when is_list(L) -> L;
                          B when is_binary(B) -> binary_to_list(B)
                      end,
        {ok, Port, Hi * 256 + Lo}
    catch
        _:Why ->
            {error, lists:flatten(io_lib:format(
                "cannot open the ip trace port of runtime_tools (~0tp); is runtime_tools "
                "installed on the node?", [Why]))}
    end.

reply(Config) ->
    [{time, erlang:monotonic_time(nanosecond)},
     {tiers, [{Name, M, F, A} || {Name, {M, F, A}} <- maps:get(tiers, Config)]},
     {entry, maps:get(entry, Config)}
     | [{K, maps:get(K, Config)} || K <- [identity_arg, print_calls, slow_threshold,
                                          report_interval, stats_file, max_lag, cooldown,
                                          queue_size, max_identities]]].

loop(S = #state{patterns = Patterns, session = Session, active = Active}) ->
    receive
        {clock, From, Seq} ->
            From ! {kprof_tiers_clock, Seq, erlang:monotonic_time(nanosecond), S#state.rearms},
            loop(S);
        pause when not S#state.paused ->
            loop(pause(S));
        resume when S#state.paused, S#state.nif ->
            kprof_tracer:rearm(),
            arm(Session, Patterns),
            atomics:put(Active, 1, 1),
            loop(S#state{paused = false});
        resume when S#state.paused ->
            Base = backlog(),
            arm(Session, Patterns),
            atomics:put(Active, 1, 1),
            loop(S#state{paused = false, fill_base = Base});
        fill_check ->
            loop(check_fill(S));
        nif_flush ->
            erlang:send_after(?NIF_FLUSH_MS, self(), nif_flush),
            loop(nif_flush(S));
        rearm ->
            erlang:send_after(?REARM_MS, self(), rearm),
            case S#state.paused of
                true -> loop(S);
                false -> loop(S#state{rearms = S#state.rearms + rearm(Session, Patterns)})
            end;
        {kprof_tier_report, Table, Json} when is_binary(Table), is_binary(Json) ->
            loop(S#state{report = #{table => Table, json => Json}});
        {report, From, Ref} ->
            From ! {Ref, S#state.report},
            loop(S);
        stop ->
            ok;
        _ ->
            loop(S)
    end.
