%%% @doc Tier tracing started from inside the node (`kprof:start_trace/1').
%%%
%%% The node only emits: the work is done by the `kprof' program, which this
%%% process starts as an OS process (`kprof tiers --session'). It attaches
%%% back to this node as a hidden node (the cookie goes in its environment,
%%% never on a command line), fetches the options from here, starts
%%% kprof_tiers and reads the trace port like `kprof tiers' from a shell.
%%% What the program prints (call trees of `print_calls' and
%%% `slow_threshold', warnings, the final table) is logged with logger.
%%%
%%% The program is found from the application environment (`{kprof,
%%% executable}'), else on the PATH, else as `priv/kprof' of the kprof
%%% application.
-module(kprof_session).

-export([start/1, stop/0, options/0, executable/0]).
%% spawned
-export([init/3]).

-define(START_TIMEOUT, 15000).
-define(MAX_OUTPUT_LINES, 50).

%% @doc Starts the program with checked `Options' and waits until tracing
%% runs.
-spec start([kprof_tiers:option()]) -> ok | {error, string()}.
start(Options) ->
    case {whereis(?MODULE), whereis(kprof_tiers), is_alive(), executable()} of
        {undefined, undefined, true, {ok, Exe}} ->
            Self = self(),
            Pid = spawn(?MODULE, init, [Self, Options, Exe]),
            Ref = monitor(process, Pid),
            receive
                {Pid, started} -> demonitor(Ref, [flush]), ok;
                {'DOWN', Ref, process, Pid, {failed, Why}} -> {error, Why};
                {'DOWN', Ref, process, Pid, Why} ->
                    {error, lists:flatten(io_lib:format("kprof session ended: ~tp", [Why]))}
            end;
        {_, _, _, {error, Why}} -> {error, Why};
        {_, _, false, _} ->
            {error, "the node is not distributed: start it with -sname or -name, kprof's "
                    "collector attaches to it as a hidden node"};
        _ ->
            {error, "tier tracing already runs on this node; kprof:stop_trace() first"}
    end.

%% @doc Stops the session: tracing stops, the program writes its final
%% report and exits.
-spec stop() -> ok.
stop() ->
    kprof_tiers:stop(),
    case whereis(?MODULE) of
        undefined -> ok;
        Pid ->
            Ref = monitor(process, Pid),
            receive {'DOWN', Ref, process, Pid, _} -> ok
            after 10000 -> demonitor(Ref, [flush]), exit(Pid, kill), ok
            end
    end.

%% @doc The options of the running session, for the program.
-spec options() -> [kprof_tiers:option()].
options() ->
    Ref = make_ref(),
    ?MODULE ! {options, self(), Ref},
    receive {Ref, Options} -> Options after 5000 -> [] end.

%% @doc The kprof program: `{kprof, executable}' (a string, or a binary as
%% Elixir's config writes it), else the PATH, else `priv/kprof' of the kprof
%% application.
-spec executable() -> {ok, string()} | {error, string()}.
executable() ->
    case application:get_env(kprof, executable, undefined) of
        undefined -> found([os:find_executable("kprof"), priv_executable()]);
        Env when is_list(Env); is_binary(Env) ->
            Path = unicode:characters_to_list(Env),
            case is_list(Path) andalso filelib:is_regular(Path) of
                true -> {ok, Path};
                false -> {error, lists:flatten(io_lib:format(
                                   "{kprof, executable} is ~tp, which is no file: set it to the "
                                   "kprof program's path", [Env]))}
            end;
        Env ->
            {error, lists:flatten(io_lib:format("{kprof, executable} is ~tp, not a path", [Env]))}
    end.

priv_executable() ->
    case code:priv_dir(kprof) of
        {error, _} -> false;
        Dir -> filename:join(Dir, "kprof")
    end.

found(Candidates) ->
    case [P || P <- Candidates, is_list(P), filelib:is_regular(P)] of
        [Exe | _] -> {ok, Exe};
        [] -> {error, "the kprof program was not found: set the application environment "
                      "{kprof, executable} to its path, or put it on the PATH"}
    end.

%% @private
-spec init(pid(), [kprof_tiers:option()], string()) -> no_return().
init(Starter, Options, Exe) ->
    %% Called over rpc, start/1 runs under the caller's group leader, on the
    %% caller's node, and logger sends the events of a process whose group
    %% leader is remote to that node: the session's lines (the final table)
    %% belong in this node's log.
    _ = [group_leader(User, self()) || User <- [whereis(user)], is_pid(User)],
    register(?MODULE, self()),
    process_flag(trap_exit, true),
    Port = open_port({spawn_executable, Exe},
                     [{args, ["tiers", "--session", "--node", atom_to_list(node()), "-q"]},
                      {env, [{"KPROF_COOKIE", atom_to_list(erlang:get_cookie())}]},
                      {line, 4096}, stderr_to_stdout, exit_status, use_stdio]),
    starting(Starter, Port, Options, []).

%% Until kprof_tiers runs: answer the program's request for the options,
%% keep its output for the error.
starting(Starter, Port, Options, Lines) ->
    receive
        {options, From, Ref} ->
            From ! {Ref, Options},
            starting(Starter, Port, Options, Lines);
        {kprof_tiers, started} ->
            Starter ! {self(), started},
            running(Port, Options);
        {Port, {data, {_, Line}}} ->
            starting(Starter, Port, Options, lists:sublist([Line | Lines], ?MAX_OUTPUT_LINES));
        {Port, {exit_status, Status}} ->
            exit({failed, failure(Status, Lines)})
    after ?START_TIMEOUT ->
        try port_close(Port) catch error:badarg -> ok end,
        exit({failed, failure(timeout, Lines)})
    end.

failure(Status, Lines) ->
    Text = case Lines of
               [] -> "no output";
               _ -> string:join([strip(L) || L <- lists:reverse(Lines)], "; ")
           end,
    lists:flatten(io_lib:format("kprof tiers did not start (~p): ~ts", [Status, Text])).

strip("kprof: " ++ Rest) -> Rest;
strip(Line) -> Line.

running(Port, Options) ->
    receive
        {options, From, Ref} ->
            From ! {Ref, Options},
            running(Port, Options);
        {Port, {data, {_, Line}}} ->
            logger:notice("kprof: ~ts", [strip(Line)]),
            running(Port, Options);
        {Port, {exit_status, 0}} ->
            exit(normal);
        {Port, {exit_status, Status}} ->
            logger:warning("kprof tiers exited with status ~p", [Status]),
            exit(normal);
        {'EXIT', _, _} ->
            kprof_tiers:stop(),
            exit(normal);
        _ ->
            running(Port, Options)
    end.
