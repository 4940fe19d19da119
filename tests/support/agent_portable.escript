#!/usr/bin/env escript
%%% agent_portable.escript EBIN: fails when a .beam file of the agent in EBIN
%%% holds an instruction that some release kprof supports would refuse to
%%% load, naming the module, the function and the release. The agent's
%%% .beam files go into nodes of every release from the one they were
%%% compiled for to OTP 29 (kprof_agent's module doc):
%%%   - binary matching as OTP 25 compiles it (bs_start_match3,
%%%     bs_match_string, bs_get_*...): OTP 29 no longer loads it;
%%%   - bs_match, as OTP 26 and later compile it: OTP 25 does not know it.
%%% So the agent matches no binary pattern. The OTP matrix tests load the
%%% same files into real nodes; this check runs everywhere, in a second.
-mode(compile).

main([Ebin]) ->
    Beams = filelib:wildcard(filename:join(Ebin, "*.beam")),
    Beams =/= [] orelse fail(io_lib:format("no .beam file in ~ts", [Ebin])),
    Found = lists:append([refused(B) || B <- Beams]),
    [io:format(standard_error, "~s~n", [Line]) || Line <- Found],
    case Found of
        [] ->
            io:format("agent_portable: ~b modules, no binary matching~n", [length(Beams)]);
        _ ->
            fail("binary pattern matching in the agent (use the binary module)")
    end;
main(_) ->
    fail("usage: agent_portable.escript EBIN").

refused(Beam) ->
    {beam_file, Mod, _, _, _, Code} = beam_disasm:file(Beam),
    lists:usort([io_lib:format("~s:~s/~b: ~s (~s)", [Mod, F, A, Op, why(Op)])
                 || {function, F, A, _, Is} <- Code, I <- Is, Op <- [op(I)], why(Op) =/= ok]).

op(I) when is_tuple(I), element(1, I) =:= test -> element(2, I);
op(I) when is_tuple(I) -> element(1, I);
op(I) -> I.

why(bs_match) -> "OTP 26's binary matching: OTP 25 does not load it";
why(Op) when is_atom(Op) ->
    Old = [bs_start_match2, bs_start_match3, bs_start_match4, bs_match_string, bs_test_unit,
           bs_test_tail2, bs_skip_bits2, bs_skip_utf8, bs_skip_utf16, bs_skip_utf32,
           bs_get_integer2, bs_get_binary2, bs_get_float2, bs_get_utf8, bs_get_utf16,
           bs_get_utf32, bs_get_tail, bs_get_position, bs_set_position, bs_context_to_binary],
    case lists:member(Op, Old) of
        true -> "OTP 25's binary matching: OTP 29 does not load it";
        false -> ok
    end;
why(_) -> ok.

fail(Why) ->
    io:format(standard_error, "agent_portable: ~s~n", [Why]),
    halt(1).
