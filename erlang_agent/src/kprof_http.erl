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
%%%
%%% Single-request traces on demand: `maybe_trace/2' traces a request that
%%% carries the header `x-trace-request: true' (or `1'; another name with
%%% `{kprof, rtrace, #{header => Name}}'), only when the application
%%% environment allows it (`#{allow => true}'; default: off) and at most
%%% `rate_limit' times a second (default 1). Requests past the limit run
%%% untraced. `x-trace-request: slower-than=50ms' (or `2s')
%%% traces the request and keeps its trace only when it took that long, as
%%% the setting `slower_than_ms' does for every traced request.
-module(kprof_http).

-export([mark/3, identity/2, maybe_trace/2, trace_requested/1]).

%% A request's headers: inets' list of {Name, Value}, or cowboy's map of
%% lowercase name to value.
-type headers() :: [{iodata(), iodata()}] | #{binary() => iodata()}.
-export_type([headers/0]).

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

%% @doc Runs `Fun' as a single-request trace when `Headers' ask for one and
%% the settings allow it, else untraced; returns its result. `Fun' of arity
%% 1 gets the trace id (a binary, for a response header) or `undefined'.
%% Headers: a list of `{Name, Value}' (strings or binaries, any case) or a
%% map with lowercase binary names (as cowboy gives them).
-spec maybe_trace(headers(), fun(() -> R) | fun((binary() | undefined) -> R)) -> R.
maybe_trace(Headers, Fun) ->
    case requested(Headers) of
        false ->
            call(Fun, undefined);
        Options ->
            case kprof:trace_begin(Options) of
                {ok, Id} -> try call(Fun, Id) after kprof:trace_end() end;
                {error, _} -> call(Fun, undefined)
            end
    end.

call(Fun, _) when is_function(Fun, 0) -> Fun();
call(Fun, Id) when is_function(Fun, 1) -> Fun(Id).

%% @doc Whether `Headers' ask for a trace and the settings allow them to
%% (the rate limit is kprof_rtrace's).
-spec trace_requested(headers()) -> boolean().
trace_requested(Headers) ->
    requested(Headers) =/= false.

%% The trace options the headers ask for, rate-limited, or false. The
%% settings are read once here: every request pays for the read.
requested(Headers) ->
    Settings = kprof_settings:rtrace(),
    case maps:get(allow, Settings, false) =:= true
        andalso asks(Headers, maps:get(header, Settings, "x-trace-request")) of
        false -> false;
        Options -> Options#{rate_limit => maps:get(rate_limit, Settings, 1)}
    end.

asks(Headers, Name) ->
    Wanted = string:lowercase(iolist_to_binary(Name)),
    Value = case Headers of
                #{} -> maps:get(Wanted, Headers, undefined);
                _ -> find(Headers, Wanted)
            end,
    case Value of
        undefined -> false;
        V -> options(string:lowercase(string:trim(iolist_to_binary(V))))
    end.

%% A header's value: `true', `1' or `slower-than=Duration' (a bad duration
%% asks for nothing). No binary matching: the agent loads on OTP 25 to 29
%% (tests/support/agent_portable.escript).
options(V) ->
    case lists:member(V, [<<"true">>, <<"1">>]) of
        true -> #{};
        false when byte_size(V) =< 32 ->
            case binary:split(V, <<"=">>) of
                [Key, D] when Key =:= <<"slower-than">> -> slower_than(string:to_integer(D));
                _ -> false
            end;
        false -> false
    end.

slower_than({N, Unit}) when is_integer(N), N > 0, Unit =:= <<"ms">> -> #{slower_than_ms => N};
slower_than({N, Unit}) when is_integer(N), N > 0, Unit =:= <<"s">> -> #{slower_than_ms => N * 1000};
slower_than(_) -> false.

find([], _) -> undefined;
find([{N, V} | Rest], Wanted) ->
    case string:lowercase(iolist_to_binary(N)) of
        Wanted -> V;
        _ -> find(Rest, Wanted)
    end;
find([_ | Rest], Wanted) -> find(Rest, Wanted).
