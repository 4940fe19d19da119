# A user's Mix project, as the tests build it: kprof by path (KPROF_PATH, a
# copy of erlang_agent/), a release holding it.
defmodule MixShop.MixProject do
  use Mix.Project

  def project do
    [
      app: :mix_shop,
      version: "1.0.0",
      elixir: "~> 1.14",
      deps: [{:kprof, path: System.fetch_env!("KPROF_PATH")}],
      releases: [mix_shop: [include_executables_for: [:unix]]]
    ]
  end

  def application do
    [mod: {MixShop.Application, []}, extra_applications: [:inets]]
  end
end
