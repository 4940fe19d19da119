%%% @doc kprof's application environment, read in one place, so that a
%%% setting a user wrote is never ignored in silence.
%%%
%%% The keys kprof reads are listed here (?KEYS, and the keys of the
%%% `rtrace' map, ?RTRACE_KEYS). A key that was renamed is still read
%%% under its old name (?RENAMED), and check/0 says so with the new name;
%%% an unknown key is named by check/0 with the nearest known one. check/0
%%% runs once when the kprof application starts (kprof_app), that is when
%%% the node boots with kprof in its release: one warning per key in the
%%% node's log, never one per request.
-module(kprof_settings).

-export([rtrace/0, check/0, problems/0, nearest/2]).

%% Top-level keys of {kprof, Key, Value}.
-define(KEYS, [rtrace, executable, http_identity]).
%% {Old, New}: read as New when New is not set.
-define(RENAMED, [{request_trace, rtrace}]).
%% Keys of the rtrace map: kprof_rtrace:settings() and what kprof_http
%% reads (allow, header, rate_limit).
-define(RTRACE_KEYS, [dir, max_duration_ms, max_events, max_concurrent, queue_size,
                      max_backlog_mb, idle_ms, linger_ms, max_processes, bifs, otp_calls, rate_limit,
                      collector, allow, header, name, slower_than_ms]).
%% Key names are compared on their first characters only: work stays
%% bounded whatever a user wrote.
-define(MAX_NAME, 64).

%% @doc The request-trace settings map: `{kprof, rtrace, Map}', else the
%% same under the key's old name (`request_trace'), else `#{}'. Costs one
%% or two application:get_env/2 reads: requests call it.
-spec rtrace() -> map().
rtrace() ->
    case application:get_env(kprof, rtrace) of
        {ok, Map} when is_map(Map) -> Map;
        {ok, _} -> #{};
        undefined ->
            case application:get_env(kprof, request_trace) of
                {ok, Map} when is_map(Map) -> Map;
                _ -> #{}
            end
    end.

%% @doc Logs one warning for each problem of kprof's application
%% environment (problems/0). Returns how many.
-spec check() -> non_neg_integer().
check() ->
    Problems = problems(),
    [logger:warning("kprof: ~ts", [Text]) || Text <- Problems],
    length(Problems).

%% @doc What is wrong with kprof's application environment, one sentence
%% each: renamed keys (and which name is read), unknown keys with the
%% nearest known one, an rtrace setting that is no map, unknown keys of
%% the rtrace map.
-spec problems() -> [string()].
problems() ->
    Env = lists:sort(application:get_all_env(kprof)),
    Keys = [K || {K, _} <- Env],
    top(Env, Keys) ++ rtrace_problems(Env).

top(Env, Keys) ->
    lists:append([key_problem(K, Keys) || {K, _} <- Env]).

key_problem(Key, Keys) ->
    case lists:keyfind(Key, 1, ?RENAMED) of
        {Old, New} ->
            case lists:member(New, Keys) of
                true ->
                    [fmt("the setting ~p is now called ~p; both are set, and ~p is read, "
                         "~p ignored: remove ~p", [Old, New, New, Old, Old])];
                false ->
                    [fmt("the setting ~p is now called ~p; it is read as ~p this time: "
                         "rename it", [Old, New, New])]
            end;
        false ->
            case lists:member(Key, ?KEYS) orelse Key =:= included_applications of
                true -> [];
                false -> [unknown(Key, "kprof's application environment", ?KEYS)]
            end
    end.

rtrace_problems(Env) ->
    Map = case lists:keyfind(rtrace, 1, Env) of
              {rtrace, M} -> M;
              false -> proplists:get_value(request_trace, Env, #{})
          end,
    case Map of
        #{} ->
            [unknown(K, "the rtrace settings", ?RTRACE_KEYS)
             || K <- lists:sort(maps:keys(Map)), not lists:member(K, ?RTRACE_KEYS)];
        _ ->
            [fmt("the rtrace setting is ~0p, not a map: it is ignored, and request traces "
                 "run with their defaults", [Map])]
    end.

unknown(Key, Where, Known) ->
    case nearest(Key, Known) of
        {ok, Near} ->
            fmt("unknown key ~0p in ~ts, ignored; did you mean ~p?", [Key, Where, Near]);
        none ->
            fmt("unknown key ~0p in ~ts, ignored; the known keys are ~0p", [Key, Where, Known])
    end.

fmt(Format, Args) ->
    lists:flatten(io_lib:format(Format, Args)).

%% @doc The known key nearest to `Key' by edit distance on their names
%% (at most a third of the longer name's letters apart), or `none'.
-spec nearest(term(), [atom()]) -> {ok, atom()} | none.
nearest(Key, Known) ->
    Name = name(Key),
    Scored = lists:sort([{distance(Name, name(K)), K} || K <- Known]),
    case Scored of
        [{D, K} | _] ->
            case D * 3 =< max(length(Name), length(name(K))) of
                true -> {ok, K};
                false -> none
            end;
        [] ->
            none
    end.

name(Key) when is_atom(Key) -> lists:sublist(atom_to_list(Key), ?MAX_NAME);
name(Key) -> lists:sublist(lists:flatten(io_lib:format("~0p", [Key])), ?MAX_NAME).

%% Levenshtein distance, a row at a time.
distance(A, B) ->
    First = lists:seq(0, length(B)),
    lists:last(lists:foldl(fun(Ca, Prev = [P0 | _]) -> row(Ca, B, Prev, [P0 + 1]) end,
                           First, A)).

row(_, [], _, Acc) ->
    lists:reverse(Acc);
row(Ca, [Cb | Bs], [Diag, Up | Prev], Acc = [Left | _]) ->
    Cost = if Ca =:= Cb -> 0; true -> 1 end,
    row(Ca, Bs, [Up | Prev], [min(min(Left + 1, Up + 1), Diag + Cost) | Acc]).
