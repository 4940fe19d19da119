%%% @doc The formatting layer of the key-value example (`kprof_kv').
%%%
%%% Pure: runs in the process that called `kprof_kv:request/1', after the
%%% handler answered (or the parser refused the request), and turns the
%%% result into the reply line:
%%% ```
%%% {ok, Value}      -> <<"VALUE ", Value/binary>>
%%% ok               -> <<"OK">>
%%% not_found        -> <<"NOT_FOUND">>
%%% {error, Reason}  -> <<"ERROR ", Reason/binary>>   (Reason as text)
%%% '''
%%% Anything else is `<<"ERROR internal">>'. Bounded: an error reason is
%%% printed at most ?MAX_REASON bytes long.
-module(kprof_kv_formatter).

-export([format/1]).

-define(MAX_REASON, 80).

%% @doc Formats a result as the reply line (tier entry point of the
%% formatting layer, stable arity 1). Spends the `formatter' delay of
%% `kprof_kv:set_delay/2'. Never fails.
-spec format(kprof_kv_handler:result() | {error, kprof_kv_parser:error()} | term()) -> binary().
format(Result) ->
    kprof_kv:delay(formatter),
    case Result of
        {ok, Value} when is_binary(Value) -> <<"VALUE ", Value/binary>>;
        ok -> <<"OK">>;
        not_found -> <<"NOT_FOUND">>;
        {error, Reason} -> <<"ERROR ", (reason(Reason))/binary>>;
        _ -> <<"ERROR internal">>
    end.

reason(Reason) when is_atom(Reason) ->
    atom_to_binary(Reason);
reason({Tag, Detail}) when is_atom(Tag), is_binary(Detail) ->
    Text = <<(atom_to_binary(Tag))/binary, " ", Detail/binary>>,
    binary:part(Text, 0, min(?MAX_REASON, byte_size(Text)));
reason(_) ->
    <<"internal">>.
