%%% @doc Marking HTTP requests for tier tracing, whatever the server.
%%%
%%% `mark/3' runs a request handler as one traced request whose identity is
%%% the method and the first segment of the path (`<<"GET /users">>' for
%%% `GET /users/7?x=1'), so requests group by kind without one group per URL.
%%% Another grouping: set the application environment `{kprof,
%%% http_identity, {Module, Function}}' to a function of (Method, Path)
%%% returning the identity. The server integrations use it:
%%% <ul>
%%% <li>inets httpd: `kprof_httpd' first in the `modules' list;</li>
%%% <li>cowboy: `kprof_cowboy' as the last middleware.</li>
%%% </ul>
%%% Outside a tracing session this costs one `persistent_term' read.
-module(kprof_http).

-export([mark/3, identity/2]).

-define(MAX_SEGMENT, 64).

%% @doc Runs `Fun' as one traced request of `Method' on `Path' (strings or
%% binaries) and returns its result.
-spec mark(iodata() | atom(), iodata(), fun(() -> Result)) -> Result.
mark(Method, Path, Fun) ->
    case persistent_term:get({kprof_tiers, settings}, undefined) of
        undefined -> Fun();
        _ -> kprof:do_apply(erlang, apply, [Fun, []], identity_of(Method, Path))
    end.

identity_of(Method, Path) ->
    case application:get_env(kprof, http_identity) of
        {ok, {M, F}} -> try M:F(Method, Path) catch _:_ -> undefined end;
        _ -> identity(Method, Path)
    end.

%% @doc The default identity: `<<"METHOD /first-segment">>'.
-spec identity(iodata() | atom(), iodata()) -> binary().
identity(Method, Path) ->
    M = if is_atom(Method) -> atom_to_binary(Method);
           true -> iolist_to_binary(Method)
        end,
    Segment = case binary:split(iolist_to_binary(Path), [<<"/">>, <<"?">>], [global]) of
                  [<<>>, First | _] -> First;
                  [First | _] -> First
              end,
    <<M/binary, " /", (binary:part(Segment, 0, min(byte_size(Segment), ?MAX_SEGMENT)))/binary>>.
