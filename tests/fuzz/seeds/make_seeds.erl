%%% Writes the seed inputs of the fuzz targets of node data (tests/fuzz/
%%% seeds/TARGET/*) from real terms, as the node sends them:
%%%   erl -noshell -s make_seeds main -s init stop   (run in this folder)
%%% The files are committed; run it again when a wire format changes.
-module(make_seeds).
-export([main/0]).

-spec main() -> ok.
main() ->
    Pid = self(),
    Other = spawn(fun() -> ok end),
    Stack = <<1:32, 10:32, 2:32, 0:32>>,
    Sample = {Pid, running, 1200, 0, 2688, 233, 233, 12, 0, 0, 3, Stack},
    Tick = fun(Samples, Reset) ->
                   {-576460751234567, [{1, lists, seq, 2}, {2, kpt_node, hot_spin, 2}],
                    [{Pid, {registered, <<"hot">>}}, {Other, {initial, <<"m:f/1">>}}],
                    Samples, Reset, {2, 1, 140, 35}}
           end,
    seeds(sample_wire,
          [{reply_one_tick, <<0, (term_to_binary({kprof_samples, 0, 0, [Tick([Sample], true)]}))/binary>>},
           {reply_same_and_bare, <<1, (term_to_binary(
                {kprof_samples, 1, 2,
                 [Tick([Sample], true),
                  Tick([setelement(12, Sample, same), Other], false)]}))/binary>>},
           {stale_reply, <<2, (term_to_binary({kprof_samples, 3, 0, []}))/binary>>},
           {other_message, <<0, (term_to_binary({'DOWN', make_ref(), process, Pid, x}))/binary>>}]),
    Token = {0, Pid, 3, Other, 2},
    seeds(tier_events,
          [{call, term_to_binary({trace_ts, Pid, call, {m, f, 1}, Token, 1000})},
           {entry, term_to_binary({trace_ts, Pid, call, {kprof_kv_db, get, 2},
                                   [<<"GET k1">>, Token], 1000})},
           {return, term_to_binary({trace_ts, Pid, return_from, {m, f, 1}, ok, 2000})},
           {exception, term_to_binary({trace_ts, Pid, exception_from, {m, f, 1},
                                       {error, badarg}, 2000})},
           {with_fun, term_to_binary({trace_ts, Pid, return_from, {lists, seq, 2},
                                      fun lists:seq/2, 3})}]),
    seeds(trace_events,
          [{call, term_to_binary({trace_ts, Pid, call, {m, f, 1}, 1000})},
           {return_to, term_to_binary({trace_ts, Pid, return_to, {m, g, 0}, 1001})},
           {in, term_to_binary({trace_ts, Pid, in, {m, f, 1}, 1002})},
           {spawn, term_to_binary({trace_ts, Pid, spawn, Other, {m, f, [a]}, 1003})},
           {gc, term_to_binary({trace_ts, Pid, gc_minor_start, [{heap_size, 10}], 1004})},
           {meta_call, term_to_binary({trace_ts, Pid, call, {m, f, [1, make_ref()]}, 1005})},
           {begin_mark, term_to_binary({<<"abc">>, #{max_events => 10, max_duration_ms => 5}})},
           {end_mark, term_to_binary({<<"abc">>, node_backlog})}]),
    PidExt = term_to_binary(Pid),
    PidRec = fun(Id) -> <<100, Id:32/little, (byte_size(PidExt)):16/little, PidExt/binary>> end,
    Mfa = <<101, 0:32/little, 5, "lists", 3, "seq", 2>>,
    Ev = fun(Kind, Arg, Ts) -> <<Kind, 0:32/little, Arg:32/little, Ts:64/little>> end,
    Mark = fun(Which, Msg) ->
                   Bin = term_to_binary(Msg),
                   <<102, Which, 0:32/little, 500:64/little, (byte_size(Bin)):32/little, Bin/binary>>
           end,
    seeds(nif_reader,
          [{trace, <<0, (PidRec(0))/binary, (Mark(1, {<<"t1">>, #{}}))/binary, Mfa/binary,
                     (Ev(1, 0, 1000))/binary, (Ev(3, 0, 1100))/binary, (Ev(4, 0, 1200))/binary,
                     (Ev(9, 0, 1300))/binary, (Mark(2, <<"t1">>))/binary>>},
           {split_small, <<3, (PidRec(0))/binary, Mfa/binary, (Ev(1, 0, 10))/binary,
                           104, (PidRec(0))/binary, 105, 7:32/little>>},
           {spawn_unnamed, <<9, (PidRec(0))/binary, (Ev(7, 16#ffffffff, 10))/binary>>}]),
    perf_record_seeds().

%% perf_event ring content as the kernel writes it for cpu/perf_events.c:
%% PERF_RECORD_SAMPLE (9) with IP, pid/tid, time, cpu, period, callchain
%% (PERF_CONTEXT_USER is -512, PERF_CONTEXT_KERNEL -128,
%% PERF_CONTEXT_GUEST_KERNEL -2176), abi, the user registers bx, bp, sp,
%% ip, r12-r15 and the user stack (size, bytes, dyn_size; a size of 0 alone
%% without registers); PERF_RECORD_LOST (2).
perf_record_seeds() ->
    User = 16#10000000000000000 - 512,
    Kernel = 16#10000000000000000 - 128,
    GuestKernel = 16#10000000000000000 - 2176,
    Sp = 16#7ffd0000a000,
    Regs = <<16#55978016a000:64/little, (Sp + 64):64/little, Sp:64/little,
             16#7f0000001000:64/little, 16#ffffff:64/little, 16#55978016a2b8:64/little,
             1000:64/little, 16#7f66c204210:64/little>>,
    %% a stack copy: a frame record [rbp, return address] and padding
    Stack = fun(Size, Dyn) ->
                    Data = <<(Sp + 64):64/little, 16#7f0000002000:64/little,
                             0:((Size - 16) * 8)>>,
                    <<Size:64/little, Data/binary, Dyn:64/little>>
            end,
    Sample = fun(Misc, Chain, Abi, StackPart) ->
                     Body = <<16#7f0000001000:64/little, 467:32/little, 479:32/little,
                              123456789:64/little, 1:32/little, 0:32/little,
                              1003009:64/little, (length(Chain)):64/little,
                              << <<Ip:64/little>> || Ip <- Chain >>/binary, Abi:64/little,
                              (case Abi of 0 -> <<0:64/little>>; _ -> <<Regs/binary, StackPart/binary>> end)/binary>>,
                     <<9:32/little, Misc:16/little, (8 + byte_size(Body)):16/little, Body/binary>>
             end,
    Lost = <<2:32/little, 0:16/little, 24:16/little, 1:64/little, 42:64/little>>,
    seeds(perf_record,
          [{user_samples, <<(Sample(2, [User, 16#7f0000001000, 16#7f0000002000], 2, Stack(256, 200)))/binary,
                            (Sample(2, [User, 16#7f0000003000], 2, Stack(64, 0)))/binary>>},
           {kernel_sample, Sample(1, [Kernel, 16#ffffffff81000000, User, 16#7f0000001000], 2,
                                  Stack(128, 128))},
           %% the kernel's chain of a system call (__x64_sys_getpid,
           %% do_syscall_64, entry_SYSCALL_64_after_hwframe), then a chain
           %% deeper than kprof keeps, and a guest's frames kept out
           {kernel_chain, <<(Sample(1, [Kernel, 16#ffffffff81382749, 16#ffffffff822575f9,
                                        16#ffffffff82400130, User, 16#7f0000001000,
                                        16#7f0000002000], 2, Stack(64, 64)))/binary,
                            (Sample(1, [Kernel | lists:seq(16#ffffffff81000000,
                                                           16#ffffffff81000000 + 69)]
                                       ++ [User, 16#7f0000001000], 2, Stack(64, 64)))/binary,
                            (Sample(1, [GuestKernel, 16#ffffffff81000010, Kernel,
                                        16#ffffffff81000020, User, 16#7f0000001000], 0,
                                    <<>>))/binary>>},
           {no_registers_then_lost, <<(Sample(1, [], 0, <<>>))/binary, Lost/binary>>}]).

seeds(Target, Files) ->
    Dir = atom_to_list(Target),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    [ok = file:write_file(filename:join(Dir, atom_to_list(Name)), Bin) || {Name, Bin} <- Files],
    ok.
