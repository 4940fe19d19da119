#!/usr/bin/env escript
%%! -noshell
%% agent_sets.escript EBIN NAME:Entry+Entry... ...
%% Which of the agent's modules (EBIN's .beam files) each command loads into
%% a node: its entries (the modules the kprof program calls, or names in
%% trace patterns and tracer specs, which no call shows) and every module
%% they reach by calls that name their module (xref's module call graph;
%% apply/spawn with a literal module count). Prints one line a module,
%% "Module Mask", bit I of Mask set when the I-th NAME's set holds it.
%% Fails when an entry is no module of EBIN: a renamed module must not
%% leave a command without its code.
main([Ebin | Sets]) ->
    {ok, _} = xref:start(?MODULE, [{xref_mode, modules}]),
    {ok, Mods} = xref:add_directory(?MODULE, Ebin, [{warnings, false}]),
    {ok, Calls} = xref:q(?MODULE, "ME"),
    Edges = [{A, B} || {A, B} <- Calls, A =/= B, lists:member(B, Mods)],
    Reached = [reach(entries(Set, Mods), Edges) || Set <- Sets],
    Bits = lists:zip(lists:seq(0, length(Sets) - 1), Reached),
    [io:format("~s ~b~n", [M, lists:sum([1 bsl I || {I, In} <- Bits, lists:member(M, In)])])
     || M <- lists:sort(Mods)],
    halt(0).

entries(Set, Mods) ->
    [_Name, List] = string:split(Set, ":"),
    Entries = [list_to_atom(E) || E <- string:lexemes(List, "+")],
    case Entries -- Mods of
        [] -> Entries;
        Missing ->
            io:format(standard_error, "agent_sets: ~p named in ~s, but not one of ~s~n",
                      [Missing, Set, "the agent's modules"]),
            halt(1)
    end.

reach(Todo, Edges) -> reach(Todo, Edges, []).

reach([], _, Seen) -> Seen;
reach([M | Rest], Edges, Seen) ->
    case lists:member(M, Seen) of
        true -> reach(Rest, Edges, Seen);
        false -> reach([B || {A, B} <- Edges, A =:= M] ++ Rest, Edges, [M | Seen])
    end.
