defmodule MixShop.Load do
  @moduledoc "Asks the store for prices without a pause: a busy process to profile."
  use Task, restart: :permanent

  def start_link(_), do: Task.start_link(fn -> loop(0) end)

  defp loop(n) do
    Enum.each(1..10, fn i -> MixShop.Store.price(rem(n + i, 100)) end)
    loop(n + 1)
  end
end
