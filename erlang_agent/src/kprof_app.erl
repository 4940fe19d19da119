%%% @doc The kprof application, where a release includes it: at start it
%%% checks kprof's application environment once (kprof_settings:check/0:
%%% renamed and unknown keys, one warning each in the node's log), and runs
%%% an empty supervisor, which OTP asks of an application with a start.
%%% Nothing else starts here: tracing starts when asked (kprof:start_trace/1,
%%% a traced request, the kprof program).
-module(kprof_app).
-behaviour(application).
-behaviour(supervisor).

-export([start/2, stop/1, init/1]).

-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    _ = kprof_settings:check(),
    case supervisor:start_link({local, kprof_sup}, ?MODULE, []) of
        {ok, Pid} -> {ok, Pid};
        ignore -> {error, ignore}; % init/1 never says it
        {error, _} = Error -> Error
    end.

-spec stop(term()) -> ok.
stop(_State) ->
    ok.

-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    {ok, {#{strategy => one_for_one, intensity => 1, period => 5}, []}}.
