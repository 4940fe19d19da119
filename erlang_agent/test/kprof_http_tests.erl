%%% @doc EUnit tests of the HTTP integrations of tier tracing: the default
%%% identity, and that kprof_httpd and kprof_cowboy run what follows them
%%% (inets' module rules, cowboy's next middleware) and return its result.
%%% The traced path is tested against a real inets httpd in
%%% tests/integration/tiers.
-module(kprof_http_tests).

-include_lib("eunit/include/eunit.hrl").
-include_lib("inets/include/httpd.hrl").

-export([execute/2, do/1]).

identity_test_() ->
    [?_assertEqual(<<"GET /users">>, kprof_http:identity(<<"GET">>, <<"/users/7?x=1">>)),
     ?_assertEqual(<<"POST /">>, kprof_http:identity('POST', "/")),
     ?_assertEqual(<<"GET /a">>, kprof_http:identity("GET", "/a?b=/c")),
     ?_assertEqual(<<"GET /search">>, kprof_http:identity("GET", "search")),
     ?_assertEqual(3 + 2 + 64, byte_size(kprof_http:identity("GET", [$/ | lists:duplicate(500, $x)])))].

%% the header's values: `true', `1', `slower-than=Duration' (ms or s)
trace_requested_test() ->
    Old = application:get_env(kprof, rtrace),
    application:set_env(kprof, rtrace, #{allow => true}),
    Asks = fun(V) -> kprof_http:trace_requested([{"X-Trace-Request", V}]) end,
    try
        ?assertEqual([true, true, true, true, true],
                     [Asks(V) || V <- ["true", " 1", "slower-than=50ms", "Slower-Than=2s",
                                       <<"slower-than=1ms">>]]),
        ?assertEqual([false, false, false, false, false],
                     [Asks(V) || V <- ["no", "slower-than=x", "slower-than=5m",
                                       "slower-than=0ms", "slower-than"]]),
        ?assertNot(kprof_http:trace_requested([{"other", "true"}]))
    after
        case Old of
            {ok, V} -> application:set_env(kprof, rtrace, V);
            undefined -> application:unset_env(kprof, rtrace)
        end
    end.

mark_without_tracing_runs_the_fun_test() ->
    ?assertEqual(42, kprof_http:mark(<<"GET">>, <<"/">>, fun() -> 42 end)).

%% as a cowboy middleware that follows kprof_cowboy
-spec execute(map(), map()) -> {ok, map(), map()}.
execute(Req, Env) -> {ok, Req#{handled => true}, Env}.

cowboy_calls_the_next_middleware_test() ->
    Req = #{method => <<"GET">>, path => <<"/x">>},
    ?assertEqual({ok, Req#{handled => true}, #{kprof_next => ?MODULE}},
                 kprof_cowboy:execute(Req, #{kprof_next => ?MODULE})).

%% as inets modules after kprof_httpd: each adds its name to the data,
%% `stop' breaks
-spec do(#mod{}) -> {proceed, list()} | {break, list()}.
do(#mod{data = Data}) ->
    case proplists:get_value(stop, Data) of
        true -> {break, [{seen_break, true} | Data]};
        _ -> {proceed, [{seen, length(Data)} | Data]}
    end.

httpd_runs_the_modules_after_it_test() ->
    Db = ets:new(config, [set]),
    ets:insert(Db, {modules, [mod_alias, kprof_httpd, ?MODULE, ?MODULE]}),
    Mod = #mod{config_db = Db, method = "GET", request_uri = "/a", data = []},
    ?assertEqual({break, [{seen, 1}, {seen, 0}]}, kprof_httpd:do(Mod)),
    ?assertEqual({break, [{seen_break, true}, {stop, true}]},
                 kprof_httpd:do(Mod#mod{data = [{stop, true}]})),
    ets:delete(Db).
