%%% @doc The httpd module of the shop: GET /price/ITEM answers the item's
%%% price, which shop_store computes.
-module(shop_web).
-export([do/1]).
-include_lib("inets/include/httpd.hrl").

do(#mod{request_uri = "/price/" ++ Item}) ->
    Price = shop_store:price(list_to_binary(Item)),
    {proceed, [{response, {200, integer_to_list(Price)}}]};
do(#mod{data = Data}) ->
    {proceed, Data}.
