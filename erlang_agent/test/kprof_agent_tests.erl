%%% @doc EUnit tests of the agent's identity functions.
-module(kprof_agent_tests).

-include_lib("eunit/include/eunit.hrl").

version_is_a_dotted_version_test() ->
    V = kprof_agent:version(),
    ?assertMatch([_, _, _], string:split(V, ".", all)),
    [?assert(lists:all(fun(C) -> C >= $0 andalso C =< $9 end, P))
     || P <- string:split(V, ".", all)].

modules_are_loadable_test() ->
    [?assertMatch({module, M}, code:ensure_loaded(M)) || M <- kprof_agent:modules()].

version_matches_app_file_test() ->
    ok = application:load(kprof),
    {ok, Vsn} = application:get_key(kprof, vsn),
    ?assertEqual(kprof_agent:version(), Vsn).
