%%% @doc A sample application to profile with kprof, and its entry points.
%%%
%%% It looks like a small web shop without the sockets: a load generator
%%% (`kprof_sample_load') sends raw HTTP/1.1 request text to a pool of
%%% frontends that parse it (`kprof_sample_frontend'), which hand each
%%% request to a pool of handlers doing the CPU work (`kprof_sample_handler'),
%%% which read and update a sharded in-memory store of ETS tables and maps
%%% (`kprof_sample_db'); every answered request is reported to a single
%%% accounting process (`kprof_sample_accounting'). Each layer has several
%%% processes with registered names, so a profile of the node shows layers,
%%% processes and a few known hot spots (the handlers' `dedupe_naive/1' and
%%% `score_items/2', the frontends' parsing, the accounting process's sort).
%%%
%%% == Running it as its own node ==
%%% ```
%%% erl -noshell -sname shop -pa build/sample_apps/kprof_sample/ebin \
%%%     -pa build/sample_apps/kprof_kv/ebin \
%%%     -eval 'kprof_sample_app:run(#{rate => 300, concurrency => 8})'
%%% '''
%%% `run/1' starts everything under a long-lived owner process (an `-eval'
%%% expression's own process is not one: what it owns dies when it returns),
%%% starts the load, and blocks until the application is stopped, by
%%% `kprof_sample_app:stop()' (from another node: `erl_call ... -a
%%% "kprof_sample_app stop"'), by SIGTERM to the node, or when
%%% `max_lifetime_ms' has passed; then the node halts. `start_node_main/0'
%%% is `run/1' with the defaults.
%%%
%%% == Inside a running node ==
%%% `start/1' starts the application (no load) and returns; `stop/0' stops
%%% it; `kprof_sample_load:start/1' and `stop/0' control the load.
%%%
%%% Every setting has a bound (see `options()'), so a typo cannot make the
%%% sample application take the machine down.
-module(kprof_sample_app).

-export([run/1, start_node_main/0, start/1, stop/0, config/0, status/0]).
%% spawned
-export([owner_init/2]).

-define(OWNER, kprof_sample_owner).
-define(CONFIG_KEY, {?MODULE, config}).

-type options() :: #{frontends => 1..64,          % default 4
                     handlers => 1..64,           % default 4
                     db_shards => 1..64,          % default 4
                     users => 1..1000000,         % default 20000
                     items => 1..1000000,         % default 5000
                     rate => 0..100000,           % requests/s, default 300 (0: no load)
                     concurrency => 1..1000,      % load clients, default 8
                     ready_file => file:name_all(), % written once the load runs
                     max_lifetime_ms => 1000..86400000}. % default 1 hour
-export_type([options/0]).

%% @doc Starts the application and the load, writes `ready_file' (if given)
%% with the node's OS pid, and blocks until the application stops; then halts
%% the node (status 0, or 1 if it could not start).
-spec run(options()) -> no_return().
run(Opts) when is_map(Opts) ->
    case start(Opts) of
        {ok, Owner} ->
            Ref = monitor(process, Owner),
            case maps:get(rate, Opts, 300) of
                0 -> ok;
                Rate -> {ok, _} = kprof_sample_load:start(#{rate => Rate,
                                                            concurrency =>
                                                                maps:get(concurrency, Opts, 8)})
            end,
            write_ready_file(maps:get(ready_file, Opts, undefined)),
            receive {'DOWN', Ref, process, Owner, _} -> ok end,
            halt(0);
        {error, Reason} ->
            io:format(standard_error, "kprof_sample_app: cannot start: ~p~n", [Reason]),
            halt(1)
    end.

%% @doc `run/1' with the default options.
-spec start_node_main() -> no_return().
start_node_main() ->
    run(#{}).

%% @doc Starts the application under a new owner process, registered as
%% `kprof_sample_owner'; returns once every layer runs.
-spec start(options()) -> {ok, pid()} | {error, already_started | term()}.
start(Opts) when is_map(Opts) ->
    case whereis(?OWNER) of
        undefined ->
            Config = config_from(Opts),
            {Pid, Ref} = spawn_monitor(?MODULE, owner_init, [self(), Config]),
            receive
                {Pid, started} ->
                    demonitor(Ref, [flush]),
                    {ok, Pid};
                {'DOWN', Ref, process, Pid, Reason} ->
                    {error, Reason}
            after 60000 ->
                    exit(Pid, kill),
                    {error, timeout}
            end;
        _ ->
            {error, already_started}
    end.

%% @doc Stops the load and the application; waits at most 15 s.
-spec stop() -> ok.
stop() ->
    kprof_sample_load:stop(),
    case whereis(?OWNER) of
        undefined ->
            ok;
        Owner ->
            Ref = monitor(process, Owner),
            Owner ! stop,
            receive {'DOWN', Ref, process, Owner, _} -> ok
            after 15000 -> exit(Owner, kill), ok
            end
    end.

%% @doc The configuration of the running application.
-spec config() -> kprof_sample_sup:config().
config() ->
    persistent_term:get(?CONFIG_KEY).

%% @doc What runs: the configuration, the accounting counters and the load
%% generator's counters, or `not_running'.
-spec status() -> #{atom() => term()} | not_running.
status() ->
    case whereis(?OWNER) of
        undefined ->
            not_running;
        _ ->
            Load = try kprof_sample_load:stats() catch exit:_ -> none end,
            #{config => config(), accounting => kprof_sample_accounting:stats(), load => Load}
    end.

%%% ---------------------------------------------------------------------
%%% The owner

%% @private
-spec owner_init(pid(), kprof_sample_sup:config()) -> ok.
owner_init(Caller, Config = #{max_lifetime_ms := Lifetime}) ->
    process_flag(trap_exit, true),
    true = register(?OWNER, self()),
    persistent_term:put(?CONFIG_KEY, Config),
    {ok, Sup} = kprof_sample_sup:start_link(Config),
    Caller ! {self(), started},
    Timer = erlang:send_after(Lifetime, self(), lifetime_over),
    owner_loop(Sup, Timer).

owner_loop(Sup, Timer) ->
    receive
        stop -> shutdown(Sup, Timer);
        lifetime_over -> shutdown(Sup, Timer);
        {'EXIT', Sup, _Reason} -> forget_config();
        _Other -> owner_loop(Sup, Timer)
    end.

shutdown(Sup, Timer) ->
    _ = erlang:cancel_timer(Timer),
    kprof_sample_load:stop(),
    exit(Sup, shutdown),
    receive {'EXIT', Sup, _} -> ok
    after 10000 -> exit(Sup, kill)
    end,
    forget_config().

forget_config() ->
    _ = persistent_term:erase(?CONFIG_KEY),
    ok.

%%% ---------------------------------------------------------------------
%%% Options

config_from(Opts) ->
    #{frontends => bounded(Opts, frontends, 4, 1, 64),
      handlers => bounded(Opts, handlers, 4, 1, 64),
      db_shards => bounded(Opts, db_shards, 4, 1, 64),
      users => bounded(Opts, users, 20000, 1, 1000000),
      items => bounded(Opts, items, 5000, 1, 1000000),
      max_lifetime_ms => bounded(Opts, max_lifetime_ms, 3600000, 1000, 86400000)}.

bounded(Opts, Key, Default, Lo, Hi) ->
    case maps:get(Key, Opts, Default) of
        V when is_integer(V) -> max(Lo, min(Hi, V));
        V -> error({badarg, Key, V})
    end.

write_ready_file(undefined) ->
    ok;
write_ready_file(Path) ->
    Tmp = unicode:characters_to_list([Path, ".tmp"]),
    ok = file:write_file(Tmp, [os:getpid(), "\n"]),
    ok = file:rename(Tmp, Path).
