%%% @doc The key-value example of kprof's docs/tiers.md: a request pipeline with
%%% several processes per layer, to profile with kprof's tier tracing.
%%%
%%% A request is one line of text: `<<"GET key">>', `<<"PUT key value">>',
%%% `<<"CREATE key value">>' or `<<"DEL key">>'. `request/1' serves it in the
%%% calling process, through five layers:
%%% ```
%%% caller:        kprof_kv:request/1
%%%                  kprof_kv_parser:parse/1          (pure, in the caller)
%%%                  kprof_kv_handler:handle/1        (gen_server:call to a handler)
%%% handler_I:           kprof_kv_db:query/1          (gen_server:call to a db shard)
%%% handler_I:           kprof_kv_accounting:record/2 (gen_server:call to accounting)
%%% caller:          kprof_kv_formatter:format/1      (pure, in the caller)
%%% '''
%%% The functions above are the stable entry points of the layers: exported,
%%% with these arities, so they can be named in a kprof tier configuration.
%%% `identity/1' classifies a request as `create', `read', `update' or
%%% `delete' and can serve as kprof's `identity_f'.
%%%
%%% == Starting it ==
%%% Inside the sample application (`kprof_sample_app:run/1' or `start/1') it
%%% already runs, under `kprof_sample_sup'. On its own: `start/0' or
%%% `start/1' start it under a long-lived owner process (`kprof_kv_owner'), so
%%% that it survives the process that started it (an `erl -eval' expression's
%%% process ends when the expression returns):
%%% ```
%%% erl -noshell -sname kv -pa build/sample_apps/kprof_kv/ebin \
%%%     -eval 'kprof_kv:start(), kprof_kv_load:run(#{rate => 500, duration_ms => 60000})'
%%% '''
%%% `kprof_kv_load' generates load; see there.
%%%
%%% == Injected delays ==
%%% Each layer does a little real work, plus an optional delay, so a test can
%%% inject known times per layer: `set_delay(Layer, Microseconds)' (or the
%%% `delays' start option, or the `kv_delays' application environment key of
%%% the `kprof_kv' application). A delay of 1 ms or more sleeps, a shorter one
%%% busy-waits; either way the layer takes at least that long. The handler's,
%%% db's and accounting's delays are spent in their own processes, before
%%% they call the next layer, so they are each layer's own (exclusive) time.
%%% Delays live in an ETS table with read concurrency, read once per layer
%%% and request; default 0.
-module(kprof_kv).

-export([request/1, identity/1]).
-export([start/0, start/1, stop/0]).
-export([set_delay/2, delays/0, layers/0]).
%% used by the layers
-export([delay/1, pool/1]).
%% spawned
-export([owner_init/2]).

-define(OWNER, kprof_kv_owner).
-define(TABLE, kprof_kv_config).
-define(MAX_DELAY_US, 1000000).

-type layer() :: parser | handler | db | accounting | formatter.
-type identity() :: create | read | update | delete.
-type options() :: kprof_kv_sup:options().
-export_type([layer/0, identity/0, options/0]).

%%% ---------------------------------------------------------------------
%%% Requests

%% @doc Serves one request (tier entry point, stable arity 1): parses it,
%% has a handler run it against the db and accounting layers, and formats
%% the result. Returns the reply line: `<<"VALUE ", V/binary>>', `<<"OK">>',
%% `<<"NOT_FOUND">>' or `<<"ERROR ", Reason/binary>>' (a malformed request,
%% or the key-value layers not running or too slow). Never raises for a
%% binary argument.
-spec request(binary()) -> binary().
request(Bin) when is_binary(Bin) ->
    Result = case kprof_kv_parser:parse(Bin) of
                 {ok, Command} -> kprof_kv_handler:handle(Command);
                 {error, _} = Error -> Error
             end,
    kprof_kv_formatter:format(Result).

%% @doc The kind of a request, for kprof's `identity_f': `GET' is `read',
%% `PUT' is `update', `CREATE' is `create', `DEL' is `delete' (the command
%% word in any case). Takes the call `{kprof_kv, request, [Bin]}', or the
%% handler's `{kprof_kv_handler, handle, [Command]}' with a parsed command.
%% Looks only at the command word, never fails, and anything else is
%% `undefined'.
-spec identity({module(), atom(), list()} | term()) -> identity() | undefined.
identity({kprof_kv, request, [Bin]}) when is_binary(Bin) ->
    verb_identity(first_word(Bin, 0));
identity({kprof_kv_handler, handle, [Command]}) ->
    case Command of
        {get, _} -> read;
        {put, _, _} -> update;
        {create, _, _} -> create;
        {delete, _} -> delete;
        _ -> undefined
    end;
identity(_) ->
    undefined.

first_word(Bin, N) when N < byte_size(Bin), N < 8 ->
    case binary:at(Bin, N) of
        C when C =:= $\s; C =:= $\r; C =:= $\n -> binary:part(Bin, 0, N);
        _ -> first_word(Bin, N + 1)
    end;
first_word(Bin, N) ->
    binary:part(Bin, 0, N).

verb_identity(Verb) ->
    case kprof_kv_parser:verb(Verb) of
        get -> read;
        put -> update;
        create -> create;
        delete -> delete;
        undefined -> undefined
    end.

%%% ---------------------------------------------------------------------
%%% Starting and stopping

%% @doc `start(#{})'.
-spec start() -> {ok, pid()} | {error, term()}.
start() ->
    start(#{}).

%% @doc Starts the key-value layers (`kprof_kv_sup', options as there) under
%% a new owner process registered as `kprof_kv_owner', not linked to the
%% caller; returns the owner once every layer runs. The owner stops them
%% after `max_lifetime_ms' (default 1 hour, at most 24 hours) or at
%% `stop/0'. `{error, {already_started, Sup}}' when `kprof_kv_sup' already
%% runs (the sample application starts it too).
-spec start(options() | #{max_lifetime_ms => 1000..86400000}) -> {ok, pid()} | {error, term()}.
start(Opts) when is_map(Opts) ->
    case {whereis(?OWNER), whereis(kprof_kv_sup)} of
        {undefined, undefined} ->
            Lifetime = max(1000, min(86400000, maps:get(max_lifetime_ms, Opts, 3600000))),
            SupOpts = maps:remove(max_lifetime_ms, Opts),
            {Pid, Ref} = spawn_monitor(?MODULE, owner_init, [self(), {SupOpts, Lifetime}]),
            receive
                {Pid, started} ->
                    demonitor(Ref, [flush]),
                    {ok, Pid};
                {'DOWN', Ref, process, Pid, Reason} ->
                    {error, Reason}
            after 30000 ->
                    exit(Pid, kill),
                    {error, timeout}
            end;
        {_, undefined} ->
            {error, already_started};
        {_, Sup} ->
            {error, {already_started, Sup}}
    end.

%% @doc Stops what `start/1' started (waits at most 15 s); `ok' if nothing
%% was started by it. Leaves a `kprof_kv_sup' under the sample application
%% alone.
-spec stop() -> ok.
stop() ->
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

%% @private
-spec owner_init(pid(), {options(), pos_integer()}) -> ok.
owner_init(Caller, {Opts, Lifetime}) ->
    process_flag(trap_exit, true),
    true = register(?OWNER, self()),
    case kprof_kv_sup:start_link(Opts) of
        {ok, Sup} ->
            Caller ! {self(), started},
            Timer = erlang:send_after(Lifetime, self(), lifetime_over),
            owner_loop(Sup, Timer);
        {error, Reason} ->
            exit(Reason)
    end.

owner_loop(Sup, Timer) ->
    receive
        stop -> shutdown(Sup, Timer);
        lifetime_over -> shutdown(Sup, Timer);
        {'EXIT', Sup, _Reason} -> ok;
        _Other -> owner_loop(Sup, Timer)
    end.

shutdown(Sup, Timer) ->
    _ = erlang:cancel_timer(Timer),
    exit(Sup, shutdown),
    receive {'EXIT', Sup, _} -> ok
    after 10000 -> exit(Sup, kill)
    end,
    ok.

%%% ---------------------------------------------------------------------
%%% Delays

%% @doc The layers, in the order a request meets them.
-spec layers() -> [layer(), ...].
layers() ->
    [parser, handler, db, accounting, formatter].

%% @doc Makes every request spend at least `Microseconds' (0..1000000) in
%% `Layer' from now on; 0 removes the delay. `{error, not_running}' when the
%% key-value layers do not run (the setting lives with them).
-spec set_delay(layer(), 0..?MAX_DELAY_US) -> ok | {error, not_running}.
set_delay(Layer, Us) when is_integer(Us), Us >= 0, Us =< ?MAX_DELAY_US ->
    case lists:member(Layer, layers()) of
        true ->
            try ets:insert(?TABLE, {{delay, Layer}, Us}) of
                true -> ok
            catch
                error:badarg -> {error, not_running}
            end;
        false ->
            error({badarg, Layer})
    end;
set_delay(_Layer, Us) ->
    error({badarg, Us}).

%% @doc The delay of every layer, in microseconds (all 0 when not running).
-spec delays() -> #{layer() => non_neg_integer()}.
delays() ->
    maps:from_list([{L, delay_us(L)} || L <- layers()]).

%% @doc Spends `Layer''s delay: sleeps for a delay of 1 ms or more (then
%% busy-waits whatever the sleep fell short of), busy-waits for a shorter
%% one. Called by each layer once per request.
-spec delay(layer()) -> ok.
delay(Layer) ->
    case delay_us(Layer) of
        0 ->
            ok;
        Us ->
            Deadline = now_us() + Us,
            case Us div 1000 of
                0 -> ok;
                Ms -> timer:sleep(Ms)
            end,
            spin_until(Deadline)
    end.

delay_us(Layer) ->
    try ets:lookup_element(?TABLE, {delay, Layer}, 2)
    catch error:badarg -> 0
    end.

spin_until(Deadline) ->
    case now_us() >= Deadline of
        true -> ok;
        false -> spin_until(Deadline)
    end.

now_us() ->
    erlang:monotonic_time(microsecond).

%% @doc The registered names of a layer's processes, as a tuple (for routing
%% by hash); `{}' when the key-value layers do not run.
-spec pool(handler | db | accounting) -> tuple().
pool(Layer) ->
    try ets:lookup_element(?TABLE, {pool, Layer}, 2)
    catch error:badarg -> {}
    end.
