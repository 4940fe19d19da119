%%% @doc Request markers for tier tracing.
%%%
%%% These functions do nothing by themselves. While tier tracing runs,
%%% `kprof_tiers' puts trace patterns on them whose match specifications set
%%% the calling process's seq_trace token (label: the calling pid) and emit an
%%% event carrying the request's identity. That is how `kprof:do_apply/3',
%%% `kprof:set_token/1' and `kprof:clear_token/0' mark a request without the
%%% Erlang side ever sending a message to kprof: the marks travel in the same
%%% trace stream as the tier calls, so the C side sees them in order.
%%%
%%% They must stay remote calls (`kprof_tier_mark:request(...)') so that the
%%% compiler cannot inline them and the trace pattern always fires.
-module(kprof_tier_mark).

-export([request/2, begin_request/1, end_request/0]).

%% @doc Runs `Fun' as one request of `Identity': the request starts at the
%% call and ends at the return (or exception) of this function.
-spec request(term(), fun(() -> Result)) -> Result.
request(_Identity, Fun) ->
    Fun().

%% @doc Starts a request of `Identity' in the calling process; it lasts until
%% `end_request/0' is called by the same process.
-spec begin_request(term()) -> ok.
begin_request(_Identity) ->
    ok.

%% @doc Ends the request started by `begin_request/1' in this process.
-spec end_request() -> ok.
end_request() ->
    ok.
