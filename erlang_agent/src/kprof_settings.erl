%%% @doc kprof's application environment, read in one place, so that a
%%% setting a user wrote is never ignored in silence.
%%%
%%% The keys kprof reads are listed here (?KEYS, and the keys of the
%%% `rtrace' map, ?RTRACE_VALUES). A key that was renamed is still read
%%% under its old name (?RENAMED), and check/0 says so with the new name;
%%% an unknown key is named by check/0 with the nearest known one. check/0
%%% runs once when the kprof application starts (kprof_app), that is when
%%% the node boots with kprof in its release: one warning per key in the
%%% node's log, never one per request.
%%%
%%% Values are checked too, here and only here (option/2, ?RTRACE_VALUES):
%%% a value of the application environment that is not what its key takes
%%% is named by check/0 and left out of rtrace/0, so the default is used;
%%% the options of a call are checked by check_options/1, whose error names
%%% the option and what it takes. A bad value never reaches the
%%% request-trace server, where it could stop the traces running (as a
%%% `max_duration_ms' beyond erlang:send_after/3's range once did).
-module(kprof_settings).

-export([rtrace/0, check/0, problems/0, nearest/2, check_options/1, option/2, warn/1,
         rtrace_keys/0]).

%% Top-level keys of {kprof, Key, Value}.
-define(KEYS, [rtrace, executable, http_identity]).
%% {Old, New}: read as New when New is not set.
-define(RENAMED, [{request_trace, rtrace}]).
%% What each key of the rtrace map takes: {Key, Kind, Text}, Text what
%% an error says it takes. The bounds keep every value within what its
%% user can take (timers, the collector's counters) and what a trace
%% needs: an hour is `kprof trace --duration's bound (and --slower-than's),
%% which gives its trace a second more.
-define(HOUR_MS, 3600000).
-define(RTRACE_VALUES,
        [{dir, text, "a directory: a non-empty string or binary"},
         {max_duration_ms, {int, 1, 2 * ?HOUR_MS}, "milliseconds, an integer from 1 to 7200000 (two hours)"},
         {max_events, {int, 1, 100000000}, "an integer from 1 to 100000000"},
         {max_concurrent, {int, 1, 1000}, "an integer from 1 to 1000"},
         {queue_size, {int, 1, 1000000}, "an integer from 1 to 1000000"},
         {max_backlog_mb, {int, 1, 4096}, "megabytes, an integer from 1 to 4096"},
         {idle_ms, {int, 1, 24 * ?HOUR_MS}, "milliseconds, an integer from 1 to 86400000 (a day)"},
         {linger_ms, {int, 0, 600000}, "milliseconds, an integer from 0 to 600000 (ten minutes)"},
         {max_processes, {int, 0, 10000}, "an integer from 0 to 10000"},
         {slower_than_ms, {int, 0, ?HOUR_MS}, "milliseconds, an integer from 0 to 3600000 (an hour)"},
         {bifs, boolean, "true or false"},
         {otp_calls, boolean, "true or false"},
         {rate_limit, rate, "traces a second, a number above 0 and at most 10000"},
         {collector, {one_of, [internal, external]}, "internal or external"},
         {allow, boolean, "true or false"},
         {header, header, "an HTTP header name: a string or binary of 1 to 256 token characters"},
         {name, name, "any term of at most 1024 bytes in the external format"}]).
%% Key names are compared on their first characters only: work stays
%% bounded whatever a user wrote.
-define(MAX_NAME, 64).

%% @doc The keys of the rtrace map: kprof_rtrace:settings() and what
%% kprof_http reads (allow, header, rate_limit).
-spec rtrace_keys() -> [atom()].
rtrace_keys() -> [K || {K, _, _} <- ?RTRACE_VALUES].

%% @doc The request-trace settings map: `{kprof, rtrace, Map}', else the
%% same under the key's old name (`request_trace'), else `#{}'; without
%% the keys whose value is not what they take (check/0 names those once),
%% so that their default is used. Costs one or two
%% application:get_env/2 reads and a check of each key set: requests call
%% it.
-spec rtrace() -> map().
rtrace() ->
    maps:filter(fun(K, V) -> option(K, V) =:= ok end, rtrace_env()).

rtrace_env() ->
    case application:get_env(kprof, rtrace) of
        {ok, Map} when is_map(Map) -> Map;
        {ok, _} -> #{};
        undefined ->
            case application:get_env(kprof, request_trace) of
                {ok, Map} when is_map(Map) -> Map;
                _ -> #{}
            end
    end.

%% @doc Checks the options of a request-trace call (kprof:trace_begin/1,
%% kprof_rtrace:begin_trace/2): `ok', or the first bad one (in key order)
%% as `{error, {bad_option, Key, Value, Takes}}', Takes saying in words
%% what the key takes. An unknown key is bad too: a misspelt bound must
%% not go unnoticed.
-spec check_options(term()) -> ok | {error, {bad_option, term(), term(), string()}}.
check_options(Options) when is_map(Options) ->
    check_each(lists:sort(maps:to_list(Options)));
check_options(Options) ->
    {error, {bad_option, options, Options, "a map of options"}}.

check_each([]) ->
    ok;
check_each([{K, V} | Rest]) ->
    case option(K, V) of
        ok -> check_each(Rest);
        {error, Takes} -> {error, {bad_option, K, V, Takes}}
    end.

%% While this name is registered, a bad option was said less than a minute
%% ago: warn/1 stays quiet.
-define(WARNED, kprof_settings_warned).
-define(WARN_EVERY_MS, 60000).

%% @doc Logs a bad option of a call (check_options/1's reason) as a
%% warning, at most once a minute on this node: code that passes one does
%% so on every request. What holds the minute is a registered process that
%% waits it out, so nothing is left in the node after it.
-spec warn({bad_option, term(), term(), string()}) -> ok.
warn({bad_option, Key, Value, Takes}) ->
    case whereis(?WARNED) of
        undefined ->
            _ = spawn(fun() -> warn_once(Key, Value, Takes) end),
            ok;
        _ ->
            ok
    end.

warn_once(Key, Value, Takes) ->
    try register(?WARNED, self()) of
        true ->
            logger:warning("kprof: a request trace was not begun: the option ~p is ~0P, but it "
                           "takes ~ts", [Key, Value, 8, Takes]),
            receive after ?WARN_EVERY_MS -> ok end
    catch error:badarg ->
        ok % another caller's warning was first
    end.

%% @doc Whether `Value' is what the rtrace key `Key' takes: `ok', else
%% `{error, Takes}' with what it takes in words (for an unknown key, the
%% key meant or the known keys).
-spec option(term(), term()) -> ok | {error, string()}.
option(Key, Value) ->
    case lists:keyfind(Key, 1, ?RTRACE_VALUES) of
        {_, Kind, Takes} ->
            case takes(Kind, Value) of
                true -> ok;
                false -> {error, Takes}
            end;
        false ->
            {error, case nearest(Key, rtrace_keys()) of
                        {ok, Near} -> fmt("no such option; did you mean ~p?", [Near]);
                        none -> fmt("no such option; the options are ~0p", [rtrace_keys()])
                    end}
    end.

takes({int, Min, Max}, V) -> is_integer(V) andalso V >= Min andalso V =< Max;
takes(boolean, V) -> is_boolean(V);
takes({one_of, Values}, V) -> lists:member(V, Values);
takes(rate, V) -> is_number(V) andalso V > 0 andalso V =< 10000;
takes(text, V) when is_binary(V) -> byte_size(V) > 0 andalso byte_size(V) =< 4096;
takes(text, V) when is_list(V) -> V =/= [] andalso length_at_most(V, 4096) andalso
                                      io_lib:char_list(V);
takes(header, V) when is_binary(V) -> takes(header, binary_to_list(V));
takes(header, V) when is_list(V) -> V =/= [] andalso length_at_most(V, 256) andalso
                                        lists:all(fun token_char/1, V);
takes(name, V) -> erlang:external_size(V) =< 1024;
takes(_, _) -> false.

%% A proper list of at most N elements, found in at most N steps.
length_at_most([], _) -> true;
length_at_most([_ | T], N) when N > 0 -> length_at_most(T, N - 1);
length_at_most(_, _) -> false.

%% RFC 9110's tchar.
token_char(C) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> true;
token_char(C) -> lists:member(C, "!#$%&'*+-.^_`|~").

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
            lists:append([rtrace_problem(K, V) || {K, V} <- lists:sort(maps:to_list(Map))]);
        _ ->
            [fmt("the rtrace setting is ~0p, not a map: it is ignored, and request traces "
                 "run with their defaults", [Map])]
    end.

rtrace_problem(K, V) ->
    case lists:member(K, rtrace_keys()) of
        false ->
            [unknown(K, "the rtrace settings", rtrace_keys())];
        true ->
            case option(K, V) of
                ok -> [];
                {error, Takes} ->
                    [fmt("the rtrace setting ~p is ~0P, but it takes ~ts: the default is used",
                         [K, V, 8, Takes])]
            end
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
