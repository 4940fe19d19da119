#!/usr/bin/env bash
# The Collector harness of the kprof push tests, end to end and without
# kprof: starts the real OpenTelemetry Collector (tests/support/otelcol.sh),
# POSTs a hand-built ExportProfilesServiceRequest (otlp_send.py) over
# OTLP/HTTP, restarts it on the same ports and POSTs again, then does the
# same over TLS (and a TLS handshake with its gRPC port), each time reading
# back with otlp_profiles.py what the Collector wrote. Status 77 (skipped,
# one line why) when scripts/otelcol could not build the Collector.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
test_name=otelcol_selftest
work=$(mktemp -d "${TMPDIR:-/tmp}/kpt_otelcol.XXXXXX")
# shellcheck source=otelcol.sh
. "$here/otelcol.sh"

fail() {
  local msg="$*"
  printf '%s: FAIL: %s\n' "$test_name" "${msg//$'\n'/ | }" >&2
  exit 1
}
cleanup() {
  local rc=$?
  set +e
  otelcol_cleanup "$rc"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -n "${KPT_KEEP:-}" ]; then
    printf '%s: kept %s\n' "$test_name" "$work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

otelcol_require

# check SERVICE...: the Collector wrote one export per SERVICE, in order,
# each what otlp_send.py sent, as otlp_profiles.py resolves it
check() {
  python3 - "$here" "$OTELCOL_OUT" "$@" <<'EOF' || fail "$OTELCOL_OUT does not read back as sent: $(head -c 600 "$OTELCOL_OUT")"
import sys
sys.path.insert(0, sys.argv[1])
import otlp_profiles

path, services = sys.argv[2], sys.argv[3:]
exports = otlp_profiles.read_file(path)
got = [[r["attributes"].get("service.name") for r in e["resources"]] for e in exports]
assert got == [[s] for s in services], f"services {got}, expected {services}"
for s in otlp_profiles.samples(exports):
    assert (s["type"], s["unit"]) == ("cpu", "nanoseconds"), s
    assert s["attributes"] == {"thread.name": "scheduler 1"}, s["attributes"]
    names = [(f["function"], f["frame_type"], f["mapping"], f["file"], f["line"]) for f in s["stack"]]
    assert names == [("main", "beam", "beam.smp", "kprof_selftest.erl", 10),
                     ("work", "beam", "beam.smp", "kprof_selftest.erl", 20)], names
    assert s["values"] == [10_000_000] * 3 and s["total"] == 30_000_000, s["values"]
    t0 = s["time_unix_nano"]
    assert s["timestamps_unix_nano"] == [t0 + 1_000_000, t0 + 11_000_000, t0 + 21_000_000], s
    assert s["duration_nano"] == 1_000_000_000, s["duration_nano"]
summary = otlp_profiles.summary(exports)
assert [p["samples"] for e in summary for r in e["resources"] for p in r["profiles"]] == [1] * len(services)
folded = otlp_profiles.folded(exports, "cpu")
assert folded == {"main;work": 30_000_000 * len(services)}, folded
assert otlp_profiles.folded(exports, "wall") == {}
EOF
}

# --- plain OTLP/HTTP, and a restart on the same ports ---
otelcol_start "$work/plain" || fail "the Collector did not start"
[ "$OTELCOL_GRPC" != "$OTELCOL_HTTP" ] || fail "one port for gRPC and HTTP: $OTELCOL_GRPC"
python3 "$here/otlp_send.py" post "http://$OTELCOL_HTTP/v1development/profiles" --service plain-1 ||
  fail "POST over HTTP failed"
otelcol_wait_exports 1 || fail "no export written"
check plain-1
grpc=$OTELCOL_GRPC http=$OTELCOL_HTTP
otelcol_stop
python3 "$here/otlp_send.py" post "http://$http/v1development/profiles" --service nobody 2>/dev/null &&
  fail "a POST went through to a stopped Collector"
otelcol_restart_same_ports || fail "the Collector did not start again on $grpc and $http"
[ "$OTELCOL_GRPC $OTELCOL_HTTP" = "$grpc $http" ] || fail "restarted on $OTELCOL_GRPC $OTELCOL_HTTP, not $grpc $http"
python3 "$here/otlp_send.py" post "http://$OTELCOL_HTTP/v1development/profiles" --service plain-2 ||
  fail "POST after the restart failed"
otelcol_wait_exports 2 || fail "no second export written"
check plain-1 plain-2
otelcol_stop
printf '%s: ok: OTLP/HTTP, restart on the same ports\n' "$test_name" >&2

# --- TLS ---
otelcol_start "$work/tls" tls || fail "the Collector did not start with TLS"
[ -s "$OTELCOL_CA" ] || fail "no CA certificate"
python3 "$here/otlp_send.py" post "http://$OTELCOL_HTTP/v1development/profiles" 2>/dev/null &&
  fail "plain HTTP went through to the TLS receiver"
python3 "$here/otlp_send.py" post "https://$OTELCOL_HTTP/v1development/profiles" --service tls-1 \
  --ca "$OTELCOL_CA" || fail "POST over HTTPS failed"
python3 "$here/otlp_send.py" post "https://localhost:${OTELCOL_HTTP##*:}/v1development/profiles" \
  --service tls-2 --ca "$OTELCOL_CA" || fail "POST over HTTPS to localhost failed"
python3 "$here/otlp_send.py" tls "$OTELCOL_GRPC" --ca "$OTELCOL_CA" || fail "no TLS on the gRPC port"
otelcol_wait_exports 2 || fail "no exports written over TLS"
check tls-1 tls-2
otelcol_stop
printf '%s: ok: OTLP/HTTP over TLS, TLS on gRPC\n' "$test_name" >&2
