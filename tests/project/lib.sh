# Shared by the tests of kprof in a user's project (sourced, not run): each
# builds a real project with Debian's rebar3 or Mix in its own temporary
# directory, depending on the kprof application by path, and starts its
# release as a user would. Each test runs as
#   TEST KPROF
# and gets: $work, a fresh node name ($node, long: NAME@127.0.0.1), a cookie
# nobody else knows ($cookie_value), the source checkout ($repo), and a
# trap that stops what the test started (stop_release, set by the test)
# and removes $work, even on failure.

set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 KPROF" >&2; exit 2; }
kprof=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
test_name=$(basename "$0")
work=$(mktemp -d "${TMPDIR:-/tmp}/kpt_${test_name}.XXXXXX")
cookie_value=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
release_log=

log() { printf '%s: %s\n' "$test_name" "$*" >&2; }
fail() {
  printf '%s: FAIL: %s\n' "$test_name" "$*" >&2
  exit 1
}
pass() { printf '%s: ok: %s\n' "$test_name" "$*" >&2; }

stop_release() { :; }
cleanup() {
  local rc=$?
  set +e
  stop_release
  if [ "$rc" -ne 0 ] && [ -n "$release_log" ]; then
    for f in $release_log; do
      [ -s "$f" ] && { log "--- $f:"; tail -n 40 "$f" >&2; }
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'printf "%s: FAIL: status %s at line %s: %s\n" "$test_name" "$?" "$LINENO" "$BASH_COMMAND" >&2' ERR

# the tools' own state (~/.mix, ~/.cache/rebar3) stays in the test's directory
export HOME=$work
export ERL_CRASH_DUMP=$work/erl_crash.dump
epmd -daemon 2>/dev/null || true

# kprof_copy DIR: a copy of what a user's project takes of a kprof
# checkout into DIR (made): the root's rebar.config (rebar3 takes the root)
# and erlang_agent/ (Mix takes that directory), without what an earlier
# build left in them; builds write into the copy, never into the source.
kprof_copy() {
  mkdir -p "$1/erlang_agent"
  cp "$repo/rebar.config" "$1/"
  (cd "$repo/erlang_agent" && tar --exclude=./priv --exclude=./_build --exclude=./deps -cf - .) |
    tar -xf - -C "$1/erlang_agent"
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND until it succeeds
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "$what: not after $seconds s"
    sleep 0.2
  done
}

# http_get URL [CURL_ARGS...]: the body, or the test fails
http_get() {
  curl -sS --max-time 20 -f "$@" || fail "GET $1 failed"
}

# check_tiers JSONL N TIER...: the last line of a tiers.jsonl (since start)
# counted exactly N requests, each reaching every TIER once
check_tiers() {
  python3 - "$@" <<'PY' || fail "tier counts in $1 are not the $2 requests made: $(tail -n 1 "$1" | head -c 600)"
import json, sys
path, n, tiers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
last = json.loads(open(path).read().splitlines()[-1])
assert last["scope"] == "since_start", last["scope"]
assert last["requests"] == n and last["cut_requests"] == 0, (last["requests"], last["cut_requests"])
rows = {(r["tier"], r["identity"]): r for r in last["rows"]}
for t in tiers + ["_total"]:
    assert rows[(t, "_all")]["count"] == n and rows[(t, "_all")]["calls"] == n, (t, rows.get((t, "_all")))
PY
}

# trace_request URL: asks for a trace with the header (scripts/trace-request,
# as a user does); prints the trace's folded file once all its files are
# written to $traces
trace_request() {
  local out id f
  out=$(KPROF_TRACE_DIR=$traces "$repo/scripts/trace-request" "$1") ||
    fail "no trace of $1: $out"
  id=$(printf '%s\n' "$out" | sed -n 's/^trace id: \([^ ]*\) .*/\1/p')
  for _ in $(seq 1 100); do
    f=$(ls "$traces"/*-"$id".folded 2>/dev/null || true)
    [ -n "$f" ] && [ -e "${f%.folded}.trace.json" ] && { echo "$f"; return 0; }
    sleep 0.1
  done
  fail "trace $id: its files are not all in $traces: $(ls "$traces")"
}
