%%% @doc The parsing layer of the key-value example (`kprof_kv').
%%%
%%% Pure: runs in the process that called `kprof_kv:request/1'. A request is
%%% one line, the command word (any case), a key and, for `PUT' and
%%% `CREATE', a value that runs to the end of the line (spaces included); a
%%% trailing CR LF or LF is ignored:
%%% ```
%%% GET key            -> {get, Key}
%%% PUT key value      -> {put, Key, Value}
%%% CREATE key value   -> {create, Key, Value}
%%% DEL key            -> {delete, Key}
%%% '''
%%% Bounded: a key is 1..?MAX_KEY bytes of printable ASCII without spaces, a
%%% value 1..?MAX_VALUE bytes; longer requests are refused unread.
-module(kprof_kv_parser).

-export([parse/1, verb/1, max_key/0, max_value/0]).

-define(MAX_KEY, 64).
-define(MAX_VALUE, 1024).
-define(MAX_REQUEST, (8 + ?MAX_KEY + ?MAX_VALUE)).

-type key() :: binary().
-type value() :: binary().
-type command() :: {get, key()} | {put, key(), value()} | {create, key(), value()}
                 | {delete, key()}.
-type error() :: empty | too_long | {unknown_command, binary()} | missing_key | missing_value
               | extra_arguments | bad_key | key_too_long | value_too_long.
-export_type([key/0, value/0, command/0, error/0]).

%% @doc Parses one request line (tier entry point of the parsing layer,
%% stable arity 1). Spends the `parser' delay of `kprof_kv:set_delay/2'.
-spec parse(binary()) -> {ok, command()} | {error, error()}.
parse(Bin) when is_binary(Bin) ->
    kprof_kv:delay(parser),
    case byte_size(Bin) > ?MAX_REQUEST of
        true -> {error, too_long};
        false -> parse_line(strip_eol(Bin))
    end.

%% @doc The command a command word stands for (`GET', `PUT', `CREATE',
%% `DEL', in any case), or `undefined'.
-spec verb(binary()) -> get | put | create | delete | undefined.
verb(Word) when byte_size(Word) =< 6 ->
    case upper(Word) of
        <<"GET">> -> get;
        <<"PUT">> -> put;
        <<"CREATE">> -> create;
        <<"DEL">> -> delete;
        _ -> undefined
    end;
verb(_) ->
    undefined.

%% @doc The longest key accepted, in bytes.
-spec max_key() -> pos_integer().
max_key() ->
    ?MAX_KEY.

%% @doc The longest value accepted, in bytes.
-spec max_value() -> pos_integer().
max_value() ->
    ?MAX_VALUE.

%%% ---------------------------------------------------------------------
%%% Internals

strip_eol(Bin) ->
    case Bin of
        <<Line:(byte_size(Bin) - 2)/binary, "\r\n">> -> Line;
        <<Line:(byte_size(Bin) - 1)/binary, "\n">> -> Line;
        _ -> Bin
    end.

parse_line(<<>>) ->
    {error, empty};
parse_line(Line) ->
    {Word, Rest} = split_word(Line),
    case verb(Word) of
        undefined -> {error, {unknown_command, binary:part(Word, 0, min(16, byte_size(Word)))}};
        Verb -> parse_args(Verb, split_word(Rest))
    end.

parse_args(_Verb, {<<>>, _}) ->
    {error, missing_key};
parse_args(Verb, {Key, Rest}) ->
    case check_key(Key) of
        ok -> args(Verb, Key, Rest);
        Error -> Error
    end.

args(get, Key, <<>>) -> {ok, {get, Key}};
args(delete, Key, <<>>) -> {ok, {delete, Key}};
args(Verb, _Key, _Rest) when Verb =:= get; Verb =:= delete -> {error, extra_arguments};
args(_Verb, _Key, <<>>) -> {error, missing_value};
args(_Verb, _Key, Value) when byte_size(Value) > ?MAX_VALUE -> {error, value_too_long};
args(Verb, Key, Value) -> {ok, {Verb, Key, Value}}.

check_key(Key) when byte_size(Key) > ?MAX_KEY ->
    {error, key_too_long};
check_key(Key) ->
    case printable(Key) of
        true -> ok;
        false -> {error, bad_key}
    end.

printable(<<C, Rest/binary>>) when C > $\s, C < 127 -> printable(Rest);
printable(<<>>) -> true;
printable(_) -> false.

%% The first word and what follows the single space after it.
split_word(Bin) ->
    case binary:match(Bin, <<" ">>) of
        {At, 1} -> {binary:part(Bin, 0, At), binary:part(Bin, At + 1, byte_size(Bin) - At - 1)};
        nomatch -> {Bin, <<>>}
    end.

upper(Word) ->
    << <<(if C >= $a, C =< $z -> C - 32; true -> C end)>> || <<C>> <= Word >>.
