defmodule MixShop.Web do
  @moduledoc """
  The httpd module of the shop: GET /price/ITEM answers the item's price,
  which MixShop.Store computes. (inets calls `do/1`, a reserved word in
  Elixir: hence `unquote(:do)`.)
  """
  require Record
  Record.defrecordp(:mod, Record.extract(:mod, from_lib: "inets/include/httpd.hrl"))

  def unquote(:do)(mod_data) do
    case to_string(mod(mod_data, :request_uri)) do
      "/price/" <> item ->
        price = MixShop.Store.price(item)
        {:proceed, [response: {200, Integer.to_charlist(price)}]}

      _ ->
        {:proceed, mod(mod_data, :data)}
    end
  end
end
