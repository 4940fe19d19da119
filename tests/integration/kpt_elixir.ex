# The Elixir workload of tests/integration/elixir_names: processes that spin
# in a named function (spin/2) and in an anonymous one (the fn in loop/1),
# and requests for kprof tiers (handle/1, a tier on work/1).
defmodule KptElixir.Hot do
  # Starts `n` spinners and a request loop, then writes READY (a charlist).
  def start(ready, n) do
    for _ <- 1..n, do: spawn(fn -> loop(0) end)
    spawn(fn -> requests() end)
    # the node stops by itself after 10 minutes, should the test be killed
    spawn(fn -> Process.sleep(600_000) && :erlang.halt() end)
    :ok = :file.write_file(ready, "ready")
  end

  def loop(n) do
    hot = fn x -> spin(x, 20_000) + 1 end
    n = spin(n, 20_000) + hot.(n)
    loop(rem(n, 1_000_000))
  end

  def spin(x, 0), do: x
  def spin(x, k), do: spin(x + 1, k - 1)

  def requests do
    handle(:get)
    Process.sleep(5)
    requests()
  end

  def handle(kind), do: {kind, work(1_000)}

  def work(k), do: spin(0, k) + 1
end
