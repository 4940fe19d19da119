# The kprof application as a Mix dependency, e.g.
#   {:kprof, git: "URL", sparse: "erlang_agent"}  or  {:kprof, path: "../kprof/erlang_agent"}
#
# src/kprof.app.src is the one description of the application (version,
# dependencies, registered names): this file reads it rather than repeating
# it. The NIF is built by c_src/Makefile through the compiler below, so
# nothing comes from hex (elixir_make would).
defmodule Mix.Tasks.Compile.KprofNif do
  @moduledoc "Builds kprof's request-trace NIF into the application's priv/; makes inets' headers visible to the Erlang compiler."
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    # kprof_httpd includes inets' httpd.hrl, and Mix 1.15 and later keep
    # only the applications a dependency runs with on the code path: inets
    # is not one (kprof must not start it), so it is brought back here, for
    # the Erlang compiler that runs next
    if function_exported?(Mix, :ensure_application!, 1), do: Mix.ensure_application!(:inets)
    priv = Path.join(Mix.Project.app_path(), "priv")
    File.mkdir_p!(priv)

    case System.cmd("make", ["-C", "c_src", "PRIV_DIR=" <> priv], stderr_to_stdout: true) do
      {_, 0} ->
        {:ok, []}

      {out, status} ->
        Mix.shell().error(out)
        Mix.raise("kprof: building the NIF (make -C c_src) failed with status #{status}")
    end
  end
end

defmodule Kprof.MixProject do
  use Mix.Project

  {:ok, [{:application, :kprof, app}]} = :file.consult(Path.join(__DIR__, "src/kprof.app.src"))
  @app app

  def project do
    [
      app: :kprof,
      version: to_string(@app[:vsn]),
      language: :erlang,
      description: to_string(@app[:description]),
      compilers: [:kprof_nif | Mix.compilers()],
      erlc_options: [:debug_info],
      package: [licenses: @app[:licenses], links: Map.new(@app[:links])]
    ]
  end

  def application do
    [
      description: @app[:description],
      applications: @app[:applications],
      registered: @app[:registered],
      mod: @app[:mod],
      env: @app[:env]
    ]
  end
end
