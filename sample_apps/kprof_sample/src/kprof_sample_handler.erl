%%% @doc The "handler" layer of the kprof sample application.
%%%
%%% A pool of gen_servers (`kprof_sample_handler_1' ... `_N') that do the work
%%% of a request once a frontend has parsed it. Three kinds of request, each
%%% with its own CPU profile, so that a flame graph of the sample application
%%% has something to show:
%%% <dl>
%%% <dt>`GET /users/ID'</dt><dd>one user and its items from the db layer,
%%%   a few recommendations scored against the user's items
%%%   (`recommend/3'), rendered as JSON-like text with an ETag
%%%   (`render_user/3', `erlang:md5/1').</dd>
%%% <dt>`GET /search?q=WORDS&amp;n=N'</dt><dd>N candidate items from every
%%%   shard, scored against the query words in floating point
%%%   (`score_items/2'), de-duplicated with a deliberately quadratic
%%%   `dedupe_naive/1' (the hot spot a profile should reveal), sorted.</dd>
%%% <dt>`POST /checkout/ID'</dt><dd>a fraud score (`fraud_score/3', a few
%%%   thousand rounds of hashing), a total with tax computed item by item
%%%   (`compute_total/1'), then a balance update in the db layer.</dd>
%%% </dl>
%%% Bounded: N is clamped to ?MAX_CANDIDATES, a checkout to ?MAX_CART items,
%%% and every call to the db layer has a timeout.
-module(kprof_sample_handler).
-behaviour(gen_server).

-export([start_link/2, handler_name/1, handler_names/1, handle/3]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(MAX_HANDLERS, 64).
-define(MAX_CANDIDATES, 400).
-define(RECOMMENDATIONS, 40).
-define(FRAUD_ROUNDS, 20000).
-define(MAX_CART, 20).
-define(TIMEOUT, 5000).

-type request() :: #{method := binary(),
                     path := [binary()],
                     query := [{binary(), binary()}],
                     headers := [{binary(), binary()}],
                     body := [{binary(), binary()}]}.
-type response() :: {Status :: pos_integer(), Kind :: atom(), Body :: binary()}.
-export_type([request/0, response/0]).

-record(state, {shards :: kprof_sample_db:shards(),
                items :: pos_integer(),
                handled = 0 :: non_neg_integer()}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Starts handler `Index', registered as `handler_name(Index)', using the
%% db layer's `Shards' and a catalogue of `Items' items.
-spec start_link(Index :: pos_integer(), {kprof_sample_db:shards(), Items :: pos_integer()}) ->
          {ok, pid()} | ignore | {error, term()}.
start_link(Index, {Shards, Items}) ->
    gen_server:start_link({local, handler_name(Index)}, ?MODULE, {Shards, Items}, []).

%% @doc The registered name of handler `Index'.
-spec handler_name(pos_integer()) -> atom().
handler_name(Index) when is_integer(Index), Index >= 1, Index =< ?MAX_HANDLERS ->
    list_to_atom("kprof_sample_handler_" ++ integer_to_list(Index)).

%% @doc The names of `Count' handlers as a tuple.
-spec handler_names(pos_integer()) -> tuple().
handler_names(Count) when is_integer(Count), Count >= 1, Count =< ?MAX_HANDLERS ->
    list_to_tuple([handler_name(I) || I <- lists:seq(1, Count)]).

%% @doc Has `Handler' serve a parsed request; waits at most `Timeout' ms.
-spec handle(atom() | pid(), request(), timeout()) -> response().
handle(Handler, Request, Timeout) ->
    gen_server:call(Handler, {handle, Request}, Timeout).

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init({kprof_sample_db:shards(), pos_integer()}) -> {ok, #state{}}.
init({Shards, Items}) ->
    {ok, #state{shards = Shards, items = Items}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({handle, Request}, _From, State = #state{handled = N}) ->
    Response = try route(Request, State)
               catch
                   exit:{timeout, _} -> {503, error, <<"db timeout">>};
                   exit:_ -> {503, error, <<"db unavailable">>};
                   error:badarg -> {400, error, <<"bad request">>};
                   error:_ -> {500, error, <<"internal error">>}
               end,
    {reply, Response, State#state{handled = N + 1}};
handle_call(stats, _From, State = #state{handled = N}) ->
    {reply, #{handled => N}, State};
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
%%% Routes

route(#{method := <<"GET">>, path := [<<"users">>, Id]}, State) ->
    user_profile(binary_to_integer(Id), State);
route(#{method := <<"GET">>, path := [<<"search">>], query := Query}, State) ->
    Words = binary:split(proplists:get_value(<<"q">>, Query, <<>>), <<" ">>, [global, trim_all]),
    N = clamp(binary_to_integer(proplists:get_value(<<"n">>, Query, <<"20">>)),
              1, ?MAX_CANDIDATES),
    search(Words, N, State);
route(#{method := <<"POST">>, path := [<<"checkout">>, Id], body := Form}, State) ->
    Cart = [binary_to_integer(I)
            || I <- binary:split(proplists:get_value(<<"items">>, Form, <<>>), <<",">>,
                                 [global, trim_all])],
    checkout(binary_to_integer(Id), lists:sublist(Cart, ?MAX_CART), State);
route(_Request, _State) ->
    {404, not_found, <<"not found">>}.

user_profile(Id, State = #state{shards = Shards}) ->
    case kprof_sample_db:get_user(Shards, Id) of
        {ok, User = {_, _, _, _, ItemIds}} ->
            Items = kprof_sample_db:get_items(Shards, ItemIds),
            Recommended = recommend(Id, Items, State),
            Body = render_user(User, Items, Recommended),
            ETag = hex(erlang:md5(Body)),
            {200, user, <<"{\"etag\":\"", ETag/binary, "\",\"user\":", Body/binary, "}">>};
        not_found ->
            {404, user, <<"no such user">>}
    end.

search(Words, N, #state{shards = Shards, items = NItems}) ->
    Candidates = [erlang:phash2({Words, K}, NItems) || K <- lists:seq(1, N)],
    Items = kprof_sample_db:get_items(Shards, Candidates),
    Scored = score_items(Items, Words),
    Unique = dedupe_naive(Scored),
    Top = lists:sublist(lists:reverse(lists:keysort(1, Unique)), 10),
    Body = iolist_to_binary(["[", join([render_item(Item) || {_, Item} <- Top], ","), "]"]),
    {200, search, Body}.

checkout(Id, Cart, #state{shards = Shards}) ->
    Items = kprof_sample_db:get_items(Shards, Cart),
    Total = compute_total(Items),
    case fraud_score(Id, Cart, ?FRAUD_ROUNDS) rem 1000 of
        0 ->
            {200, checkout, <<"{\"refused\":true}">>};
        _ ->
            charge(Id, Total, Shards)
    end.

charge(Id, Total, Shards) ->
    case kprof_sample_db:add_balance(Shards, Id, -Total) of
        {ok, Balance} ->
            {200, checkout, iolist_to_binary(["{\"total\":", integer_to_list(Total),
                                              ",\"balance\":", integer_to_list(Balance), "}"])};
        not_found ->
            {404, checkout, <<"no such user">>}
    end.

%%% ---------------------------------------------------------------------
%%% The CPU work

render_user({Id, Name, Balance, Visits, _}, Items, Recommended) ->
    iolist_to_binary(["{\"id\":", integer_to_list(Id), ",\"name\":\"", Name,
                      "\",\"balance\":", integer_to_list(Balance),
                      ",\"visits\":", integer_to_list(Visits),
                      ",\"items\":[", join([render_item(I) || I <- Items], ","), "]",
                      ",\"recommended\":[", join([render_item(I) || I <- Recommended], ","),
                      "]}"]).

%% Items like the ones the user has: candidates scored by the tags and name
%% words they share with the user's items.
recommend(Id, Owned, #state{shards = Shards, items = NItems}) ->
    Candidates = kprof_sample_db:get_items(
                   Shards, [erlang:phash2({Id, K}, NItems) || K <- lists:seq(1, ?RECOMMENDATIONS)]),
    Profile = lists:append([Tags ++ binary:split(Name, <<" ">>, [global])
                            || {_, Name, _, Tags} <- Owned]),
    Scored = [{similarity(C, Profile), C} || C <- Candidates],
    [C || {_, C} <- lists:sublist(lists:reverse(lists:keysort(1, Scored)), 5)].

similarity({_, Name, _, Tags}, Profile) ->
    Words = Tags ++ binary:split(Name, <<" ">>, [global]),
    length([W || W <- Words, P <- Profile, W =:= P]).

%% A stand-in for a risk model: rounds of hashing over the user and cart.
fraud_score(Id, Cart, Rounds) ->
    fraud_score(Rounds, erlang:phash2({Id, Cart})).

fraud_score(0, Acc) ->
    Acc;
fraud_score(N, Acc) ->
    fraud_score(N - 1, erlang:phash2({Acc, N}, 1 bsl 27)).

render_item({Id, Name, Price, Tags}) ->
    ["{\"id\":", integer_to_list(Id), ",\"name\":\"", Name, "\",\"price\":",
     float_to_list(Price / 100, [{decimals, 2}]), ",\"tags\":[",
     join([["\"", T, "\""] || T <- Tags], ","), "]}"].

%% Relevance of each item to the query words: term matches in the name and
%% the tags, damped by price.
score_items(Items, Words) ->
    [{score(Item, Words), Item} || Item <- Items].

score({_, Name, Price, Tags}, Words) ->
    NameWords = binary:split(Name, <<" ">>, [global]),
    Hits = lists:sum([word_weight(W, NameWords, Tags) || W <- Words]),
    Hits / (1.0 + math:log(1.0 + Price / 100)).

word_weight(W, NameWords, Tags) ->
    case lists:member(W, NameWords) of
        true -> 2.0;
        false ->
            case lists:member(W, Tags) of
                true -> 1.0;
                false -> 0.1 * binary:longest_common_prefix([W, hd(NameWords)])
            end
    end.

%% Keeps the first of items with the same id. Quadratic on purpose: the hot
%% spot of the sample application.
dedupe_naive(Scored) ->
    dedupe_naive(Scored, []).

dedupe_naive([], Acc) ->
    lists:reverse(Acc);
dedupe_naive([X = {_, {Id, _, _, _}} | Rest], Acc) ->
    case lists:any(fun({_, {Seen, _, _, _}}) -> Seen =:= Id end, Acc) of
        true -> dedupe_naive(Rest, Acc);
        false -> dedupe_naive(Rest, [X | Acc])
    end.

%% Integer cents: price plus tax, the tax rounded per item as a till does.
compute_total(Items) ->
    lists:foldl(fun({_, _, Price, Tags}, Sum) -> Sum + Price + tax(Price, Tags) end, 0, Items).

tax(Price, Tags) ->
    Rate = case lists:member(<<"vintage">>, Tags) of
               true -> 0.05;
               false -> 0.2
           end,
    round(Price * Rate).

hex(Bin) ->
    << <<(hex_digit(N))>> || <<N:4>> <= Bin >>.

hex_digit(N) when N < 10 -> $0 + N;
hex_digit(N) -> $a + N - 10.

join([], _Sep) -> [];
join([First | Rest], Sep) -> [First | [[Sep, X] || X <- Rest]].

clamp(X, Lo, Hi) -> max(Lo, min(Hi, X)).
