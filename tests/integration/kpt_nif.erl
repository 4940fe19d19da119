%%% The Erlang side of kpt_nif.c (tests/integration/debug_names): main/2
%%% loads the NIF from a directory and keeps one process calling it.
-module(kpt_nif).
-export([main/2, spin/1]).
-on_load(init/0).

init() -> ok.

-spec main(string(), string()) -> no_return().
main(Dir, Ready) ->
    ok = erlang:load_nif(filename:join(Dir, "kpt_nif"), 0),
    spawn(fun Loop() -> spin(1), Loop() end),
    ok = file:write_file(Ready, "ready\n"),
    receive after infinity -> ok end.

-spec spin(non_neg_integer()) -> non_neg_integer().
spin(_) -> erlang:nif_error(not_loaded).
