%%% @doc The rate limit of traces asked for with `rate_limit' (the HTTP
%%% toggles): a bucket of `rate_limit' tokens (at least one), refilled at
%%% that rate a second; a begin with none left is refused.
%%%
%%% Kept in one atomics cell, not in kprof_rtrace's state, so that a
%%% process that begins its trace with the ticket (kprof_rtrace_ticket)
%%% takes its token without calling the server: between sparse requests
%%% the call is most of the begin (timed in an OTP 27 node through inets,
%%% a request every 100 ms: 81 to 83 us with it, 31 to 33 without; the
%%% server's scheduler and caches are cold).
%%%
%%% The cell holds the bucket as the time it is next full, in microseconds
%%% of erlang:monotonic_time/1 (a "theoretical arrival time", as the
%%% generic cell rate algorithm names it): a token moves it one interval
%%% later, and a begin is refused when that would put it more than the
%%% bucket's depth ahead of now. Takers race with compare_exchange.
-module(kprof_rtrace_rate).

-export([new/0, allowed/2, take/2]).

-opaque bucket() :: atomics:atomics_ref().
-export_type([bucket/0]).

%% @doc A full bucket.
-spec new() -> bucket().
new() ->
    Ref = atomics:new(1, [{signed, true}]),
    atomics:put(Ref, 1, -(1 bsl 63)), % long since full
    Ref.

%% @doc Whether a begin asked for with `Options' may go: one without
%% `rate_limit' always may, one with it takes a token (take/2).
-spec allowed(bucket(), map()) -> boolean().
allowed(Ref, #{rate_limit := Rate}) -> take(Ref, Rate);
allowed(_, _) -> true.

%% @doc Takes a token at `Rate' tokens a second: `true', or `false' when the
%% bucket is empty (or `Rate' is no positive number: nothing is allowed).
-spec take(bucket(), term()) -> boolean().
take(Ref, Rate) when is_number(Rate), Rate > 0 ->
    Interval = max(1, round(1.0e6 / Rate)),
    Depth = trunc(max(1.0, float(Rate))) * Interval, % whole tokens
    take(Ref, Interval, Depth, erlang:monotonic_time(microsecond));
take(_, _) ->
    false.

take(Ref, Interval, Depth, Now) ->
    Full = atomics:get(Ref, 1),
    Next = max(Full, Now) + Interval,
    if
        Next - Now > Depth ->
            false;
        true ->
            case atomics:compare_exchange(Ref, 1, Full, Next) of
                ok -> true;
                _ -> take(Ref, Interval, Depth, Now) % another taker came first
            end
    end.
