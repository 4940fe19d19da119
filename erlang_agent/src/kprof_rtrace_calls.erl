%%% @doc Which calls `kprof trace --mfa' traces, and what the call's match
%%% spec does: the meta pattern kprof_rtrace sets on the function.
%%%
%%% A call the selection takes gets the trace flags (its process is traced
%%% from the call on) and a `return_trace', whose `return_from' ends its
%%% trace. Through the tracer NIF, the call's match spec also gives the
%%% begin mark, {kprof_rtrace_call, Id, Bounds} (the NIF makes it a mark as
%%% kprof_rtrace_mark's pattern gives), and, when the request is followed,
%%% labels the process's seq_trace token with its own pid, sets the token's
%%% `receive' flag and adds the `send' flag: the request's messages are
%%% then followed as those of kprof:trace_request/1 are (kprof_rtrace_follow's
%%% follow_spec/3). A match spec cannot build the {kprof, N} label of those
%%% (a tuple built there does not survive the token's travel): the NIF makes
%%% N of the pid.
%%%
%%% A process that made a followed call often holds a token still when it
%%% makes the next: the replies it took in carried the request's. That token
%%% is kprof's and is labelled anew. A user's token is not touched: when
%%% some process of the node holds one as calls begin to be traced
%%% (user_tokens/0), a call whose process holds any token is traced in its
%%% own process only (a match spec cannot read a token's label).
%%% Through the trace port (no NIF) there is no mark: the collector starts
%%% a trace at the call's meta event, and nothing is followed.
%%%
%%% In kprof_rtrace's server, trace/3 arms the patterns for `--mfa' and sets
%%% the meta pattern (once the BIFs' patterns are off: kprof_rtrace_arming),
%%% and stop/2 removes it. The calls' traces are the collector's: it counts
%%% the calls, and the server holds none of them.
-module(kprof_rtrace_calls).

-export([selection/2, spec/4, user_tokens/0]).
%% in kprof_rtrace's server
-export([trace/3, stop/2]).

-include("kprof_rtrace.hrl").

%% Heads and guards of a match spec: the calls taken.
-type selection() :: [{'_' | [term()], [term()]}].
-export_type([selection/0]).

-define(MAX_TEXT, 4096).

%% @doc The calls `--match' `Text' takes, for a function of `Arity'
%% arguments: every call for empty text; a match head on the arguments as
%% dbg:tp/2 takes it (`[{'basic.publish', '_', '_'}, '_']'); or a fun as
%% dbg:fun2ms/1 takes it (`fun([P, _]) when element(1, P) =:= x -> true
%% end'), whose heads and guards are used, not its bodies. A record is
%% written as its tuple (the node's record definitions are not known here).
-spec selection(unicode:chardata(), arity()) -> {ok, selection()} | {error, string()}.
selection(Text0, Arity) ->
    Text = string:trim(unicode:characters_to_list(Text0)),
    case Text of
        "" -> {ok, [{'_', []}]};
        _ when length(Text) > ?MAX_TEXT -> {error, "--match: longer than 4096 characters"};
        "fun" ++ _ -> from_fun(Text, Arity);
        _ -> from_head(Text, Arity)
    end.

from_head(Text, Arity) ->
    case parse(Text, fun erl_parse:parse_term/1) of
        {ok, Head} when is_list(Head), length(Head) =:= Arity ->
            {ok, [{Head, []}]};
        {ok, Head} when is_list(Head) ->
            {error, lists:flatten(io_lib:format("--match: the head has ~b element(s); the "
                                                "function takes ~b argument(s)",
                                                [length(Head), Arity]))};
        {ok, _} ->
            {error, "--match: a head is a list with one element per argument, e.g. "
                    "['_', {'basic.publish', '_', '_'}]"};
        {error, _} = E ->
            E
    end.

from_fun(Text, Arity) ->
    case parse(Text, fun erl_parse:parse_exprs/1) of
        {ok, [{'fun', _, {clauses, Clauses}}]} ->
            case ms_transform:transform_from_shell(dbg, Clauses, []) of
                MS when is_list(MS) ->
                    Taken = [{H, G} || {H, G, _} <- MS],
                    case [H || {H, _} <- Taken, not is_list(H) orelse length(H) =/= Arity] of
                        [] -> {ok, Taken};
                        _ -> {error, lists:flatten(io_lib:format(
                                        "--match: the fun's head must be a list of ~b "
                                        "arguments, e.g. fun([A, _]) when ... -> true end",
                                        [Arity]))}
                    end;
                {error, [{_, [{_, Mod, Why} | _]} | _], _} ->
                    {error, "--match: " ++ lists:flatten(Mod:format_error(Why))};
                _ ->
                    {error, "--match: not a fun dbg:fun2ms/1 takes"}
            end;
        {ok, _} ->
            {error, "--match: one fun, e.g. fun([A, _]) when is_integer(A) -> true end"};
        {error, _} = E ->
            E
    end.

parse(Text, Parser) ->
    case string:find(Text, "#") =/= nomatch andalso parse1(Text, Parser) of
        {error, _} ->
            {error, "--match: records are not known here; write a record as its tuple, "
                    "e.g. {rec, '_', '_'}"};
        _ ->
            parse1(Text, Parser)
    end.

parse1(Text, Parser) ->
    case erl_scan:string(Text ++ ".") of
        {ok, Tokens, _} ->
            case Parser(Tokens) of
                {ok, _} = Ok -> Ok;
                {error, {_, Mod, Why}} -> {error, "--match: " ++ lists:flatten(Mod:format_error(Why))}
            end;
        {error, {_, Mod, Why}, _} ->
            {error, "--match: " ++ lists:flatten(Mod:format_error(Why))}
    end.

%% @doc Whether a process of this node holds a seq_trace token that is not
%% one of kprof's (kprof_tiers:clear_tokens/0 says which are).
-spec user_tokens() -> boolean().
user_tokens() ->
    lists:any(fun(P) ->
                      case process_info(P, sequential_trace_token) of
                          {sequential_trace_token, T} when T =/= [] ->
                              not kprof_tiers:kprof_token(T);
                          _ -> false
                      end
              end, erlang:processes()).

%% @doc The meta pattern's match spec: for each head and guard of
%% `Selection', calls not made by the `Excluded' processes (traced by
%% another tracer: `trace' would take them from it) get the trace `Flags'
%% (kprof_tracing:action_flags/2). `How': `port' (no mark, not followed),
%% `alone' (a mark, not followed), `follow' (a token is labelled anew) or
%% `follow_unlabelled' (a process that holds a token is not followed: some
%% are a user's). `Bounds' go into the mark.
-spec spec(selection(), [term()], [pid()],
           {port | alone | follow | follow_unlabelled, #{atom() => term()}}) -> [tuple()].
spec(Selection, Flags, Excluded, {How, Bounds}) ->
    Mark = {message, {const, {kprof_rtrace_call, <<"call">>, Bounds}}},
    Followed = {message, {const, {kprof_rtrace_call, <<"call">>, Bounds#{follow => true}}}},
    Not = [{'=/=', {self}, P} || P <- Excluded],
    lists:append(
      [case How of
           port ->
               [{Head, Guards ++ Not, [{trace, [], Flags}, {return_trace}]}];
           alone ->
               [{Head, Guards ++ Not, [{trace, [], Flags}, Mark, {return_trace}]}];
           follow ->
               [{Head, Guards ++ Not, follow_body(Flags, Followed)}];
           follow_unlabelled ->
               [{Head, Guards ++ [{'not', {is_seq_trace}} | Not], follow_body(Flags, Followed)},
                {Head, Guards ++ Not, [{trace, [], Flags}, Mark, {return_trace}]}]
       end || {Head, Guards} <- Selection]).

follow_body(Flags, Followed) ->
    [{trace, [], Flags ++ [send]}, {set_seq_token, label, {self}},
     {set_seq_token, 'receive', true}, Followed, {return_trace}].

%%% ---------------------------------------------------------------------
%%% In kprof_rtrace's server

%% @doc kprof_rtrace:trace_calls/2: from now on, calls of `MFA' that the
%% selection of `Options' takes begin traces (see the module's doc). The
%% reply (`{later, Reply}': once the BIFs' patterns are off) and the state.
-spec trace(mfa(), #{atom() => term()}, #state{}) -> {term(), #state{}}.
trace({M, F, A} = MFA, Options, S = #state{port = Port, session = Session}) ->
    Exists = case code:ensure_loaded(M) of
                 {module, M} -> lists:member({F, A}, erlang:get_module_info(M, functions));
                 _ -> no_module
             end,
    %% a meta pattern someone else set stays theirs; processes another
    %% tracer traces are excluded (the match spec's `trace' would take them
    %% from their tracer): both only in the shared session
    Foreign = kprof_rtrace_flags:foreign_processes(Session, Port),
    Selection = selection(maps:get(match, Options, <<>>), A),
    case {Exists, kprof_tracing:info(Session, MFA, meta), length(Foreign) > ?MAX_FOREIGN,
          Selection} of
        {no_module, _, _, _} ->
            {{error, {no_such_module, M}}, S};
        {false, _, _, _} ->
            {{error, {no_such_function, M, F, A}}, S};
        {true, {meta, Other}, _, _} when Other =/= false ->
            {{error, {already_meta_traced, MFA, Other}}, S};
        {true, _, true, _} ->
            {{error, {too_many_processes_traced_by_another_tracer, length(Foreign)}}, S};
        {true, _, false, {error, Why}} -> % the user's --match
            {{error, {usage, unicode:characters_to_binary(Why)}}, S};
        {true, _, false, {ok, Taken}} ->
            case arm_calls(kprof_rtrace_arming:arming_settings(Options, S)) of
                Why when is_list(Why) ->
                    {{error, Why}, S};
                S0 ->
                    S1 = kprof_rtrace_guard:tell_guard(S0#state{calls = [MFA | S0#state.calls]}),
                    Meta = meta_session(S1),
                    Follow = maps:get(follow, Options, true) =:= true,
                    How = calls_how(S1, Meta, Follow),
                    Bounds = maps:put(call, 1, maps:with([max_events, max_duration_ms,
                                                          max_processes], Options)),
                    Flags = kprof_tracing:action_flags(Meta, kprof_rtrace_flags:flags()),
                    Spec = spec(Taken, Flags, Foreign, {How, Bounds}),
                    %% the calls begin traces: once the BIFs are off
                    Followed = S1#state.calls_followed orelse
                        lists:member(How, [follow, follow_unlabelled]),
                    case kprof_rtrace_arming:busy(S1#state.arming) of
                        true ->
                            {{later, calls_reply(How, Follow)},
                             S1#state{calls_followed = Followed,
                                      arming = kprof_rtrace_arming:defer_meta(
                                                 Meta, MFA, Spec, S1#state.arming)}};
                        false ->
                            _ = kprof_tracing:function(Meta, MFA, Spec, [meta]),
                            {calls_reply(How, Follow), S1#state{calls_followed = Followed}}
                    end
            end
    end.

%% @doc kprof_rtrace:stop_calls/1: calls of `MFA' begin no more traces.
-spec stop(mfa(), #state{}) -> {ok, #state{}}.
stop(MFA, S0) ->
    S = S0#state{arming = kprof_rtrace_arming:drop_meta(MFA, S0#state.arming)},
    kprof_rtrace_guard:stop_meta(MFA, S#state.session, S#state.port),
    {ok, kprof_rtrace_arming:release_idle(
           kprof_rtrace_guard:tell_guard(S#state{calls = lists:delete(MFA, S#state.calls)}))}.

-define(THROUGH_PORT,
        "request traces run through the node's trace port; trace calls when they end").

%% Armed for `--mfa': through the NIF once it serves (a call's trace then
%% begins with a mark and may follow its messages), else through the trace
%% port (the collector starts a trace at the call's meta event, which
%% carries no time). kprof's own session has one tracer: an idle one that
%% is not the one wanted is replaced; a busy one makes `--mfa' wait. The
%% state, or why not.
arm_calls(S = #state{armed = false}) ->
    kprof_rtrace_arming:arm(S);
arm_calls(S = #state{session = Session}) ->
    case {kprof_tracing:shared(Session)
          orelse kprof_tracing:tracer(Session) =:= kprof_rtrace_arming:tracer(S),
          maps:size(S#state.traces), S#state.calls} of
        {true, _, _} -> kprof_rtrace_arming:arm(S);
        {false, 0, []} ->
            case kprof_rtrace_arming:settled(S) of
                {true, S1} ->
                    kprof_rtrace_arming:arm(
                      kprof_rtrace_arming:disarm(S1#state{linger = undefined}));
                {false, _} -> ?THROUGH_PORT
            end;
        _ -> ?THROUGH_PORT
    end.

%% The session of `--mfa''s meta pattern: in the shared session, one whose
%% tracer is the one new traces get; in kprof's own, that session.
meta_session(S = #state{session = Session}) ->
    case kprof_tracing:shared(Session) of
        true -> kprof_tracing:open(kprof_rtrace, kprof_rtrace_arming:tracer(S));
        false -> Session
    end.

%% How `--mfa''s calls are traced (see spec/4): marks need the NIF as the
%% meta tracer, following its send pattern too.
calls_how(S, Meta, Follow) ->
    case {kprof_tracing:tracer(Meta) =:= ?NIF, Follow andalso kprof_rtrace_follow:following(S)} of
        {false, _} -> port;
        {true, true} ->
            case user_tokens() of
                false -> follow;
                true -> follow_unlabelled
            end;
        {true, false} -> alone
    end.

calls_reply(alone, true) ->
    {ok, alone, "another tracer holds the node's send pattern or its system seq tracer"};
calls_reply(follow_unlabelled, _) ->
    {ok, follow, "not those of a process that holds a seq_trace token (this node's processes "
                 "hold some of another seq_trace user's)"};
calls_reply(How, _) ->
    {ok, How}.
