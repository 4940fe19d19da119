%%% @doc A cowboy middleware (no compile-time dependency on cowboy) that
%%% makes each request one traced request for tier tracing, identity from
%%% kprof_http (method and first path segment).
%%%
%%% Use it in place of `cowboy_handler', which it calls itself so that the
%%% handler runs inside the traced request (and, for a request with
%%% `x-trace-request: true' when request tracing is allowed, inside a
%%% single-request trace whose id the response carries as
%%% `x-kprof-trace-id'): `#{middlewares => [cowboy_router, kprof_cowboy]}'. Another next
%%% middleware can be named in the environment: `#{kprof_next => Module}'.
-module(kprof_cowboy).

-export([execute/2]).

%% @doc The cowboy middleware callback.
-spec execute(Req, Env) -> {ok, Req, Env} | {suspend, module(), atom(), [term()]} | {stop, Req}
              when Req :: #{method => binary(), path => binary(),
                            headers => #{binary() => binary()}, _ => _},
                   Env :: #{kprof_next => module(), _ => _}.
execute(Req, Env) ->
    Next = maps:get(kprof_next, Env, cowboy_handler),
    kprof_http:maybe_trace(
      maps:get(headers, Req, #{}),
      fun(Id) ->
              Req1 = case Id of
                         undefined -> Req;
                         _ -> cowboy_req:set_resp_header(<<"x-kprof-trace-id">>, Id, Req)
                     end,
              kprof_http:mark(maps:get(method, Req, <<"?">>), maps:get(path, Req, <<"/">>),
                              fun() -> Next:execute(Req1, Env) end)
      end).
