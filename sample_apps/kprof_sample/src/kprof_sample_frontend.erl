%%% @doc The "frontend" layer of the kprof sample application.
%%%
%%% A pool of gen_servers (`kprof_sample_frontend_1' ... `_N') that receive
%%% raw HTTP/1.1 request text (there is no socket: the load generator calls
%%% them directly), parse it (`parse_request/1': request line, headers,
%%% query string and form body with `uri_string'), hand the parsed request
%%% to a handler chosen by hashing the path, render the response text and
%%% report the request to the accounting process.
%%%
%%% Bounded: requests over ?MAX_REQUEST bytes or ?MAX_HEADERS headers are
%%% refused with 413/431, and the handler gets ?HANDLER_TIMEOUT ms.
-module(kprof_sample_frontend).
-behaviour(gen_server).

-export([start_link/2, frontend_name/1, frontend_names/1, request/3, parse_request/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(MAX_FRONTENDS, 64).
-define(MAX_REQUEST, 65536).
-define(MAX_HEADERS, 64).
-define(HANDLER_TIMEOUT, 4000).

-record(state, {handlers :: tuple(), served = 0 :: non_neg_integer()}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Starts frontend `Index', registered as `frontend_name(Index)',
%% dispatching to `Handlers' (a tuple of handler names).
-spec start_link(pos_integer(), Handlers :: tuple()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Index, Handlers) when tuple_size(Handlers) >= 1 ->
    gen_server:start_link({local, frontend_name(Index)}, ?MODULE, Handlers, []).

%% @doc The registered name of frontend `Index'.
-spec frontend_name(pos_integer()) -> atom().
frontend_name(Index) when is_integer(Index), Index >= 1, Index =< ?MAX_FRONTENDS ->
    list_to_atom("kprof_sample_frontend_" ++ integer_to_list(Index)).

%% @doc The names of `Count' frontends as a tuple.
-spec frontend_names(pos_integer()) -> tuple().
frontend_names(Count) when is_integer(Count), Count >= 1, Count =< ?MAX_FRONTENDS ->
    list_to_tuple([frontend_name(I) || I <- lists:seq(1, Count)]).

%% @doc Sends raw request text to a frontend and returns the response text.
-spec request(atom() | pid(), binary(), timeout()) -> {Status :: pos_integer(), binary()}.
request(Frontend, Raw, Timeout) when is_binary(Raw) ->
    gen_server:call(Frontend, {request, Raw}, Timeout).

%% @doc Parses HTTP/1.1 request text into the map handlers take.
-spec parse_request(binary()) -> {ok, kprof_sample_handler:request()} | {error, atom()}.
parse_request(Raw) when byte_size(Raw) > ?MAX_REQUEST ->
    {error, too_large};
parse_request(Raw) ->
    case binary:split(Raw, <<"\r\n\r\n">>) of
        [Head, Body] ->
            [RequestLine | HeaderLines] = binary:split(Head, <<"\r\n">>, [global]),
            case parse_request_line(RequestLine) of
                {ok, Method, Path, Query} when length(HeaderLines) =< ?MAX_HEADERS ->
                    {ok, #{method => Method, path => Path, query => Query,
                           headers => parse_headers(HeaderLines, []),
                           body => parse_form(Body)}};
                {ok, _, _, _} ->
                    {error, too_many_headers};
                Error ->
                    Error
            end;
        [_] ->
            {error, incomplete}
    end.

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init(tuple()) -> {ok, #state{}}.
init(Handlers) ->
    {ok, #state{handlers = Handlers}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({request, Raw}, _From, State = #state{handlers = Handlers, served = N}) ->
    T0 = erlang:monotonic_time(microsecond),
    {Status, Kind, Body} =
        case parse_request(Raw) of
            {ok, Request = #{path := Path}} ->
                Handler = element(erlang:phash2(Path, tuple_size(Handlers)) + 1, Handlers),
                try kprof_sample_handler:handle(Handler, Request, ?HANDLER_TIMEOUT)
                catch exit:_ -> {503, error, <<"handler unavailable">>}
                end;
            {error, too_large} -> {413, error, <<"request too large">>};
            {error, too_many_headers} -> {431, error, <<"too many headers">>};
            {error, _} -> {400, error, <<"bad request">>}
        end,
    Response = render_response(Status, Body),
    kprof_sample_accounting:record(Kind, erlang:monotonic_time(microsecond) - T0,
                                   byte_size(Response)),
    {reply, {Status, Response}, State#state{served = N + 1}};
handle_call(stats, _From, State = #state{served = N}) ->
    {reply, #{served => N}, State};
handle_call(_Other, _From, State) ->
    {reply, {error, unknown_call}, State}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast(_Msg, State) ->
    {noreply, State}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}}.
handle_info(_Msg, State) ->
    {noreply, State}.

%%% ---------------------------------------------------------------------
%%% Parsing and rendering

parse_request_line(Line) ->
    case binary:split(Line, <<" ">>, [global]) of
        [Method, Target, <<"HTTP/1.1">>] ->
            {PathText, QueryText} = case binary:split(Target, <<"?">>) of
                                        [P, Q] -> {P, Q};
                                        [P] -> {P, <<>>}
                                    end,
            Path = binary:split(PathText, <<"/">>, [global, trim_all]),
            {ok, Method, Path, parse_form(QueryText)};
        _ ->
            {error, bad_request_line}
    end.

parse_headers([], Acc) ->
    lists:reverse(Acc);
parse_headers([Line | Rest], Acc) ->
    case binary:split(Line, <<":">>) of
        [Name, Value] ->
            parse_headers(Rest, [{string:lowercase(Name), string:trim(Value)} | Acc]);
        [_] ->
            parse_headers(Rest, Acc)
    end.

parse_form(<<>>) ->
    [];
parse_form(Text) ->
    case uri_string:dissect_query(Text) of
        Pairs when is_list(Pairs) -> [{K, V} || {K, V} <- Pairs, is_binary(K), is_binary(V)];
        _ -> []
    end.

render_response(Status, Body) ->
    iolist_to_binary(["HTTP/1.1 ", integer_to_list(Status), " ", reason(Status), "\r\n",
                      "content-type: application/json\r\n",
                      "content-length: ", integer_to_list(byte_size(Body)), "\r\n\r\n",
                      Body]).

reason(200) -> "OK";
reason(400) -> "Bad Request";
reason(404) -> "Not Found";
reason(413) -> "Payload Too Large";
reason(431) -> "Request Header Fields Too Large";
reason(500) -> "Internal Server Error";
reason(503) -> "Service Unavailable";
reason(_) -> "Unknown".
