%%% @doc Supervisors of the kprof sample application.
%%%
%%% One module, one supervisor per layer:
%%% ```
%%% kprof_sample_sup (top, one_for_one)
%%%   kprof_sample_db_sup           kprof_sample_db_1 .. _N       (db shards)
%%%   kprof_sample_accounting                                      (one process)
%%%   kprof_sample_handler_sup      kprof_sample_handler_1 .. _N  (handlers)
%%%   kprof_sample_frontend_sup     kprof_sample_frontend_1 .. _N (frontends)
%%%   kprof_kv_sup                  the key-value example (kprof_kv), idle
%%%                                 until kprof_kv_load sends it requests
%%% '''
%%% The layers start in that order, so each finds the one it calls running.
%%% The key-value example takes its pool sizes from the `kprof_kv' application
%%% environment or its defaults (see kprof_kv_sup).
%%% Restart intensity is bounded (5 restarts in 10 s), as everywhere in OTP.
-module(kprof_sample_sup).
-behaviour(supervisor).

-export([start_link/1]).
-export([init/1]).

-type config() :: #{frontends := pos_integer(), handlers := pos_integer(),
                    db_shards := pos_integer(), users := pos_integer(),
                    items := pos_integer()}.
-export_type([config/0]).

%% @doc Starts the top supervisor with a complete configuration (see
%% kprof_sample_app:start/1 for the keys and their bounds).
-spec start_link(config()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Config) ->
    supervisor:start_link({local, kprof_sample_sup}, ?MODULE, {top, Config}).

%% @private
-spec init({top | db | handlers | frontends, config()}) ->
          {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init({top, Config}) ->
    Layer = fun(Name, Kind) ->
                    #{id => Name, type => supervisor, shutdown => infinity,
                      start => {supervisor, start_link, [{local, Name}, ?MODULE, {Kind, Config}]}}
            end,
    {ok, {flags(),
          [Layer(kprof_sample_db_sup, db),
           #{id => kprof_sample_accounting, start => {kprof_sample_accounting, start_link, []}},
           Layer(kprof_sample_handler_sup, handlers),
           Layer(kprof_sample_frontend_sup, frontends),
           #{id => kprof_kv_sup, type => supervisor, shutdown => infinity,
             start => {kprof_kv_sup, start_link, [#{}]}}]}};
init({db, #{db_shards := N, users := Users, items := Items}}) ->
    {ok, {flags(), [worker(kprof_sample_db, I, [I, N, {Users, Items}])
                    || I <- lists:seq(1, N)]}};
init({handlers, #{handlers := N, db_shards := Shards, items := Items}}) ->
    Args = {kprof_sample_db:shard_names(Shards), Items},
    {ok, {flags(), [worker(kprof_sample_handler, I, [I, Args]) || I <- lists:seq(1, N)]}};
init({frontends, #{frontends := N, handlers := Handlers}}) ->
    Names = kprof_sample_handler:handler_names(Handlers),
    {ok, {flags(), [worker(kprof_sample_frontend, I, [I, Names]) || I <- lists:seq(1, N)]}}.

flags() ->
    #{strategy => one_for_one, intensity => 5, period => 10}.

worker(Module, Index, Args) ->
    #{id => {Module, Index}, start => {Module, start_link, Args}, shutdown => 2000}.
