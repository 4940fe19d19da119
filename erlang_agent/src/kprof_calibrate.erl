%%% @doc Known work for kprof's native sampler to learn the node's layout
%%% from, instead of from a table of OTP releases.
%%%
%%% Native CPU sampling reads, at each sample, the word that the JIT's
%%% current-process register points to: a pid term, whose bit layout
%%% changed in OTP 26 and may change again. And under a light BIF, the
%%% calling Erlang function is found in a slot of the runtime stack whose
%%% place is the JIT's choice. So kprof runs this known work while it
%%% samples: processes whose pids it is told spin in spin/1, then one calls
%%% a light BIF in hash/2. What the samples of those functions read at the
%%% register and in the stack tells which layout and which slot the node
%%% uses, or that kprof cannot be sure (and it samples cooperatively).
%%%
%%% kprof drives the phases, because on a busy node the work gets its share
%%% of the schedulers slowly: it sends `stop' to the spinners once it has
%%% enough of their samples, `go' then `stop' to the BIF caller, and `done'
%%% to all when it has learned. A spinner that stopped stays alive until
%%% `done': its memory is read when its samples are drained, and must still
%%% be its own. Everything is bounded: each process ends by itself
%%% ?MAX_MS milliseconds after start/0, whatever happens to kprof; they
%%% run at normal priority.
-module(kprof_calibrate).

-export([start/0]).
%% spawned
-export([spin/1, bif_caller/1]).

-define(MAX_MS, 3000).
-define(SPINNERS, 2).

%% @doc Spawns ?SPINNERS processes spinning in spin/1 and a BIF caller
%% waiting for `go'. Returns the spinners, the BIF caller, and the numbers
%% {N, S} of the spinners' pids (<0.N.S>).
-spec start() -> {[pid()], pid(), [{non_neg_integer(), non_neg_integer()}]}.
start() ->
    Deadline = erlang:monotonic_time(millisecond) + ?MAX_MS,
    Spinners = [spawn(?MODULE, spin, [Deadline]) || _ <- lists:seq(1, ?SPINNERS)],
    Caller = spawn(?MODULE, bif_caller, [Deadline]),
    {Spinners, Caller, [numbers(P) || P <- Spinners]}.

numbers(Pid) ->
    ["<0", N, S] = string:lexemes(pid_to_list(Pid), ".>"),
    {list_to_integer(N), list_to_integer(S)}.

%% @doc Spins in plain Erlang code until `stop' (or the deadline), then waits
%% for `done'.
-spec spin(integer()) -> ok | timeout.
spin(Deadline) ->
    spin(Deadline, 1),
    wait(done, Deadline).

%% The mailbox and the clock are looked at once every 65536 rounds, so
%% nearly every sample is in this function's own code.
spin(Deadline, N) when N band 16#ffff =:= 0 ->
    receive
        stop -> ok
    after 0 ->
        case erlang:monotonic_time(millisecond) >= Deadline of
            true -> ok;
            false -> spin(Deadline, N + 1)
        end
    end;
spin(Deadline, N) ->
    spin(Deadline, N + 1).

%% @doc Waits for `go', then calls erlang:phash2/1 (a light BIF whose time goes
%% to C code) on a list of 200 integers in hash/2 until `stop'. It runs after
%% the spinners: a BIF's time is not counted in reductions, and beside them
%% it would hold their scheduler for most of the time.
-spec bif_caller(integer()) -> ok.
bif_caller(Deadline) ->
    case wait(go, Deadline) of
        ok -> hash(Deadline, lists:seq(1, 200));
        timeout -> ok
    end.

hash(Deadline, Term) ->
    _ = erlang:phash2(Term),
    receive
        stop -> ok
    after 0 ->
        case erlang:monotonic_time(millisecond) >= Deadline of
            true -> ok;
            false -> hash(Deadline, Term)
        end
    end.

wait(Message, Deadline) ->
    receive
        Message -> ok;
        done -> timeout
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
        timeout
    end.
