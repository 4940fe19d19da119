%%% @doc The shop: a price server (shop_store), a load that asks it for
%%% prices all the time (shop_load, when the environment's `load' is true),
%%% and an inets httpd front whose requests kprof_httpd can trace. The
%%% port it listens on, chosen by the system, is written to `port_file'.
-module(shop_app).
-behaviour(application).
-export([start/2, stop/1]).

start(_Type, _Args) ->
    {ok, Sup} = shop_sup:start_link(),
    {ok, Root} = application:get_env(shop, root),
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {bind_address, {127, 0, 0, 1}},
                                      {server_name, "shop"}, {server_root, Root},
                                      {document_root, Root},
                                      {modules, [kprof_httpd, shop_web]},
                                      {customize, kprof_httpd}]),
    [{port, Port}] = httpd:info(Httpd, [port]),
    {ok, PortFile} = application:get_env(shop, port_file),
    ok = file:write_file(PortFile, integer_to_list(Port)),
    {ok, Sup}.

stop(_State) ->
    ok.
