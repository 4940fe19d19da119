%%% @doc The guard of kprof's code in a node: none of it stays once kprof is
%%% done.
%%%
%%% The kprof program loads its modules into a node whose code path has none
%%% (code:load_binary/3 over the distribution, sampler/node/agent.c). This
%%% module's process, the <em>unloader</em> (registered `kprof_unload'),
%%% knows who still needs that code and removes it when no one does, the
%%% tracer NIF with it (purging kprof_tracer unloads its library).
%%%
%%% == Who needs kprof's code ==
%%% <ul>
%%% <li>Each kprof program attached to the node (a hidden C node): it calls
%%%   hold/1 once its modules are loaded and release/1 when it stops. A
%%%   program that is gone without release/1 (`kill -9') is a nodedown.</li>
%%% <li>Each of kprof's guards (kprof_agent's, kprof_tiers', kprof_rtrace's):
%%%   they undo kprof's settings after the program went, with kprof's code,
%%%   so they call watch/1 and the unloader waits until they have ended.</li>
%%% </ul>
%%% Several programs may be attached at once (`kprof record' and `kprof
%%% tiers', or two records): the last one out cleans up. A program that
%%% holds while the unloader is already removing the code is told to load
%%% it again (hold/1 says `retry').
%%%
%%% == What goes ==
%%% Only what kprof loaded: a module of kprof_agent:modules() whose code
%%% came from kprof's binary (code:is_loaded/1 names the file kprof gave,
%%% "Module.beam", not a file of the code path). A node whose release ships
%%% kprof keeps its own modules, and one of them that kprof replaced (the
%%% release's is another build) is loaded again from the node's code path.
%%% Each module goes as code:soft_purge/1, code:delete/1,
%%% code:soft_purge/1: a process still running kprof's code is never killed.
%%% The purge is tried again for at most ?PURGE_MS (processes kprof killed
%%% take a moment to go, kprof_calibrate's end by themselves within 3 s);
%%% after that the old code stays and the logger says so.
%%%
%%% == Last of all, itself ==
%%% A process cannot purge the module it runs. The unloader deletes its own
%%% module last (it goes on running the old code), then spawns a process that
%%% runs only OTP code, erl_eval evaluating expressions parsed here (no fun
%%% of a kprof module), which waits for the unloader to exit and purges the
%%% module. A program waiting in release/1 sees `unloading' and then waits
%%% for erlang:check_old_code(kprof_unload) to turn false.
-module(kprof_unload).

-export([hold/1, release/1, watch/1]).
%% spawned
-export([init/1]).

-define(NAME, ?MODULE).
%% How long hold/1 waits for the unloader, and release/1 for it to finish.
-define(HOLD_MS, 5000).
-define(RELEASE_MS, 15000).
%% Purges are tried every ?RETRY_MS for at most ?PURGE_MS.
-define(PURGE_MS, 5000).
-define(RETRY_MS, 20).

-record(state, {modules :: [module()],                % kprof_agent:modules()
                nodes = #{} :: #{node() => pos_integer()},
                guards = #{} :: #{reference() => pid()},
                %% release/1 calls answered once the guards have ended
                waiting = [] :: [{pid(), reference()}]}).

%% @doc Called by a kprof program (`Node', a hidden C node) once kprof's
%% modules are loaded: the code stays until the program calls release/1 or
%% goes away. Starts the unloader if none runs. `retry' when the unloader is
%% removing kprof's code at this moment: load the modules again, then hold.
-spec hold(Node :: node()) -> ok | retry.
hold(Node) when is_atom(Node) ->
    case call(unloader(), {hold, Node}, ?HOLD_MS) of
        ok -> ok;
        _ -> retry
    end.

%% @doc Called by a kprof program when it stops: `kept' while another kprof
%% still holds; else, once kprof's guards have ended (its agent may still be
%% stopping), `done' when kprof's code is gone, or was the node's own, and
%% `unloading' when everything is gone but this module, whose purge follows
%% as soon as the caller's process has returned (see the module's doc).
-spec release(Node :: node()) -> kept | done | unloading.
release(Node) when is_atom(Node) ->
    case call(whereis(?NAME), {release, Node}, ?RELEASE_MS) of
        kept -> kept;
        unloading -> unloading;
        _ -> done
    end.

%% @doc Called by each of kprof's guards as it starts: kprof's code stays
%% until `Guard' has ended. Nothing when no unloader runs (kprof's code is
%% the node's own, or kprof runs from inside the node).
-spec watch(Guard :: pid()) -> ok.
watch(Guard) when is_pid(Guard) ->
    case whereis(?NAME) of
        undefined -> ok;
        Unloader -> Unloader ! {watch, Guard}, ok
    end.

%% A request and its answer; `gone' when the unloader is not there or
%% ended before answering, `timeout' past Ms.
call(undefined, _Request, _Ms) ->
    gone;
call(Unloader, Request, Ms) ->
    Ref = monitor(process, Unloader),
    Unloader ! {Request, self(), Ref},
    receive
        {Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, process, _, _} -> gone
    after Ms ->
        demonitor(Ref, [flush]),
        timeout
    end.

%% The running unloader, else a new one; undefined when a new one lost the
%% race for the name to one that has ended meanwhile.
unloader() ->
    case whereis(?NAME) of
        undefined ->
            Pid = spawn(?MODULE, init, [self()]),
            Ref = monitor(process, Pid),
            receive
                {Pid, registered} -> demonitor(Ref, [flush]), Pid;
                {'DOWN', Ref, process, Pid, _} -> whereis(?NAME)
            after ?HOLD_MS ->
                demonitor(Ref, [flush]),
                exit(Pid, kill),
                undefined
            end;
        Pid ->
            Pid
    end.

%% @private
-spec init(pid()) -> ok.
init(Starter) ->
    try register(?NAME, self()) of
        true ->
            Starter ! {self(), registered},
            loop(#state{modules = kprof_agent:modules()})
    catch
        error:badarg -> ok % another one runs
    end.

loop(S = #state{nodes = Nodes, guards = Guards, waiting = Waiting}) ->
    receive
        {{hold, Node}, From, Ref} ->
            N = maps:get(Node, Nodes, 0),
            _ = case N of
                    0 -> monitor_node(Node, true);
                    _ -> true
                end,
            From ! {Ref, ok},
            %% the code stays: those waiting for its removal are done
            _ = [F ! {R, kept} || {F, R} <- Waiting],
            loop(S#state{nodes = Nodes#{Node => N + 1}, waiting = []});
        {{release, Node}, From, Ref} ->
            Left = case Nodes of
                       #{Node := 1} -> monitor_node(Node, false), maps:remove(Node, Nodes);
                       #{Node := N} -> Nodes#{Node := N - 1};
                       #{} -> Nodes
                   end,
            case map_size(Left) of
                0 ->
                    %% the caller's guards may not have ended yet (its agent
                    %% stops as this call runs): it waits for them
                    next(S#state{nodes = Left, waiting = [{From, Ref} | Waiting]});
                _ ->
                    From ! {Ref, kept},
                    loop(S#state{nodes = Left})
            end;
        {watch, Guard} ->
            loop(S#state{guards = Guards#{monitor(process, Guard) => Guard}});
        {nodedown, Node} ->
            next(S#state{nodes = maps:remove(Node, Nodes)});
        {'DOWN', Ref, process, _, _} ->
            next(S#state{guards = maps:remove(Ref, Guards)});
        _ ->
            loop(S)
    end.

%% The unloader ends once kprof's code is gone, keeping its name until
%% then: a kprof attaching meanwhile finds it, and is told to retry when it
%% has ended (hold/1).
next(S = #state{waiting = Waiting}) ->
    case idle(S) of
        true ->
            Reply = unload(S),
            _ = [F ! {R, Reply} || {F, R} <- Waiting],
            ok;
        false ->
            loop(S)
    end.

idle(#state{nodes = Nodes, guards = Guards}) ->
    map_size(Nodes) =:= 0 andalso map_size(Guards) =:= 0.

%% Removes kprof's code, this module's last (see the module's doc); what
%% release/1 answers.
unload(#state{modules = Modules}) ->
    Last = last_purge(),
    Ours = [M || M <- Modules, M =/= ?MODULE, loaded_by_kprof(M)],
    _ = [code:soft_purge(M) || M <- Ours],
    Deleted = [M || M <- Ours, code:delete(M)],
    Left = purge(Deleted, erlang:monotonic_time(millisecond) + ?PURGE_MS),
    Left =:= [] orelse
        logger:warning("kprof: processes still run the code of ~p: it stays in this node "
                       "as old code until they end and code:purge/1 removes it", [Left]),
    _ = [code:load_file(M) || M <- on_code_path(Deleted -- Left)],
    %% code:delete/1 fails when old code of this module is still run
    %% (an earlier unloader's, by a process that has not returned): then
    %% this one stays too
    case loaded_by_kprof(?MODULE) andalso code:soft_purge(?MODULE)
        andalso code:delete(?MODULE) of
        true ->
            _ = spawn(erl_eval, exprs, [Last, last_bindings()]),
            unloading;
        false ->
            done
    end.

%% kprof's agent (sampler/node/agent.c) loads Module with the file name
%% "Module.beam"; a module of the code path has its file's whole name.
loaded_by_kprof(Module) ->
    code:is_loaded(Module) =:= {file, atom_to_list(Module) ++ ".beam"}.

%% The modules whose old code is still run by some process at the deadline.
purge(Modules, Deadline) ->
    case [M || M <- Modules, not code:soft_purge(M)] of
        [] ->
            [];
        Left ->
            case erlang:monotonic_time(millisecond) < Deadline of
                true -> receive after ?RETRY_MS -> purge(Left, Deadline) end;
                false -> Left
            end
    end.

%% The modules the node's code path has, whose own copy kprof replaced and
%% which are loaded again. One listing of each directory of the path for all
%% of them: code:where_is_file/1 lists them all for each module (0.14 s on a
%% busy 2-core machine, 2.4 s for kprof's modules).
on_code_path([]) ->
    [];
on_code_path(Modules) ->
    Files = lists:usort(lists:append([Fs || Dir <- code:get_path(),
                                            {ok, Fs} <- [file:list_dir(Dir)]])),
    [M || M <- Modules, lists:member(atom_to_list(M) ++ ".beam", Files)].

%% What the last process evaluates: OTP code only (erl_eval runs it), so
%% that nothing of kprof runs while this module is purged. The same steps
%% as the others': soft purges for at most ?PURGE_MS, then the node's own
%% copy loaded again, if it has one.
last_purge() ->
    Text = "Ref = erlang:monitor(process, Unloader),\n"
           "receive {'DOWN', Ref, process, _, _} -> ok after Ms -> ok end,\n"
           "Purge = fun Try(0) -> false;\n"
           "            Try(N) -> case code:soft_purge(Module) of\n"
           "                          true -> true;\n"
           "                          false -> receive after Retry -> Try(N - 1) end\n"
           "                      end\n"
           "        end,\n"
           "case Purge(Ms div Retry) andalso code:where_is_file(File) =/= non_existing of\n"
           "    true -> code:load_file(Module);\n"
           "    false -> ok\n"
           "end.\n",
    {ok, Tokens, _} = erl_scan:string(Text),
    {ok, Exprs} = erl_parse:parse_exprs(Tokens),
    Exprs.

last_bindings() ->
    lists:foldl(fun({Name, Value}, B) -> erl_eval:add_binding(Name, Value, B) end,
                erl_eval:new_bindings(),
                [{'Unloader', self()}, {'Module', ?MODULE}, {'Ms', ?PURGE_MS},
                 {'Retry', ?RETRY_MS}, {'File', atom_to_list(?MODULE) ++ ".beam"}]).
