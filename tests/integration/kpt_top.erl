%%% The workload of tests/integration/top, with a known answer for each
%%% table of `kprof top':
%%% <ul>
%%% <li>`kpt_top_spinner' spends its time in `scorching_hot_leaf/2', called
%%%   (not tail-called) from `spin_loop/1', itself called from `run/0': the
%%%   top function by self share, the others above it by total share, and
%%%   the process at the top by CPU or reductions;</li>
%%% <li>`kpt_top_hoarder' holds a list of a million integers (about 16 MB):
%%%   the top process by memory;</li>
%%% <li>`kpt_top_mailbox' has 5,000 messages it never takes: the top
%%%   process by message queue length.</li>
%%% </ul>
%%% The last two wake every 100 ms, so that the agent's ranking by
%%% reductions picks them. start/0 returns at once; the processes are not
%%% linked to its caller.
-module(kpt_top).

-export([start/0, run/0, spin_loop/1, scorching_hot_leaf/2, hoard/1, mailbox/0]).

%% @doc Starts the three processes.
-spec start() -> ok.
start() ->
    register(kpt_top_spinner, spawn(?MODULE, run, [])),
    register(kpt_top_hoarder, spawn(fun() -> hoard(lists:seq(1, 1000000)) end)),
    Mailbox = spawn(?MODULE, mailbox, []),
    register(kpt_top_mailbox, Mailbox),
    [Mailbox ! {filler, I} || I <- lists:seq(1, 5000)],
    ok.

%% @doc The spinner's body; never returns.
-spec run() -> ok.
run() ->
    _ = spin_loop(0),
    ok.

%% @doc Calls the hot leaf forever; the call is not a tail call.
-spec spin_loop(integer()) -> no_return().
spin_loop(N) ->
    X = scorching_hot_leaf(N, 2000),
    spin_loop(X band 16#ffff).

%% @doc Pure arithmetic, `Count' times: where the spinner's time goes.
-spec scorching_hot_leaf(integer(), non_neg_integer()) -> integer().
scorching_hot_leaf(Acc, 0) -> Acc;
scorching_hot_leaf(Acc, Count) -> scorching_hot_leaf((Acc * 31 + Count) band 16#ffffff, Count - 1).

%% @doc Holds `List' on its heap.
-spec hoard(list()) -> no_return().
hoard(List) ->
    receive
        never_sent -> ok
    after 100 -> ok
    end,
    hoard(List).

%% @doc Keeps its queue: waits for a message never sent.
-spec mailbox() -> no_return().
mailbox() ->
    receive
        never_sent -> ok
    after 100 -> ok
    end,
    mailbox().
