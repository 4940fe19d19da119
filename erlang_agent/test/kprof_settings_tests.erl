%%% @doc EUnit tests of the request-trace options' values (kprof_settings):
%%% every option against every kind of bad value (wrong type, negative,
%%% zero, huge, an atom where a number goes, ...), at the API
%%% (check_options/1), in the application environment (rtrace/0 leaves a
%%% bad value out so its default is used, problems/0 names it) and through
%%% kprof:trace_begin/1, which answers `{error, {bad_option, ...}}' before
%%% anything reaches the request-trace server.
%%%
%%% What each option takes is written here again, on its own (?TAKES), as
%%% docs/request-traces.md states it: the test holds kprof_settings to it.
-module(kprof_settings_tests).

-include_lib("eunit/include/eunit.hrl").

-define(HOUR, 3600000).
-define(TAKES,
        [{dir, text}, {max_duration_ms, {int, 1, 2 * ?HOUR}}, {max_events, {int, 1, 100000000}},
         {max_concurrent, {int, 1, 1000}}, {queue_size, {int, 1, 1000000}},
         {max_backlog_mb, {int, 1, 4096}}, {idle_ms, {int, 1, 24 * ?HOUR}},
         {linger_ms, {int, 0, 600000}}, {max_processes, {int, 0, 10000}},
         {slower_than_ms, {int, 0, ?HOUR}}, {bifs, boolean}, {otp_calls, boolean},
         {rate_limit, rate}, {collector, {one_of, [internal, external]}}, {allow, boolean},
         {header, header}, {name, any}]).

%% Values of every kind, each tried on every option.
catalogue() ->
    [-1, 0, 1, 2, 5000, -1.0, 0.0, 0.5, 1.5, 10000, 10000.5, 10000000000, 1 bsl 64,
     -(1 bsl 64), foo, true, false, internal, undefined, "", "x", "/tmp/t", "x-trace",
     "bad header", [$a | b], [1 bsl 30], <<>>, <<"x-trace-request">>, <<"/tmp/t">>,
     <<"a:b">>, [], #{}, {1}, self(), make_ref(), fun() -> ok end,
     lists:duplicate(5000, $a), binary:copy(<<"a">>, 5000)].

%% Each option's bounds and their neighbours, on top of the catalogue.
edges({int, Min, Max}) -> [Min - 1, Min, Max, Max + 1];
edges(rate) -> [0, 1.0e-9, 10000, 10000.000001];
edges(header) -> [lists:duplicate(256, $a), lists:duplicate(257, $a)];
edges(_) -> [].

%% Whether an option of kind `Kind' takes `V': the rules as docs state them.
ok_for({int, Min, Max}, V) -> is_integer(V) andalso V >= Min andalso V =< Max;
ok_for(boolean, V) -> V =:= true orelse V =:= false;
ok_for(rate, V) -> is_number(V) andalso V > 0 andalso V =< 10000;
ok_for({one_of, Vs}, V) -> lists:member(V, Vs);
ok_for(text, V) when is_binary(V) -> V =/= <<>> andalso byte_size(V) =< 4096;
ok_for(text, V) when is_list(V) ->
    V =/= [] andalso proper(V) andalso length(V) =< 4096 andalso io_lib:char_list(V);
ok_for(header, V) when is_binary(V) -> ok_for(header, binary_to_list(V));
ok_for(header, V) when is_list(V) ->
    V =/= [] andalso proper(V) andalso length(V) =< 256 andalso
        lists:all(fun(C) -> is_integer(C) andalso
                                (lists:member(C, "!#$%&'*+-.^_`|~") orelse
                                 (C >= $a andalso C =< $z) orelse (C >= $A andalso C =< $Z)
                                 orelse (C >= $0 andalso C =< $9)) end, V);
ok_for(any, V) -> erlang:external_size(V) =< 1024;
ok_for(_, _) -> false.

proper(L) ->
    try length(L) of _ -> true catch error:badarg -> false end.

every_option_is_tested_test() ->
    ?assertEqual(lists:sort([K || {K, _} <- ?TAKES]), lists:sort(kprof_settings:rtrace_keys())),
    %% and every option a trace takes (kprof_rtrace:defaults/0) is one
    [?assert(lists:keymember(K, 1, ?TAKES)) || K <- maps:keys(kprof_rtrace:defaults())].

every_value_of_every_option_test() ->
    [begin
         Expected = ok_for(Kind, V),
         case kprof_settings:check_options(#{Key => V}) of
             ok ->
                 ?assert(Expected, {Key, V, "taken but bad"});
             {error, {bad_option, Key, V, Takes}} ->
                 ?assertNot(Expected, {Key, V, "refused but good"}),
                 ?assert(is_list(Takes) andalso length(Takes) > 5 andalso io_lib:printable_list(Takes))
         end
     end
     || {Key, Kind} <- ?TAKES, V <- catalogue() ++ edges(Kind)].

the_defaults_are_taken_test() ->
    ?assertEqual(ok, kprof_settings:check_options(kprof_rtrace:defaults())).

first_bad_option_named_test() ->
    ?assertMatch({error, {bad_option, max_duration_ms, foo, _}},
                 kprof_settings:check_options(#{max_events => 5, max_duration_ms => foo,
                                                slower_than_ms => -1})),
    ?assertMatch({error, {bad_option, max_duraton_ms, 5, "no such option; did you mean max_duration_ms?"}},
                 kprof_settings:check_options(#{max_duraton_ms => 5})),
    ?assertMatch({error, {bad_option, options, [], _}}, kprof_settings:check_options([])).

%% The application environment: a bad value is left out (its default is
%% used) and named once in the problems; good values pass through.
environment_test_() ->
    {setup,
     fun() ->
             application:load(kprof),
             Old = application:get_env(kprof, rtrace),
             ok = application:set_env(kprof, rtrace,
                                      #{max_duration_ms => 10000000000, max_events => 500,
                                        allow => yes, dir => "/tmp/t"}),
             Old
     end,
     fun({ok, Old}) -> application:set_env(kprof, rtrace, Old);
        (undefined) -> application:unset_env(kprof, rtrace)
     end,
     fun(_) ->
             [?_assertEqual(#{max_events => 500, dir => "/tmp/t"}, kprof_settings:rtrace()),
              ?_assertEqual(
                 ["the rtrace setting allow is yes, but it takes true or false: the default is used",
                  "the rtrace setting max_duration_ms is 10000000000, but it takes milliseconds, "
                  "an integer from 1 to 7200000 (two hours): the default is used"],
                 kprof_settings:problems())]
     end}.

%% The API: trace_begin/1 refuses a bad option before any server is asked
%% (none runs here); trace_request/2 runs the request untraced and warns,
%% at most once a minute.
api_test() ->
    ?assertEqual({error, {bad_option, max_duration_ms, 10000000000,
                          "milliseconds, an integer from 1 to 7200000 (two hours)"}},
                 kprof:trace_begin(#{max_duration_ms => 10000000000})),
    ?assertMatch({error, {bad_option, max_events, "1000", _}},
                 kprof:trace_begin(#{max_events => "1000"})),
    ?assertEqual(undefined, whereis(kprof_rtrace)),
    ?assertEqual(42, kprof:trace_request(#{max_concurrent => 0}, fun() -> 42 end)),
    Warned = wait_registered(kprof_settings_warned, 50),
    ?assert(is_pid(Warned)),
    ?assertEqual(7, kprof:trace_request(#{idle_ms => -5}, fun() -> 7 end)),
    timer:sleep(50),
    ?assertEqual(Warned, whereis(kprof_settings_warned)), % the same minute: no second one
    exit(Warned, kill).

wait_registered(Name, 0) -> whereis(Name);
wait_registered(Name, N) ->
    case whereis(Name) of
        undefined -> timer:sleep(10), wait_registered(Name, N - 1);
        Pid -> Pid
    end.
