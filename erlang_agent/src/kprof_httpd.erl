%%% @doc inets httpd integration: put `kprof_httpd' first in the server's
%%% `modules' list, e.g.
%%% `{modules, [kprof_httpd, mod_alias, mod_esi, mod_get, mod_log]}',
%%% and each request becomes one traced request for tier tracing (identity
%%% from kprof_http: method and first path segment). A request with the
%%% header `x-trace-request: true' is traced whole (kprof_http:maybe_trace/2)
%%% when the application environment allows it; with `{customize,
%%% kprof_httpd}' too, its response carries `x-kprof-trace-id'.
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
%% httpd_custom callbacks
-export([response_default_headers/0, response_header/1, request_header/1]).

-define(TRACE_ID, kprof_httpd_trace_id).

%% @doc The inets module callback.
-spec do(#mod{}) -> {proceed, list()} | {break, list()} | done.
do(ModData = #mod{config_db = ConfigDB, method = Method, request_uri = Uri,
                  parsed_header = Headers}) ->
    erase(?TRACE_ID), % of the previous request on this connection
    Modules = httpd_util:lookup(ConfigDB, modules, []),
    case lists:dropwhile(fun(M) -> M =/= ?MODULE end, Modules) of
        [?MODULE | Rest] ->
            kprof_http:maybe_trace(
              Headers,
              fun(Id) ->
                      Id =:= undefined orelse put(?TRACE_ID, Id),
                      kprof_http:mark(Method, Uri, fun() -> run(ModData, Rest) end)
              end);
        _ ->
            {proceed, ModData#mod.data}
    end.

%% @doc With `{customize, kprof_httpd}' in the server's configuration, a
%% traced request's response carries `x-kprof-trace-id'.
-spec response_default_headers() -> [{string(), string()}].
response_default_headers() ->
    case get(?TRACE_ID) of
        undefined -> [];
        Id -> [{"x-kprof-trace-id", binary_to_list(Id)}]
    end.

%% @doc httpd_custom: headers pass unchanged.
-spec response_header({string(), string()}) -> {true, {string(), string()}}.
response_header(Header) -> {true, Header}.

%% @doc httpd_custom: headers pass unchanged.
-spec request_header({string(), string()}) -> {true, {string(), string()}}.
request_header(Header) -> {true, Header}.

run(ModData, []) ->
    {break, ModData#mod.data};
run(ModData, [Module | Rest]) ->
    case Module:do(ModData) of
        {proceed, Data} -> run(ModData#mod{data = Data}, Rest);
        {break, Data} -> {break, Data};
        done -> done
    end.
