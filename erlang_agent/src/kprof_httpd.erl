%%% @doc inets httpd integration: put `kprof_httpd' first in the server's
%%% `modules' list, e.g.
%%% `{modules, [kprof_httpd, mod_alias, mod_esi, mod_get, mod_log]}',
%%% and each request becomes one traced request for tier tracing (identity
%%% from kprof_http: method and first path segment).
%%%
%%% inets calls its modules one after the other and offers no hook around
%%% them, so this module runs the modules that follow it itself, inside the
%%% traced request, with inets' own rules (`proceed' goes on, `break' and
%%% `done' stop), and returns `{break, Data}' or `done' so that inets does
%%% not run them again. The request is timed from the first module to the
%%% last; sending the response comes after.
-module(kprof_httpd).

-include_lib("inets/include/httpd.hrl").

-export([do/1]).

%% @doc The inets module callback.
-spec do(#mod{}) -> {proceed, list()} | {break, list()} | done.
do(ModData = #mod{config_db = ConfigDB, method = Method, request_uri = Uri}) ->
    Modules = httpd_util:lookup(ConfigDB, modules, []),
    case lists:dropwhile(fun(M) -> M =/= ?MODULE end, Modules) of
        [?MODULE | Rest] ->
            kprof_http:mark(Method, Uri, fun() -> run(ModData, Rest) end);
        _ ->
            {proceed, ModData#mod.data}
    end.

run(ModData, []) ->
    {break, ModData#mod.data};
run(ModData, [Module | Rest]) ->
    case Module:do(ModData) of
        {proceed, Data} -> run(ModData#mod{data = Data}, Rest);
        {break, Data} -> {break, Data};
        done -> done
    end.
