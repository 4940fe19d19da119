%%% @doc The call patterns of request traces (kprof_rtrace): which functions
%%% get kprof's local pattern while traces run, setting them, and removing
%%% exactly those again.
%%%
%%% Every loaded function gets one, but for three kinds:
%%% <ul>
%%% <li>what a traced process runs of kprof between its flags and its marks
%%%   (?OWN, and the trace API they call, ?TRACE_API): a trace's beginning
%%%   and end leave no events;</li>
%%% <li>BIFs, unless the setting `bifs' is on (bifs_off/3 turns their
%%%   patterns off after set/2): their time is their caller's
%%%   (kprof_rtrace_arming's bifs/1 says what that saves);</li>
%%% <li>functions with someone else's call pattern, in the shared session
%%%   before OTP 27;</li>
%%% <li>with the setting `otp_calls' off, the modules of Erlang/OTP's and
%%%   Elixir's own applications (?PLATFORM_APPS): their time is their
%%%   caller's, as a BIF's is; but the receive loops of OTP's behaviours
%%%   (?LOOPS) get one whose message, `kprof_loop', tells the NIF that a
%%%   followed server is back in its loop and is no frame.</li>
%%% </ul>
%%% The marks (kprof_rtrace_mark) get a pattern that copies their argument
%%% into the stream. Modules loaded while the patterns are armed get one by
%%% kprof_rtrace_arming's on_load pattern, or where it is not set, as
%%% newly_loaded/4 chooses.
-module(kprof_rtrace_patterns).

-export([choose/2, set/2, bifs_off/3, unset/2, builtins/0, platform/1, newly_loaded/4, add/2]).

%% `all': every loaded function (no one else had a call pattern); else
%% modules armed whole ({M, '_', '_'}) and functions armed one by one (in
%% modules where someone else has call patterns).
-type armed_set() :: all | {[module()], [mfa()]}.
-export_type([armed_set/0]).

%% kprof_rtrace_mark's patterns emit the marks: always kprof's.
-define(MARKS, kprof_rtrace_mark).
%% What a traced process runs of kprof between its flags and its marks
%% (kprof_rtrace_own): no call pattern, so that it costs the process no
%% events (nor do the BIFs it calls, unless the setting `bifs' is on).
%% kprof_tracer too: its mark/2 is such a call (a NIF: a pattern on it
%% would still make events). kprof_rtrace_traces makes a trace's id and
%% bounds in the process that begins it (kprof_rtrace:begin_own/1), which
%% a followed request may have traced already, and the server's cut marks
%% while it is traced itself.
-define(OWN, [kprof, kprof_rtrace_own, kprof_rtrace, kprof_rtrace_traces, kprof_rtrace_flags,
              kprof_tracing, kprof_tracer]).
%% The trace API they call, which a request itself hardly does: no call
%% pattern either (functions a release lacks are not there to set).
-define(TRACE_API, [{erlang, trace, 3}, {erlang, trace_info, 2},
                    {erlang, ensure_tracer_module_loaded, 2}, {trace, '_', '_'}]).
%% The functions in which OTP's behaviours wait for their next message
%% (any arity, OTP 25 to 29): with the setting `otp_calls' off, their call
%% is how the NIF (kprof_tracer.c, kprof_loop) learns that a followed
%% server is back in its loop; without it, a busy server that takes one
%% message after another without being scheduled out would never be.
-define(LOOPS, [{gen_server, loop}, {gen_statem, loop_receive}, {gen_event, fetch_msg}]).
-define(LOOP_SPEC, [{'_', [], [{message, kprof_loop}]}]).
%% The applications of Erlang/OTP 25 to 29, and Elixir's: with the setting
%% `otp_calls' off, their modules get no pattern. A request through inets
%% httpd makes about 3,300 events in inets's own code (URI parsing, file
%% info, chunked sending), 2.5 ms at 0.75 us each; its user's code, tens.
-define(PLATFORM_APPS,
        ["asn1", "common_test", "compiler", "crypto", "debugger", "dialyzer", "diameter",
         "edoc", "eldap", "erl_docgen", "erl_interface", "erts", "et", "eunit", "ftp",
         "inets", "jinterface", "kernel", "megaco", "mnesia", "observer", "odbc", "os_mon",
         "parsetools", "public_key", "reltool", "runtime_tools", "sasl", "snmp", "ssh",
         "ssl", "stdlib", "syntax_tools", "tftp", "tools", "wx", "xmerl",
         "elixir", "eex", "ex_unit", "iex", "logger", "mix"]).

%% @doc Sets the patterns of `Set' (choose/1's) in `Session', but on the
%% functions of ?OWN and ?TRACE_API; then the marks'. BIFs get the pattern
%% too, until bifs_off/3.
-spec set(kprof_tracing:session(), armed_set()) -> ok.
set(Session, Set) ->
    Off = fun(What) -> kprof_tracing:function(Session, What, false, [local]) end,
    _ = case Set of
            all ->
                _ = kprof_tracing:function(Session, {'_', '_', '_'}, true, [local]),
                [Off(What) || What <- [{M, '_', '_'} || M <- ?OWN] ++ ?TRACE_API];
            {Mods, MFAs} ->
                [kprof_tracing:function(Session, {M, '_', '_'}, true, [local]) || M <- Mods],
                [kprof_tracing:function(Session, MFA, pattern(MFA, Mods), [local]) || MFA <- MFAs],
                [Off(MFA) || {M, _, _} = MFA <- ?TRACE_API, in_set(M, MFA, Set)]
        end,
    %% the marks carry the trace's id and bounds into the stream
    _ = [kprof_tracing:function(Session, {?MARKS, F, 1}, [{['$1'], [], [{message, '$1'}]}],
                                [local])
         || F <- [begin_trace, end_trace]],
    ok.

%% @doc The modules loaded since those of `Known' (erlang:loaded/0's when
%% the patterns were armed, or at the last call), with them, and what of
%% them gets kprof's pattern as choose/2 would have chosen it with
%% `OtpCalls' and `Bifs' (the settings armed with): a module whole, or
%% function by function where it has BIFs (unless `Bifs') or someone
%% else's patterns. For an armed set that takes no later module by itself
%% (choose/2's but `all', with no on_load pattern of kprof's): a module a
%% request loads lazily is traced from the requests after it.
-spec newly_loaded(kprof_tracing:session(), #{module() => []}, boolean(), boolean()) ->
          {#{module() => []}, {[module()], [mfa()]}}.
newly_loaded(Session, Known, OtpCalls, Bifs) ->
    New = [M || M <- erlang:loaded(), not maps:is_key(M, Known)],
    Armable = [M || M <- New, M =/= ?MARKS, not lists:member(M, ?OWN),
                    not lists:member({M, '_', '_'}, ?TRACE_API),
                    OtpCalls orelse not platform_loaded(M)],
    Set = lists:foldl(
            fun(M, {Mods, MFAs} = Acc) ->
                    Fs = module_functions(M),
                    case [MFA || {_, F, A} = MFA <- Fs, Bifs orelse not erlang:is_builtin(M, F, A),
                                 kprof_tracing:info(Session, MFA, traced) =:= {traced, false}] of
                        [] -> Acc;
                        Fs -> {[M | Mods], MFAs};
                        Free -> {Mods, Free ++ MFAs}
                    end
            end, {[], []}, Armable),
    {lists:foldl(fun(M, K) -> K#{M => []} end, Known, New), Set}.

%% A module unloaded since it was listed is of no interest: as OTP's.
platform_loaded(M) ->
    case code:is_loaded(M) of
        {file, Path} -> platform(Path);
        false -> true
    end.

%% @doc Sets kprof's pattern on what newly_loaded/4 chose.
-spec add(kprof_tracing:session(), {[module()], [mfa()]}) -> ok.
add(Session, {Mods, MFAs}) ->
    _ = [kprof_tracing:function(Session, What, true, [local])
         || What <- [{M, '_', '_'} || M <- Mods] ++ MFAs],
    ok.

%% A loop's (?LOOPS) when its module has no pattern whole (otp_calls off).
pattern({M, F, _}, Mods) ->
    case lists:member({M, F}, ?LOOPS) andalso not lists:member(M, Mods) of
        true -> ?LOOP_SPEC;
        false -> true
    end.

%% @doc Turns off the patterns set/2 gave `Bifs'. One trace_pattern call,
%% and so one code barrier, each: 450 of them take 5 ms in an idle node,
%% 0.8 s in one whose schedulers are busy, several seconds on a loaded
%% host, which is why kprof_rtrace runs this in a process of its own.
-spec bifs_off(kprof_tracing:session(), armed_set(), [mfa()]) -> ok.
bifs_off(Session, Set, Bifs) ->
    _ = [kprof_tracing:function(Session, MFA, false, [local])
         || {M, _, _} = MFA <- Bifs, Set =:= all orelse in_set(M, MFA, Set)],
    ok.

in_set(_, _, all) -> true;
in_set(M, MFA, {Mods, MFAs}) -> lists:member(M, Mods) orelse lists:member(MFA, MFAs).

%% @doc Every BIF of the loaded modules (0.75 ms here), those requests
%% call most first (bifs_off/3 may not get to the last on a loaded host).
-spec builtins() -> [mfa()].
builtins() ->
    Hot = [erlang, ets, maps, lists, binary, persistent_term, atomics, counters],
    Rank = fun(M) -> length(lists:takewhile(fun(H) -> H =/= M end, Hot)) end,
    Mods = lists:sort(fun(X, Y) -> Rank(X) =< Rank(Y) end, erlang:loaded()),
    [{M, F, A} || M <- Mods, {F, A} <- exports(M), erlang:is_builtin(M, F, A)].

exports(M) ->
    try M:module_info(exports) catch error:undef -> [] end.

%% @doc What kprof's local pattern takes: every function of every loaded
%% module but ?OWN (what {'_', '_', '_'} would take) except those with a
%% call pattern, which are someone else's (kprof has none while no trace
%% runs), and, when `OtpCalls' is false, but the modules of ?PLATFORM_APPS
%% (platform/1); the caller passes it to set/3 and later unset/2. A module with
%% none is armed in one call, since each trace_pattern/3 call costs a code
%% barrier (20 us a function, 15-50 us a whole module, under 1 ms for
%% {'_', '_', '_'}); a module with some, function by function. Without any,
%% all of them in one call, and ?OWN turned off again (5 more calls). The
%% marks are always kprof's. kprof's own session starts empty: all of them.
%% Without OTP's modules, one call a module (a hundred user modules: about
%% 3 ms each arming).
-spec choose(kprof_tracing:session(), boolean()) -> armed_set().
choose(Session, OtpCalls) ->
    {module, _} = code:ensure_loaded(?MARKS),
    _ = [code:ensure_loaded(M) || M <- ?OWN],
    Loaded = case OtpCalls of
                 true -> erlang:loaded();
                 false -> [M || {M, Path} <- code:all_loaded(), not platform(Path)]
             end,
    case {OtpCalls, kprof_tracing:shared(Session) andalso arm_modules(Session, Loaded)} of
        {true, false} -> all;
        {true, {Mods, []}} when length(Mods) =:= length(Loaded) - length(?OWN) -> all;
        {true, {_, _} = Set} -> Set;
        {false, false} ->
            {[?MARKS | [M || M <- Loaded, M =/= ?MARKS, not lists:member(M, ?OWN)]], loops(Session)};
        {false, {Mods, MFAs}} ->
            {Mods, loops(Session) ++ MFAs}
    end.

%% The functions of ?LOOPS, but those with someone else's pattern.
loops(Session) ->
    [MFA || {M, F} <- ?LOOPS, {_, F1, _} = MFA <- module_functions(M), F1 =:= F,
            kprof_tracing:info(Session, MFA, traced) =:= {traced, false}].

%% @doc Whether a module loaded from `Path' (code:which/1's) is of
%% Erlang/OTP or Elixir (?PLATFORM_APPS): preloaded, or in the `ebin' of an
%% application directory named so (`stdlib-4.3', `elixir'), wherever it is
%% installed, a release's `lib' included.
-spec platform(file:filename() | atom()) -> boolean().
platform(preloaded) ->
    true;
platform(Path) when is_list(Path) ->
    AppDir = filename:basename(filename:dirname(filename:dirname(Path))),
    lists:member(hd(string:split(AppDir, "-")), ?PLATFORM_APPS);
platform(_) -> % cover_compiled, or loaded from a binary
    false.

arm_modules(Session, Loaded) ->
    lists:foldl(
      fun(M, {Mods, MFAs} = Acc) ->
              case M =:= ?MARKS orelse lists:member(M, ?OWN) of
                  true ->
                      Acc;
                  false ->
                      Fs = module_functions(M),
                      case [MFA || MFA <- Fs,
                                   kprof_tracing:info(Session, MFA, traced) =:= {traced, false}] of
                          [] -> Acc;
                          Fs -> {[M | Mods], MFAs};
                          Free -> {Mods, Free ++ MFAs}
                      end
              end
      end, {[?MARKS], []}, Loaded).

module_functions(M) ->
    try erlang:get_module_info(M, functions) of
        Fs -> [{M, F, A} || {F, A} <- Fs]
    catch
        error:badarg -> [] % unloaded meanwhile
    end.

%% @doc Removes exactly the patterns set/3 set in the shared session. A
%% function whose pattern is no longer kprof's plain local `true' got one
%% from someone else meanwhile (or lost it to a code reload) and is left
%% alone; the marks are kprof's.
-spec unset(kprof_tracing:session(), armed_set()) -> ok.
unset(Session, all) ->
    Mods = [M || M <- erlang:loaded(), M =/= ?MARKS],
    case lists:all(fun(M) -> foreign(Session, module_functions(M)) =:= [] end, Mods) of
        true -> _ = kprof_tracing:function(Session, {'_', '_', '_'}, false, [local]), ok;
        false -> unset(Session, {[?MARKS | Mods], []})
    end;
unset(Session, {Mods, MFAs}) ->
    Off = fun(What) -> kprof_tracing:function(Session, What, false, [local]) end,
    lists:foreach(
      fun(?MARKS) -> Off({?MARKS, '_', '_'});
         (M) ->
              Fs = module_functions(M),
              case foreign(Session, Fs) of
                  [] -> Off({M, '_', '_'});
                  _ -> [Off(MFA) || MFA <- Fs, is_armed(Session, MFA)]
              end
      end, Mods),
    _ = [Off(MFA) || MFA <- MFAs, is_armed(Session, MFA)],
    ok.

%% Functions with a call pattern that is not kprof's (a function without
%% any, e.g. of a module loaded since, is not in the way of a removal).
%% Each `traced' is read once: this runs for every loaded function.
foreign(Session, MFAs) ->
    [MFA || MFA <- MFAs,
            Traced <- [kprof_tracing:info(Session, MFA, traced)],
            Traced =/= {traced, false}, not is_kprofs(Session, Traced, MFA)].

is_armed(Session, MFA) ->
    is_kprofs(Session, kprof_tracing:info(Session, MFA, traced), MFA).

%% kprof's pattern, given the function's `traced': local, no match spec
%% (or a loop's, ?LOOP_SPEC).
is_kprofs(Session, {traced, local}, MFA) ->
    lists:member(kprof_tracing:info(Session, MFA, match_spec),
                 [{match_spec, []}, {match_spec, ?LOOP_SPEC}]);
is_kprofs(_, _, _) -> false.

