defmodule MixShop.Application do
  @moduledoc """
  The shop: a price server (MixShop.Store), a client that asks it for
  prices all the time (MixShop.Load), and an inets httpd front whose
  requests :kprof_httpd can trace. The port it listens on, chosen by the
  system, is written to the `:port_file` of the environment.
  """
  use Application

  @impl true
  def start(_type, _args) do
    {:ok, sup} = Supervisor.start_link([MixShop.Store, MixShop.Load], strategy: :one_for_one)
    root = Application.fetch_env!(:mix_shop, :root) |> String.to_charlist()

    {:ok, httpd} =
      :inets.start(:httpd,
        port: 0,
        bind_address: {127, 0, 0, 1},
        server_name: ~c"mix_shop",
        server_root: root,
        document_root: root,
        modules: [:kprof_httpd, MixShop.Web],
        customize: :kprof_httpd
      )

    [port: port] = :httpd.info(httpd, [:port])
    File.write!(Application.fetch_env!(:mix_shop, :port_file), Integer.to_string(port))
    {:ok, sup}
  end
end
