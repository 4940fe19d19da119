%%% @doc The selection of the top processes, for kprof_agent.
%%%
%%% Each new selection runs in a <em>chooser</em>, a short-lived process linked
%%% to the agent: it lists every process, reads the value it is ranked by,
%%% writes the values to a fresh window table, ranks them against the
%%% current window, sends the agent the top processes and ends. Listing costs
%%% about 0.4 us a process (0.2 s at 500,000); in a process of its own it
%%% never delays the agent's ticks. A chooser runs at normal priority after
%%% the first selection, so that on a large node it takes its turn with the
%%% node's work instead of running ahead of it, and with a heap sized for the
%%% process list, so that it never garbage-collects: a collection cannot be
%%% interrupted, and a long-lived process holding the list collected for
%%% 10-73 ms at a time with 500,000 processes.
%%%
%%% The window is an ETS table, `{Pid, Value}', owned by the agent: off
%%% every heap, and never copied between processes. A chooser deletes the
%%% table that is no longer needed (deleting 500,000 entries takes 0.14 s,
%%% which the agent must not spend).
%%%
%%% Ranking is by change over the window (like recon's proc_window) for
%%% reductions and memory, by the current value for the queue length and
%%% sizes. Reductions discount the agent's own stack queries, each of which
%%% added one.
-module(kprof_select).

-export([window/0, drop/1, fill/4, start_chooser/2, total_heap/1]).
%% spawned
-export([chooser/1]).

%% A window table of {Pid, Value}: unnamed, so in fact an ets:tid(), but
%% ets:new/2 is specified to return ets:table().
-type window() :: ets:table().
-type job() :: #{agent := pid(), ref := reference(),
                 by := kprof_agent:select_by(), top := pos_integer(),
                 every := pos_integer(),           % --reselect, ms
                 own := [pid()],                   % never listed
                 queried := #{pid() => pos_integer()}, % our stack queries since the window began
                 old := window(), new := window(),
                 window_at := integer(),           % when the window began, ms
                 first_window := boolean(),        % it began when the agent started
                 again := boolean()}.              % choose again in a second regardless
-export_type([job/0, window/0]).

%% @doc A new, empty window table, owned by the caller.
-spec window() -> window().
window() ->
    ets:new(kprof_window, [set, public]).

%% @doc Deletes a window table in a process of its own: deleting a table of
%% 500,000 processes takes 0.14 s, which the caller does not wait for.
-spec drop(window()) -> ok.
drop(Table) ->
    _ = spawn(fun() -> ets:delete(Table) end),
    ok.

%% @doc Fills Table with the values of every process but Own, in a process
%% of its own at high priority, and waits at most TimeoutMs for it (a
%% process missing from the window is then ranked by all its work).
-spec fill(window(), kprof_agent:select_by(), [pid()], timeout()) -> ok.
fill(Table, By, Own, TimeoutMs) ->
    Ref = make_ref(),
    Caller = self(),
    Filler = spawn_opt(fun() ->
                               _ = scan(erlang:processes(), Table, By, [self() | Own], [],
                                        none, #{}, []),
                               Caller ! {Ref, filled}
                       end, [link, {priority, high} | chooser_heap()]),
    receive
        {Ref, filled} -> ok
    after TimeoutMs ->
            unlink(Filler),
            exit(Filler, kill),
            ok
    end.

%% @doc Starts a chooser for Job, linked to the caller. It sends the job's
%% agent `{Ref, Selection, same_window | new_window, WindowStartMs}' and
%% deletes the table that is no longer needed: `new' when the window stays,
%% `old' when the new one begins.
-spec start_chooser(job(), high | normal) -> pid().
start_chooser(Job, Priority) ->
    %% no `monitor' option: a bare pid (spawn_opt/4 is specified to return
    %% either)
    case spawn_opt(?MODULE, chooser, [Job], [link, {priority, Priority} | chooser_heap()]) of
        Pid when is_pid(Pid) -> Pid
    end.

%% A heap for the process list and what each process adds, so that a
%% chooser never collects (bounded: past that it collects, at its priority).
chooser_heap() ->
    [{min_heap_size, min(10 * erlang:system_info(process_count) + 4096, 16#800000)}].

%% @private
%% Ranks every process against the window, writes their values to the new
%% window's table, and sends the agent the top processes and whether the
%% window stays (`same_window') or begins again now (`new_window').
-spec chooser(job()) -> ok.
chooser(#{agent := Agent, ref := Ref, by := By, top := Top, every := Every, own := Own,
          queried := Queried, old := Old, new := New, window_at := OldAt,
          first_window := First, again := Again0}) ->
    %% the first window began while kprof's own rpc calls were being served:
    %% rex's activity in it is ours
    Unranked = case First of true -> [whereis(rex)]; false -> [] end,
    Now = now_ms(),
    Busy = scan(erlang:processes(), New, By, [self() | Own], Unranked, Old, Queried, []),
    Selection = [P || {_, P} <- lists:sublist(lists:reverse(lists:sort(Busy)), Top)],
    Again = Again0 orelse length(Selection) < Top,
    Window = case Again andalso Now - OldAt < Every of
                 %% The first window is a few ms long, and fewer than `top'
                 %% processes may have run in a longer one: choose again in a
                 %% second, over the same window, longer by then, rather than
                 %% wait a whole interval with a short selection (top 1000 of
                 %% processes that wake every few seconds held a third of them
                 %% for 5 s). Our stack queries since the window began still
                 %% count against it.
                 true -> same_window;
                 false -> new_window
             end,
    %% the window table no longer needed, deleted here rather than in the agent
    ets:delete(case Window of same_window -> New; new_window -> Old end),
    Agent ! {Ref, Selection, Window, Now},
    ok.

%% Writes {Pid, Value} of every process of Procs but Own to Table and, unless
%% Old is `none' or the process is Unranked, ranks it against the window Old:
%% returns [{Rank, Pid}] of those ranked above 0. One pass, leaving little
%% garbage per process (the chooser's heap holds it all, see chooser_heap/0).
scan([], _Table, _By, _Own, _Unranked, _Old, _Queried, Acc) ->
    Acc;
scan([P | Rest], Table, By, Own, Unranked, Old, Queried, Acc) ->
    case not lists:member(P, Own) andalso rank_value(P, By) of
        V when is_integer(V) ->
            ets:insert(Table, {P, V}),
            case Old =/= none andalso not lists:member(P, Unranked) andalso
                rank(By, P, V, Old, Queried) of
                K when is_integer(K), K > 0 ->
                    scan(Rest, Table, By, Own, Unranked, Old, Queried, [{K, P} | Acc]);
                _ ->
                    scan(Rest, Table, By, Own, Unranked, Old, Queried, Acc)
            end;
        _ ->
            scan(Rest, Table, By, Own, Unranked, Old, Queried, Acc)
    end.

rank(By, P, V, Old, Queried) ->
    case by_change(By) of
        false -> V;
        true ->
            %% a process born since the window began did all its work in it
            Delta = abs(V - case ets:lookup(Old, P) of [{_, O}] -> O; [] -> 0 end),
            case By of
                %% our own stack queries each added one reduction
                reductions -> Delta - maps:get(P, Queried, 0);
                memory -> Delta
            end
    end.

%% The value a process is ranked by, read without waking it.
rank_value(P, reductions) ->
    case process_info(P, reductions) of {reductions, R} -> R; undefined -> undefined end;
rank_value(P, message_queue_len) ->
    case process_info(P, message_queue_len) of {_, N} -> N; undefined -> undefined end;
rank_value(P, What) ->
    case process_info(P, garbage_collection_info) of
        {_, Gc} -> gc_value(Gc, What);
        undefined -> undefined
    end.

gc_value(Gc, memory) -> total_heap(Gc) + proplists:get_value(stack_size, Gc, 0);
gc_value(Gc, total_heap_size) -> total_heap(Gc);
gc_value(Gc, bin_vheap) ->
    proplists:get_value(bin_vheap_size, Gc, 0) + proplists:get_value(bin_old_vheap_size, Gc, 0).

%% @doc The heap a garbage_collection_info list describes, in words: both
%% generations and heap fragments.
-spec total_heap([{atom(), non_neg_integer()}]) -> non_neg_integer().
total_heap(Gc) ->
    words(heap_block_size, Gc) + words(old_heap_block_size, Gc) + words(mbuf_size, Gc).

%% A size of a garbage_collection_info list, 0 when it is absent.
words(Key, Gc) ->
    case lists:keyfind(Key, 1, Gc) of
        {_, N} when is_integer(N), N >= 0 -> N;
        _ -> 0
    end.

%% Ranked by change over the window (like recon's proc_window) or by the
%% current value (queue length and sizes).
by_change(reductions) -> true;
by_change(memory) -> true;
by_change(_) -> false.

now_ms() -> erlang:monotonic_time(millisecond).
