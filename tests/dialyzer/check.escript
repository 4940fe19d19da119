#!/usr/bin/env escript
%%% Dialyzer over the product: the modules of the kprof application (those
%%% its .app file lists, from their debug_info .beam files), against a PLT
%%% of the OTP applications they call, kept at PLT and built only when it is
%%% missing (a minute or two; later runs only check it). Fails on any
%%% warning but one kind: calls to cowboy from kprof_cowboy, the cowboy
%%% middleware, which has no compile-time dependency on cowboy (cowboy is
%%% not a dependency of kprof, nor installed here). Those are printed as
%%% notes. The -dialyzer attribute cannot say this on OTP 25 (no_unknown
%%% came with OTP 26), and turning unknown-function warnings off for all
%%% modules would hide a misspelt remote call anywhere else.
%%%
%%% Also fails when the .app file's modules and the .beam files of EBIN
%%% differ: every module analysed is one kprof ships.
%%%
%%% Usage: check.escript PLT EBIN PLT_APP...
-mode(compile).

-define(WARNINGS, [unknown, unmatched_returns, error_handling, extra_return, missing_return]).
%% {Module making the calls, module called}: unknown calls tolerated
-define(UNKNOWN_OK, [{kprof_cowboy, cowboy_req}]).

main([Plt, Ebin | PltApps]) when PltApps =/= [] ->
    Beams = product_beams(Ebin),
    ok = ensure_plt(Plt, [list_to_atom(A) || A <- PltApps]),
    Warnings = dialyzer:run([{analysis_type, succ_typings}, {init_plt, Plt},
                             {check_plt, false}, {files, Beams}, {warnings, ?WARNINGS}]),
    {Tolerated, Bad} = lists:partition(fun tolerated/1, Warnings),
    [io:format("note (cowboy is not installed): ~ts", [dialyzer:format_warning(W)])
     || W <- Tolerated],
    [io:format("~ts", [dialyzer:format_warning(W)]) || W <- Bad],
    io:format("dialyzer: ~b modules of the kprof application, ~b warnings~n",
              [length(Beams), length(Bad)]),
    halt(case Bad of [] -> 0; _ -> 1 end);
main(_) ->
    io:format(standard_error, "usage: check.escript PLT EBIN PLT_APP...~n", []),
    halt(2).

%% The .beam files of the modules kprof.app lists, which must be exactly
%% those of EBIN.
product_beams(Ebin) ->
    {ok, [{application, kprof, Keys}]} = file:consult(filename:join(Ebin, "kprof.app")),
    Listed = lists:sort(proplists:get_value(modules, Keys)),
    Found = lists:sort([list_to_atom(filename:basename(F, ".beam"))
                        || F <- filelib:wildcard(filename:join(Ebin, "*.beam"))]),
    case Listed =:= Found of
        true -> ok;
        false ->
            io:format("dialyzer: kprof.app and ~ts differ: listed without a .beam ~p, "
                      ".beam files not listed ~p~n", [Ebin, Listed -- Found, Found -- Listed]),
            halt(1)
    end,
    [filename:join(Ebin, atom_to_list(M) ++ ".beam") || M <- Listed].

%% Builds the PLT when it is missing (into a temporary file renamed at the
%% end, so an interrupted build leaves none), else checks it against the
%% installed OTP (modules changed since are analysed again).
ensure_plt(Plt, Apps) ->
    case filelib:is_regular(Plt) of
        true ->
            _ = dialyzer:run([{analysis_type, plt_check}, {init_plt, Plt}]),
            ok;
        false ->
            io:format("dialyzer: building the PLT of ~p into ~ts~n", [Apps, Plt]),
            ok = filelib:ensure_dir(Plt),
            Tmp = Plt ++ ".tmp",
            _ = dialyzer:run([{analysis_type, plt_build}, {output_plt, Tmp},
                              {files_rec, [filename:join(code:lib_dir(A), "ebin") || A <- Apps]},
                              {warnings, []}]),
            ok = file:rename(Tmp, Plt)
    end.

tolerated({warn_unknown, {File, _}, {unknown_function, {Called, _, _}}}) ->
    Caller = list_to_atom(filename:basename(File, ".erl")),
    lists:member({Caller, Called}, ?UNKNOWN_OK);
tolerated(_) ->
    false.
