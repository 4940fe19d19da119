%%% @doc EUnit tests of kprof_rtrace_arming: what waits for the BIFs'
%%% patterns to go comes back in order when the helper is done or the wait
%%% is over, a dropped meta pattern is never set, and cancelling stops the
%%% helper at once. The helper turns off patterns in a real session of the
%%% test node (this process's own call patterns: none are set, so turning
%%% them off changes nothing). Also which modules the setting otp_calls
%%% leaves out (kprof_rtrace_patterns:platform/1), and what modules loaded
%%% since the arming get (newly_loaded/4).
-module(kprof_arming_tests).

-include_lib("eunit/include/eunit.hrl").

%% A session that sets nothing, as kprof_tracing:closed/0 gives.
session() -> kprof_tracing:closed().

bifs() -> [{erlang, phash2, 1}, {erlang, phash2, 2}, {ets, lookup, 2}].

%% The helper's 'DOWN' (its monitor is the caller's).
helper_down() ->
    receive {'DOWN', MRef, process, _, _} -> MRef after 5000 -> error(no_down) end.

done_in_order_test() ->
    A0 = kprof_rtrace_arming:start(session(), all, bifs(), kprof_rtrace_arming:new()),
    ?assert(kprof_rtrace_arming:busy(A0)),
    Ref1 = make_ref(),
    Ref2 = make_ref(),
    A1 = kprof_rtrace_arming:hold({self(), Ref1, first}, A0),
    A2 = kprof_rtrace_arming:defer_meta(session(), {m, f, 1}, spec1, A1),
    A3 = kprof_rtrace_arming:defer_reply(self(), Ref2, ok, A2),
    A4 = kprof_rtrace_arming:hold({self(), Ref2, second}, A3),
    A5 = kprof_rtrace_arming:defer_meta(session(), {m, g, 2}, spec2, A4),
    A6 = kprof_rtrace_arming:drop_meta({m, g, 2}, A5),
    MRef = helper_down(),
    ?assertEqual(false, kprof_rtrace_arming:done(make_ref(), A6)),
    {Then, Calls, A7} = kprof_rtrace_arming:done(MRef, A6),
    ?assertEqual([{meta, session(), {m, f, 1}, spec1}, {reply, self(), Ref2, ok}], Then),
    ?assertEqual([{self(), Ref1, first}, {self(), Ref2, second}], Calls),
    ?assertNot(kprof_rtrace_arming:busy(A7)),
    flush_wait_over().

%% Past the wait, what waited goes while the helper may still run; its
%% 'DOWN' later finds nothing.
wait_over_test() ->
    A0 = kprof_rtrace_arming:start(session(), all, bifs(), kprof_rtrace_arming:new()),
    A1 = kprof_rtrace_arming:hold({self(), make_ref(), held}, A0),
    MRef = helper_down(),
    ?assertEqual(false, kprof_rtrace_arming:wait_over(make_ref(), A1)),
    {[], [{_, _, held}], A2} = kprof_rtrace_arming:wait_over(MRef, A1),
    ?assertNot(kprof_rtrace_arming:busy(A2)),
    ?assertEqual({[], [], kprof_rtrace_arming:new()}, kprof_rtrace_arming:done(MRef, A2)),
    flush_wait_over().

%% Cancelled, the helper is gone before cancel/1 returns; what was held
%% stays, for the next arming.
cancel_test() ->
    Many = [{erlang, phash2, 1} || _ <- lists:seq(1, 100000)],
    A0 = kprof_rtrace_arming:start(session(), all, Many, kprof_rtrace_arming:new()),
    A1 = kprof_rtrace_arming:hold({self(), make_ref(), held}, A0),
    A2 = kprof_rtrace_arming:cancel(A1),
    ?assertNot(kprof_rtrace_arming:busy(A2)),
    ?assertEqual([], [P || P <- processes(), P =/= self(),
                           {initial_call, {kprof_rtrace_patterns, bifs_off, 3}} =:=
                               process_info(P, initial_call)]),
    {[{_, _, held}], _} = kprof_rtrace_arming:take_held(A2),
    receive {'DOWN', _, process, _, _} = Down -> error({late, Down}) after 0 -> ok end,
    flush_wait_over().

flush_wait_over() ->
    receive {arming_wait_over, _} -> flush_wait_over() after 0 -> ok end.

%% OTP's and Elixir's applications wherever they are installed (Debian's
%% OTP, a release's lib, Elixir's own layout), a user's not.
platform_test() ->
    P = fun kprof_rtrace_patterns:platform/1,
    ?assert(P("/usr/lib/erlang/lib/stdlib-4.3.1.1/ebin/lists.beam")),
    ?assert(P("/opt/rel/lib/inets-9.1/ebin/httpd_request_handler.beam")),
    ?assert(P("/usr/lib/elixir/lib/elixir/ebin/Elixir.Enum.beam")),
    ?assert(P(preloaded)),
    ?assert(P(code:which(gen_server))),
    ?assertNot(P("/opt/rel/lib/my_app-1.0.0/ebin/my_app_server.beam")),
    ?assertNot(P("/opt/rel/lib/stdlib_ext-1.0/ebin/x.beam")),
    ?assertNot(P("/home/u/src/ebin/kv.beam")),
    ?assertNot(P(cover_compiled)),
    ?assertNot(P(code:which(?MODULE))).

%% Modules loaded since the arming (kprof_rtrace_patterns:newly_loaded/4):
%% a user's whole; OTP's only with otp_calls, then without their BIFs
%% unless bifs; kprof's own never; each module reported once.
%% compile:forms/1 loads the compiler: seconds, on a loaded host, past
%% eunit's default 5 s.
newly_loaded_test_() ->
    {timeout, 60, fun newly_loaded/0}.

newly_loaded() ->
    [{module, _} = code:ensure_loaded(M) || M <- [kprof, kprof_rtrace_own, kprof_tracing]],
    S = kprof_tracing:session_of(kprof_rtrace),
    Platform = fun(M) ->
                       {file, Path} = code:is_loaded(M),
                       kprof_rtrace_patterns:platform(Path)
               end,
    New = fun(Known, OtpCalls, Bifs) ->
                  kprof_rtrace_patterns:newly_loaded(S, Known, OtpCalls, Bifs)
          end,
    Forms = [{attribute, 1, module, kprof_arming_late},
             {attribute, 2, export, [{f, 0}]},
             {function, 3, f, 0, [{clause, 3, [], [], [{atom, 3, ok}]}]}],
    {ok, kprof_arming_late, Bin} = compile:forms(Forms),
    Before = maps:remove(kprof_arming_late, maps:from_keys(erlang:loaded(), [])),
    {module, _} = code:load_binary(kprof_arming_late, "kprof_arming_late.erl", Bin),
    %% other modules may load meanwhile (eunit's own, as it prints): each
    %% check looks at the modules it is about
    try
        {Known, {Mods, MFAs}} = New(Before, false, false),
        ?assert(lists:member(kprof_arming_late, Mods)),
        ?assertEqual([], [M || M <- Mods, Platform(M)]),
        ?assertEqual([], [MFA || {M, _, _} = MFA <- MFAs, M =:= kprof_arming_late]),
        ?assert(maps:is_key(kprof_arming_late, Known)),
        {Known2, {Mods2, _}} = New(Known, false, false),
        ?assertNot(lists:member(kprof_arming_late, Mods2)), % once
        %% lists, as if loaded since: OTP's
        Lists = maps:remove(lists, Known2),
        {_, {LMods, LMFAs}} = New(Lists, false, false),
        ?assertNot(lists:member(lists, LMods)),
        ?assertEqual([], [MFA || {lists, _, _} = MFA <- LMFAs]),
        {_, {OMods, OMFAs}} = New(Lists, true, false),
        ?assertNot(lists:member(lists, OMods)),
        ?assert(lists:member({lists, foldl, 3}, OMFAs)),
        ?assertNot(lists:member({lists, reverse, 2}, OMFAs)), % a BIF
        {_, {BMods, _}} = New(Lists, true, true),
        ?assert(lists:member(lists, BMods)),
        %% kprof's own
        OwnMods = [kprof, kprof_rtrace_own, kprof_tracing],
        {_, {KMods, KMFAs}} = New(maps:without(OwnMods, Known2), true, true),
        ?assertEqual([], [M || M <- KMods, lists:member(M, OwnMods)]),
        ?assertEqual([], [MFA || {M, _, _} = MFA <- KMFAs, lists:member(M, OwnMods)])
    after
        code:purge(kprof_arming_late),
        code:delete(kprof_arming_late),
        code:purge(kprof_arming_late)
    end.
