%%% @doc The first request traced by a fresh kprof_rtrace server, after a
%%% node starts or after a pause long enough for the server to stop: its
%%% trace waits for the tracer NIF, so that it is followed like any other.
%%%
%%% A request's messages are followed only through the NIF (the trace
%%% port has no seq_trace events), and the collector program the server
%%% starts gives the node the NIF a few hundred milliseconds later
%%% (kprof_rtrace:use_nif/1). A trace begun before would hold the request's
%%% own process and none of those its messages reach. So while the NIF is
%%% on its way, begin_trace calls are held here, and answered in order when
%%% it comes, when the collector says it cannot have it or goes away, or
%%% after ?WAIT_MS, whichever is first; then nothing is held again.
-module(kprof_rtrace_first).

-export([new/1, holds/2, hold/2, release/1]).

%% The longest a first trace waits; kprof_rtrace's callers wait 10 s.
-define(WAIT_MS, 5000).

-type call() :: {From :: pid() | reference(), Ref :: reference(), Request :: term()}.
-opaque held() :: {waiting, [call()]} | done.
-export_type([held/0]).

%% @doc Nothing held yet. With `CollectorStarted', calls wait for the NIF
%% until release/3, and the calling server gets `first_wait_over' after
%% ?WAIT_MS, its cue to release them.
-spec new(boolean()) -> held().
new(true) ->
    _ = erlang:send_after(?WAIT_MS, self(), first_wait_over),
    {waiting, []};
new(false) ->
    done.

%% @doc Whether a begin_trace call is held now: the NIF is still on its way.
-spec holds(held(), NifConnected :: boolean()) -> boolean().
holds({waiting, _}, false) -> true;
holds(_, _) -> false.

%% @doc Holds a call (`{From, Ref, Request}', as kprof_rtrace's loop got it).
-spec hold(call(), held()) -> held().
hold(Call, {waiting, Calls}) -> {waiting, [Call | Calls]}.

%% @doc The held calls, oldest first, for the caller to answer; nothing is
%% held after.
-spec release(held()) -> {[call()], held()}.
release({waiting, Calls}) ->
    {lists:reverse(Calls), done};
release(done) ->
    {[], done}.
