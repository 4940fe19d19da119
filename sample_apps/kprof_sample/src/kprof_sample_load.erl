%%% @doc The load generator of the kprof sample application.
%%%
%%% `start(#{rate => R, concurrency => C})' starts a coordinator
%%% (`kprof_sample_load') and C client processes that together send R
%%% requests a second to the frontends, each client at R/C a second on
%%% absolute deadlines. A client whose request took longer than its interval
%%% skips the ticks it missed instead of bursting to catch up (counted as
%%% `late'), so the offered load never exceeds the rate and a slow system is
%%% visible in `stats()' rather than hidden by a growing backlog.
%%%
%%% The request mix: 60% `GET /users/ID', 25% `GET /search?q=...&n=...',
%%% 15% `POST /checkout/ID'. Clients are plain processes started with
%%% proc_lib, so a profiler labels them `kprof_sample_load:client_init/5'.
%%%
%%% Bounded: rate 1..?MAX_RATE requests a second, concurrency
%%% 1..?MAX_CONCURRENCY clients, one request in flight per client with a
%%% ?REQUEST_TIMEOUT ms timeout. The generator stops by itself when the
%%% sample application's owner process goes away.
-module(kprof_sample_load).
-behaviour(gen_server).

-export([start/1, stop/0, stats/0]).
-export([client_init/5]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-define(NAME, kprof_sample_load).
-define(MAX_RATE, 100000).
-define(MAX_CONCURRENCY, 1000).
-define(REQUEST_TIMEOUT, 5000).
-define(SENT, 1).
-define(OK, 2).
-define(ERRORS, 3).
-define(LATE, 4).

-type options() :: #{rate => pos_integer(), concurrency => pos_integer()}.
-type stats() :: #{rate := pos_integer(), concurrency := pos_integer(),
                   sent := non_neg_integer(), ok := non_neg_integer(),
                   errors := non_neg_integer(), late := non_neg_integer()}.
-export_type([options/0, stats/0]).

-record(state, {rate :: pos_integer(),
                concurrency :: pos_integer(),
                counters :: counters:counters_ref(),
                clients = [] :: [pid()]}).

%%% ---------------------------------------------------------------------
%%% API

%% @doc Starts generating load against the running sample application.
%% `rate' (default 200) is clamped to 1..?MAX_RATE requests a second and
%% `concurrency' (default 8) to 1..?MAX_CONCURRENCY clients, and to at most
%% `rate' clients.
-spec start(options()) -> {ok, pid()} | {error, not_running | {already_started, pid()}}.
start(Opts) when is_map(Opts) ->
    case whereis(kprof_sample_owner) of
        undefined ->
            {error, not_running};
        Owner ->
            Rate = clamp(maps:get(rate, Opts, 200), 1, ?MAX_RATE),
            Concurrency = clamp(maps:get(concurrency, Opts, 8), 1, min(Rate, ?MAX_CONCURRENCY)),
            case gen_server:start({local, ?NAME}, ?MODULE, {Owner, Rate, Concurrency}, []) of
                {ok, Pid} -> {ok, Pid};
                {error, {already_started, Pid}} -> {error, {already_started, Pid}}
            end
    end.

%% @doc Stops the load generator and its clients, if running.
-spec stop() -> ok.
stop() ->
    case whereis(?NAME) of
        undefined -> ok;
        Pid ->
            try gen_server:stop(Pid, normal, 10000)
            catch exit:_ -> ok
            end
    end.

%% @doc Requests sent, answered with 200, failed, and ticks skipped because
%% a client was late.
-spec stats() -> stats().
stats() ->
    gen_server:call(?NAME, stats, 5000).

%%% ---------------------------------------------------------------------
%%% gen_server callbacks

%% @private
-spec init({pid(), pos_integer(), pos_integer()}) -> {ok, #state{}}.
init({Owner, Rate, Concurrency}) ->
    process_flag(trap_exit, true),
    monitor(process, Owner),
    #{frontends := Frontends, users := Users, items := Items} = kprof_sample_app:config(),
    Counters = counters:new(4, [write_concurrency]),
    IntervalUs = max(1, Concurrency * 1000000 div Rate),
    Names = kprof_sample_frontend:frontend_names(Frontends),
    Clients = [proc_lib:spawn_link(?MODULE, client_init,
                                   [I, IntervalUs, Names, {Users, Items}, Counters])
               || I <- lists:seq(1, Concurrency)],
    {ok, #state{rate = Rate, concurrency = Concurrency, counters = Counters, clients = Clients}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call(stats, _From, State = #state{counters = C}) ->
    {reply, #{rate => State#state.rate, concurrency => State#state.concurrency,
              sent => counters:get(C, ?SENT), ok => counters:get(C, ?OK),
              errors => counters:get(C, ?ERRORS), late => counters:get(C, ?LATE)}, State};
handle_call(_Other, _From, State) ->
    {reply, {error, unknown_call}, State}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast(_Msg, State) ->
    {noreply, State}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}} | {stop, term(), #state{}}.
handle_info({'DOWN', _, process, _, _}, State) ->
    %% the sample application's owner is gone: nothing left to load
    {stop, normal, State};
handle_info({'EXIT', Pid, _Reason}, State = #state{clients = Clients}) ->
    {noreply, State#state{clients = lists:delete(Pid, Clients)}};
handle_info(_Msg, State) ->
    {noreply, State}.

%% @private
-spec terminate(term(), #state{}) -> ok.
terminate(_Reason, #state{clients = Clients}) ->
    [exit(C, shutdown) || C <- Clients],
    ok.

%%% ---------------------------------------------------------------------
%%% Clients

%% @private
-spec client_init(pos_integer(), pos_integer(), tuple(), {pos_integer(), pos_integer()},
                  counters:counters_ref()) -> no_return().
client_init(Id, IntervalUs, Frontends, Sizes, Counters) ->
    rand:seed(exsss, {Id, erlang:unique_integer([positive]), erlang:monotonic_time()}),
    %% spread the clients over the first interval
    client_loop(now_us() + rand:uniform(IntervalUs), IntervalUs, Frontends, Sizes, Counters).

client_loop(Next, IntervalUs, Frontends, Sizes, Counters) ->
    Wait = (Next - now_us()) div 1000,
    receive
        stop -> exit(normal)
    after max(0, Wait) ->
            ok
    end,
    Frontend = element(rand:uniform(tuple_size(Frontends)), Frontends),
    counters:add(Counters, ?SENT, 1),
    Outcome = try kprof_sample_frontend:request(Frontend, make_request(Sizes), ?REQUEST_TIMEOUT)
              of
                  {200, _} -> ?OK;
                  {_, _} -> ?ERRORS
              catch
                  exit:_ -> ?ERRORS
              end,
    counters:add(Counters, Outcome, 1),
    Due = Next + IntervalUs,
    Now = now_us(),
    Next1 = case Now > Due of
                true ->
                    Missed = (Now - Due) div IntervalUs + 1,
                    counters:add(Counters, ?LATE, Missed),
                    Due + Missed * IntervalUs;
                false ->
                    Due
            end,
    client_loop(Next1, IntervalUs, Frontends, Sizes, Counters).

now_us() ->
    erlang:monotonic_time(microsecond).

%% One request of the mix, as raw HTTP/1.1 text.
make_request({Users, Items}) ->
    RequestId = integer_to_list(erlang:unique_integer([positive])),
    Headers = ["host: shop.example\r\nuser-agent: kprof-sample-load/1\r\n"
               "accept: application/json\r\nx-request-id: ", RequestId, "\r\n"],
    User = integer_to_list(rand:uniform(Users) - 1),
    case rand:uniform(100) of
        N when N =< 60 ->
            iolist_to_binary(["GET /users/", User, " HTTP/1.1\r\n", Headers, "\r\n"]);
        N when N =< 85 ->
            Words = kprof_sample_db:item_words(),
            Pick = fun() -> lists:nth(rand:uniform(length(Words)), Words) end,
            Query = ["q=", Pick(), "%20", Pick(), "&n=", integer_to_list(50 + rand:uniform(350))],
            iolist_to_binary(["GET /search?", Query, " HTTP/1.1\r\n", Headers, "\r\n"]);
        _ ->
            Cart = lists:join(",", [integer_to_list(rand:uniform(Items) - 1)
                                    || _ <- lists:seq(1, 1 + rand:uniform(6))]),
            Body = iolist_to_binary(["items=", Cart]),
            iolist_to_binary(["POST /checkout/", User, " HTTP/1.1\r\n", Headers,
                              "content-type: application/x-www-form-urlencoded\r\n"
                              "content-length: ", integer_to_list(byte_size(Body)), "\r\n\r\n",
                              Body])
    end.

clamp(X, Lo, Hi) when is_integer(X) -> max(Lo, min(Hi, X)).
