# Read when the release boots: where the test wants files, and kprof's
# settings as a user writes them.
import Config

config :mix_shop,
  root: System.fetch_env!("SHOP_ROOT"),
  port_file: Path.join(System.fetch_env!("SHOP_ROOT"), "port")

config :kprof,
  rtrace: %{allow: true, dir: System.fetch_env!("SHOP_TRACES")},
  executable: System.fetch_env!("SHOP_KPROF")
