%%% @doc Supervisors of the key-value example (`kprof_kv').
%%%
%%% One module, one supervisor per layer, started in the order the layers
%%% call each other back to front, so each finds the one it calls running:
%%% ```
%%% kprof_kv_sup (top, one_for_one; owns the kprof_kv_config ETS table)
%%%   kprof_kv_db_sup          kprof_kv_db_1 .. _N          (db shards)
%%%   kprof_kv_accounting_sup  kprof_kv_accounting_1 .. _N  (accounting)
%%%   kprof_kv_handler_sup     kprof_kv_handler_1 .. _N     (handlers)
%%% '''
%%% Pool sizes come from the start options, else from the `kprof_kv'
%%% application's environment (`kv_handlers', `kv_db', `kv_accounting'),
%%% else the defaults: 4 handlers, 2 db shards, 2 accounting processes; each
%%% is clamped to 1..64. Initial delays (`kprof_kv:set_delay/2') come from
%%% the `delays' option or the `kv_delays' environment key, a map or a
%%% property list of layer to microseconds.
%%%
%%% The top supervisor owns the `kprof_kv_config' table (public, read
%%% concurrency) holding the pools' names and the delays, so the table lives
%%% exactly as long as the layers. Restart intensity is bounded (5 restarts
%%% in 10 s).
-module(kprof_kv_sup).
-behaviour(supervisor).

-export([start_link/1]).
-export([init/1]).

-define(TABLE, kprof_kv_config).
-define(MAX_POOL, 64).

-type options() :: #{handlers => 1..?MAX_POOL,   % default 4
                     db => 1..?MAX_POOL,         % default 2
                     accounting => 1..?MAX_POOL, % default 2
                     delays => #{kprof_kv:layer() => 0..1000000}}.
-export_type([options/0]).

%% @doc Starts the top supervisor, registered as `kprof_kv_sup', and every
%% layer under it.
-spec start_link(options()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Opts) when is_map(Opts) ->
    supervisor:start_link({local, kprof_kv_sup}, ?MODULE, {top, Opts}).

%% @private
-spec init({top, options()} | {db | accounting | handler, pos_integer()}) ->
          {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init({top, Opts}) ->
    Sizes = [{handler, size_of(Opts, handlers, kv_handlers, 4)},
             {db, size_of(Opts, db, kv_db, 2)},
             {accounting, size_of(Opts, accounting, kv_accounting, 2)}],
    Delays = initial_delays(Opts),
    ?TABLE = ets:new(?TABLE, [set, public, named_table, {read_concurrency, true}]),
    true = ets:insert(?TABLE, [{{pool, Layer}, names(Layer, N)} || {Layer, N} <- Sizes]),
    true = ets:insert(?TABLE, [{{delay, Layer}, 0} || Layer <- kprof_kv:layers()]),
    [ok = kprof_kv:set_delay(Layer, Us) || {Layer, Us} <- Delays],
    Layer = fun(Name, Kind) ->
                    #{id => Name, type => supervisor, shutdown => infinity,
                      start => {supervisor, start_link,
                                [{local, Name}, ?MODULE, {Kind, proplists:get_value(Kind, Sizes)}]}}
            end,
    {ok, {flags(), [Layer(kprof_kv_db_sup, db),
                    Layer(kprof_kv_accounting_sup, accounting),
                    Layer(kprof_kv_handler_sup, handler)]}};
init({Kind, N}) ->
    Module = module_of(Kind),
    {ok, {flags(), [#{id => {Module, I}, start => {Module, start_link, [I]}, shutdown => 2000}
                    || I <- lists:seq(1, N)]}}.

flags() ->
    #{strategy => one_for_one, intensity => 5, period => 10}.

module_of(handler) -> kprof_kv_handler;
module_of(db) -> kprof_kv_db;
module_of(accounting) -> kprof_kv_accounting.

names(Layer, N) ->
    Module = module_of(Layer),
    list_to_tuple([Module:name(I) || I <- lists:seq(1, N)]).

size_of(Opts, Key, EnvKey, Default) ->
    V = case maps:find(Key, Opts) of
            {ok, X} -> X;
            error -> application:get_env(kprof_kv, EnvKey, Default)
        end,
    case V of
        _ when is_integer(V) -> max(1, min(?MAX_POOL, V));
        _ -> error({badarg, Key, V})
    end.

initial_delays(Opts) ->
    Delays = case maps:find(delays, Opts) of
                 {ok, D} -> D;
                 error -> application:get_env(kprof_kv, kv_delays, #{})
             end,
    case Delays of
        _ when is_map(Delays) -> lists:sort(maps:to_list(Delays));
        _ when is_list(Delays) -> Delays;
        _ -> error({badarg, delays, Delays})
    end.
