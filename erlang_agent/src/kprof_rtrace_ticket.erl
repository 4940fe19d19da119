%%% @doc Beginning a request trace without a call to kprof_rtrace's server:
%%% the ticket. While the patterns are armed and events go through the NIF,
%%% the server publishes in an ETS table what a trace of the calling process
%%% needs (the session, the port, whether messages are followed, the rate
%%% limit's bucket); a process that begins a trace (kprof_rtrace_own) takes
%%% it, tells the server by a message and sets its own flags. The call it
%%% saves is 8 us with the server awake and about 20 us with its scheduler
%%% asleep, on the path of every traced request.
%%%
%%% Only from ERTS 13.2 (OTP 25.3): before it, a process traced with
%%% `send' whose flags another process clears can crash the node in
%%% trace_send (erlang/otp#6448, fixed by erlang/otp#6495), and a begin the
%%% server learns of after the fact makes that reachable: the server clears
%%% the flags of the processes a request reached when no trace runs, and
%%% would no longer know that none does. Debian 12's OTP 25.2.3 keeps the
%%% call.
%%%
%%% The server must know when no begin is on its way, to disarm or to clear
%%% flags (settled/1; when it publishes and settles: kprof_rtrace_arming's
%%% publish/1 and settled/1). Two counters: begins in flight (taken, the
%%% server's message not yet read) and traces the server holds. A process
%%% counts itself in flight first, then reads the ticket again; the server
%%% withdraws the ticket first, then reads the count: one of the two sees
%%% the other.
%%%
%%% A trace whose messages are not followed tells the server nothing at
%%% all until its end (run/4): the server's work for a begin, on the other
%%% scheduler while the request runs, cost such a request about 4 us on
%%% OTP 27, and the node 3.5 us of CPU (docs/performance.md). Its count
%%% moves to a third counter, traces running, which it ends itself
%%% (run_ended/1); its duration's timer, set by the process to fire at the
%%% server, ends it instead when the process outlives its trace's bounds
%%% or dies in it (timed_out/1). The server settles only when none runs.
%%% Following needs the server at the begin (it tells the other nodes to
%%% listen), so a followed trace sends its message.
-module(kprof_rtrace_ticket).

-export([new/1, new/2, supported/0, publish/2, settled/1, registered/2, held/2, forgive/1,
         take/2, run/4, run_ended/1, timed_out/1, in_flight/1]).

-define(TAB, ?MODULE).
%% counters: 1, begins in flight; 2, traces the server holds; 3, traces
%% begun with no message, running (run/4)
-define(IN_FLIGHT, 1).
-define(HELD, 2).
-define(RUNNING, 3).
%% the longest wait erlang:send_after/3 takes (about 49 days): a trace's
%% duration given as an option is not bounded by the settings' checks
-define(MAX_WAIT_MS, 16#FFFFFFFF).

%% What a trace needs: the session, the trace port (untrace_own/2), and
%% whether its messages may be followed; or none.
-type content() :: {kprof_tracing:session(), port() | undefined, boolean()} | none.
-opaque ticket() :: off | {counters(), kprof_rtrace_rate:bucket(), content()}.
-opaque counters() :: atomics:atomics_ref().
%% a trace begun with no message: the counters, its duration's timer
-opaque run() :: {counters(), reference()}.
-export_type([ticket/0, content/0, counters/0, run/0]).

%% @doc For the server, in its own process (it owns the table), with the
%% bucket of its rate limit, which a taker of the ticket takes its token
%% from: `off' before ERTS 13.2.
-spec new(kprof_rtrace_rate:bucket()) -> ticket().
new(Bucket) ->
    new(supported(), Bucket).

%% @doc As new/1, on `true' whatever the release (the tests' way in).
-spec new(boolean(), kprof_rtrace_rate:bucket()) -> ticket().
new(true, Bucket) ->
    ?TAB = ets:new(?TAB, [named_table, protected, {read_concurrency, true}]),
    {atomics:new(3, [{signed, true}]), Bucket, none};
new(false, _) ->
    off.

%% @doc ERTS 13.2 (OTP 25.3) or later.
-spec supported() -> boolean().
supported() ->
    Vsn = [list_to_integer(P) || P <- string:lexemes(erlang:system_info(version), "."),
                                 P =/= "", lists:all(fun(C) -> C >= $0 andalso C =< $9 end, P)],
    Vsn >= [13, 2].

%% @doc The server publishes `Content' (none: withdraws the ticket); a
%% table write only when it changed.
-spec publish(content(), ticket()) -> ticket().
publish(_, off) -> off;
publish(Content, T = {_, _, Content}) -> T;
publish(none, {C, B, _}) -> true = ets:delete(?TAB, ticket), {C, B, none};
publish(Content, {C, B, _}) ->
    true = ets:insert(?TAB, {ticket, self(), C, Content, B}),
    {C, B, Content}.

%% @doc The server withdraws the ticket; `true' when no begin is in
%% flight and no trace begun with no message runs: then none can begin
%% until it publishes again.
-spec settled(ticket()) -> {boolean(), ticket()}.
settled(off) -> {true, off};
settled(T0) ->
    T = {C, _, none} = publish(none, T0),
    {atomics:get(C, ?IN_FLIGHT) =< 0 andalso atomics:get(C, ?RUNNING) =< 0, T}.

%% @doc For the server, when settled/1 said no: whether a begin is in
%% flight (else only traces begun with no message run).
-spec in_flight(ticket()) -> boolean().
in_flight(off) -> false;
in_flight({C, _, _}) -> atomics:get(C, ?IN_FLIGHT) > 0.

%% @doc The server read a begin's message and holds `Held' traces now.
-spec registered(non_neg_integer(), ticket()) -> ticket().
registered(_, off) -> off;
registered(Held, T = {C, _, _}) ->
    %% held first: a reader counts the trace twice for a moment, never none
    atomics:put(C, ?HELD, Held),
    atomics:sub(C, ?IN_FLIGHT, 1),
    T.

%% @doc The server holds `Held' traces now.
-spec held(non_neg_integer(), ticket()) -> ticket().
held(_, off) -> off;
held(Held, T = {C, _, _}) -> atomics:put(C, ?HELD, Held), T.

%% @doc A begin in flight for long is a process killed between its count
%% and its message: it is forgotten, so that the server can settle. (A
%% trace running with no message is not: its timer ends its count.)
-spec forgive(ticket()) -> ticket().
forgive(off) -> off;
forgive(T = {C, _, _}) -> atomics:put(C, ?IN_FLIGHT, 0), T.

%% @doc In the process that begins a trace, with `max_concurrent' `Max'
%% and the trace's `Options': the ticket's session, port and whether its
%% messages are followed, the server to tell, and the counters for run/4;
%% `none' (no ticket, or `Max' traces run: the call then says why);
%% `rate_limited' (the options ask for a `rate_limit' and the server's
%% bucket has no token left, kprof_rtrace_rate:allowed/2).
-spec take(pos_integer(), map()) ->
          {ok, pid(), {kprof_tracing:session(), port() | undefined, boolean()}, counters()}
          | none | rate_limited.
take(Max, Options) ->
    try ets:lookup(?TAB, ticket) of
        [{ticket, _, C, _, _}] ->
            case atomics:add_get(C, ?IN_FLIGHT, 1) + atomics:get(C, ?HELD)
                + atomics:get(C, ?RUNNING) > Max of
                true ->
                    atomics:sub(C, ?IN_FLIGHT, 1),
                    none;
                false ->
                    %% again, counted: withdrawn since, the server may be
                    %% disarming
                    case ets:lookup(?TAB, ticket) of
                        [{ticket, Server, C, Content, Bucket}] ->
                            case kprof_rtrace_rate:allowed(Bucket, Options) of
                                true ->
                                    {ok, Server, Content, C};
                                false ->
                                    atomics:sub(C, ?IN_FLIGHT, 1),
                                    rate_limited
                            end;
                        _ ->
                            atomics:sub(C, ?IN_FLIGHT, 1),
                            none
                    end
            end;
        [] ->
            none
    catch
        error:badarg -> none % no server
    end.

%% @doc In the process that took the ticket, for trace `Id', which tells
%% the server nothing until its end: its count moves from the begins in
%% flight to the traces running (in that order: a reader never sees it in
%% neither), and its duration's timer is set to tell `Server' after `Ms'
%% ({run_timeout, Id, Pid}, see timed_out/1).
-spec run(counters(), pid(), binary(), pos_integer()) -> run().
run(C, Server, Id, Ms) ->
    atomics:add(C, ?RUNNING, 1),
    atomics:sub(C, ?IN_FLIGHT, 1),
    {C, erlang:send_after(min(Ms, ?MAX_WAIT_MS), Server, {run_timeout, Id, self()})}.

%% @doc That process, at its trace's end: its count ends, unless its timer
%% fired (the server then ended it); nothing for a trace the server was
%% told of (undefined).
-spec run_ended(run() | undefined) -> ok.
run_ended(undefined) ->
    ok;
run_ended({C, Timer}) ->
    _ = erlang:cancel_timer(Timer) =/= false andalso atomics:sub(C, ?RUNNING, 1),
    ok.

%% @doc The server, when a trace's timer set by run/4 fired: that trace's
%% count is its to end (the process's run_ended/1 finds the timer gone).
-spec timed_out(ticket()) -> ticket().
timed_out(off) -> off;
timed_out(T = {C, _, _}) -> atomics:sub(C, ?RUNNING, 1), T.
