# Shared by kprof's integration tests (sourced, not run). Each test runs as
#   TEST KPROF AGENT_EBIN [SAMPLE_APPS]
# (SAMPLE_APPS: the directory of the sample applications' builds,
# build/sample_apps, holding kprof_sample/ebin and kprof_kv/ebin; needed by
# the tests that run them, which call need_sample_apps)
# and gets its own temporary directory, a freshly generated cookie, its own
# Erlang node with a unique name (kpt_<test>_<pid>) registered with epmd,
# and a trap that stops the node and any kprof it started, even on failure.
#
# The node's workload is tests/integration/kpt_node.erl, compiled here. The
# node does not get AGENT_EBIN on its code path: kprof must inject its agent
# into a node that never saw it, as in production.

set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 KPROF AGENT_EBIN [SAMPLE_APPS]" >&2; exit 2; }
kprof=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ebin=$(cd "$2" && pwd)
sample_apps=${3:+$(cd "$3" && pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
test_name=$(basename "$0")
shared_tools=$(cd "$here/../.." && pwd)/../shared/tools

work=$(mktemp -d "${TMPDIR:-/tmp}/kpt_${test_name}.XXXXXX")
node=kpt_$(printf '%s' "$test_name" | tr -c 'A-Za-z0-9_' '_')_$$
node_pid=
kprof_pid=
cookie=$work/.erlang.cookie

# Every wait in these tests is generous: the machine may have 2 busy cores.
READY_TIMEOUT=${KPT_READY_TIMEOUT:-90}

log() { printf '%s: %s\n' "$test_name" "$*" >&2; }
# fail MESSAGE...: one line, newlines of MESSAGE (a command's stderr) shown
# as " | ": scripts/test repeats the FAIL lines where CI keeps them, and
# the cause is seldom a command's first line.
fail() {
  local msg="$*"
  printf '%s: FAIL: %s\n' "$test_name" "${msg//$'\n'/ | }" >&2
  exit 1
}
pass() { printf '%s: ok: %s\n' "$test_name" "$*" >&2; }

cleanup() {
  local rc=$?
  set +e
  if [ -n "$kprof_pid" ] && kill -0 "$kprof_pid" 2>/dev/null; then
    kill -9 "$kprof_pid" 2>/dev/null
    wait "$kprof_pid" 2>/dev/null
  fi
  # not yet defined when the container's setup fails, before any node
  ! declare -F stop_node >/dev/null || stop_node
  # the OpenTelemetry Collector of tests/support/otelcol.sh, if the test sourced it
  ! declare -F otelcol_cleanup >/dev/null || otelcol_cleanup "$rc"
  [ -z "$container_root" ] || rmdir "$container_root$work" 2>/dev/null
  if [ "$rc" -ne 0 ]; then
    for f in "$work"/node*.log; do
      [ -s "$f" ] && { log "--- $(basename "$f"):"; tail -n 30 "$f" >&2; }
    done
  fi
  # KPT_KEEP=1 keeps a failed test's files, to look at what it saw
  if [ "$rc" -ne 0 ] && [ -n "${KPT_KEEP:-}" ]; then log "kept $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# a command failing under set -e says where, instead of ending the test silently
trap 'printf "%s: FAIL: status %s at line %s: %s\n" "$test_name" "$?" "$LINENO" "$BASH_COMMAND" >&2' ERR

# A cookie nobody else knows, in a file only we can read; HOME=$work makes
# the node and erl_call read it, so it never appears on a command line.
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$cookie"
chmod 400 "$cookie"
mkdir -p "$work/ebin"

# With KPT_OTP_SUITE set (bookworm: OTP 25, trixie: OTP 27, forky: OTP 29),
# the test's node runs as a container runs it: the Erlang of a Debian root
# of that release (tests/support/otp_root), in its own pid and mount
# namespaces (unshare, chroot), with the host's network. The test's
# directory, the source checkout, the agent's ebin and kprof's directory
# (for the request-trace collector a node starts) are bind-mounted at the
# same paths inside, so paths and the cookie stay the same. The test's
# modules and the sample applications are compiled by the root's erlc, as
# a user's code is by their release; the agent is kprof's, compiled once
# for every release (tests/support/agent_portable.escript).
container_root=
container_binds=()
container_unshare=
if [ -n "${KPT_OTP_SUITE:-}" ]; then
  container_root=$("$here/../support/otp_root" "$KPT_OTP_SUITE") ||
    fail "no Debian $KPT_OTP_SUITE root to run the node in"
  # a /tmp of its own, as a container has: nodes of the same root running
  # side by side are each pid 1 of their namespace, and would otherwise
  # write the same /tmp/perf-1.map and /tmp/jit-1.dump
  mkdir -m 1777 "$work/tmp"
  container_binds=("$work/tmp:/tmp" "$work" "$(cd "$here/../.." && pwd)" "$ebin" "$(dirname "$kprof")")
fi

# in_container [exec] [UNSHARE_OPTION...] -- COMMAND...: COMMAND in the
# root (tests/support/in_root). With exec, the calling shell becomes it (a
# subshell run with &, whose $! is then unshare's pid).
in_container() {
  local how=
  [ "$1" != exec ] || { how=exec && shift; }
  $how "$here/../support/in_root" "$container_root" "${container_binds[@]}" -- "$@"
}

# test_erlc ERLC_ARGS...: erlc of the node's release
test_erlc() {
  if [ -n "$container_root" ]; then
    in_container -- erlc "$@"
  else
    erlc "$@"
  fi
}
test_erlc -o "$work/ebin" "$here/kpt_node.erl"
epmd -daemon 2>/dev/null || true
# a node that crashes writes its dump here, not into the caller's directory
export ERL_CRASH_DUMP=$work/erl_crash.dump

now_ms() { date +%s%3N; }

# need_sample_apps APP...: checks that each sample application was built and
# sets sample_pa to the erl arguments that put their ebin directories on the
# code path.
sample_pa=()
need_sample_apps() {
  [ -n "$sample_apps" ] || fail "no SAMPLE_APPS directory given (usage: $test_name KPROF AGENT_EBIN SAMPLE_APPS)"
  local app
  for app in "$@"; do
    [ -e "$sample_apps/$app/ebin/$app.app" ] ||
      fail "$sample_apps/$app/ebin/$app.app is missing: the build does not compile sample_apps/$app/"
    if [ -z "$container_root" ]; then
      sample_pa+=(-pa "$sample_apps/$app/ebin")
      continue
    fi
    mkdir -p "$work/sample_apps/$app/ebin"
    cp "$sample_apps/$app/ebin/$app.app" "$work/sample_apps/$app/ebin/"
    test_erlc -o "$work/sample_apps/$app/ebin" "$here/../../sample_apps/$app/src/"*.erl
    sample_pa+=(-pa "$work/sample_apps/$app/ebin")
  done
}

# run_kprof ARGS...: kprof in the foreground, killed if it hangs (status 124
# or 137 then), so a hang fails the test instead of blocking it.
run_kprof() { timeout -k 5 "${KPT_KPROF_TIMEOUT:-120}" "$kprof" "$@"; }

# start_node [ERLANG_MAP_ENTRIES] [EXTRA_ERL_ARGS...]: starts the test node
# running kpt_node:main/1, e.g. start_node 'hot => 4, idle => 1000'; waits
# until its workload runs. Sets node_pid (the BEAM's OS pid). The node halts
# by itself after 10 minutes, in case this script is killed with SIGKILL
# (ctest's timeout) and its trap cannot stop it.
start_node() {
  local opts=${1:-}
  shift || true
  start_node_eval "kpt_node:main(#{${opts:+$opts, }ready => \"$work/ready\"})" "$work/ready" \
    -pa "$work/ebin" "$@"
}

# start_node_eval EXPR READY_FILE [EXTRA_ERL_ARGS...]: starts the test node
# with any -eval expression that eventually writes READY_FILE; in a
# container with KPT_OTP_SUITE set, where node_pid is then the node's pid as
# the host sees it.
start_node_eval() {
  local expr=$1 ready=$2
  shift 2
  rm -f "$ready"
  if [ -z "$container_root" ]; then
    HOME=$work erl -noshell -sname "$node" "$@" -eval "$expr" </dev/null >"$work/node.log" 2>&1 &
    node_pid=$!
    wait_ready "$ready"
    return
  fi
  in_container exec --pid --fork --kill-child -- env HOME="$work" erl -noshell -sname "$node" "$@" \
    -eval "$expr" </dev/null >"$work/node.log" 2>&1 &
  container_unshare=$!
  local deadline=$((SECONDS + 10))
  node_pid=
  while [ -z "$node_pid" ]; do
    node_pid=$(pgrep -P "$container_unshare" || true)
    [ $SECONDS -lt $deadline ] || fail "the container of node $node did not start: $(cat "$work/node.log")"
    [ -n "$node_pid" ] || sleep 0.1
  done
  wait_ready "$ready"
}

wait_ready() {
  local ready=$1 deadline=$((SECONDS + READY_TIMEOUT))
  while [ ! -e "$ready" ]; do
    kill -0 "$node_pid" 2>/dev/null || fail "node $node exited during startup: $(tail -n 3 "$work/node.log" | tr "\n" " ")"
    [ $SECONDS -lt $deadline ] || fail "node $node not ready after ${READY_TIMEOUT}s"
    sleep 0.2
  done
}

# node_call 'MOD FUN [ARGS]': calls a function in the node through erl_call
# and prints the result term without spaces.
node_call() {
  local r
  if r=$(HOME=$work timeout 30 erl_call -sname "$node" -a "$1" 2>&1); then
    printf '%s' "$r" | tr -d ' \n'
  else
    printf 'erl_call-failed(%s)' "$(printf '%s' "$r" | tr '\n' ' ')"
  fi
}

# node_state: "{Depth,AgentRegistered,KprofProcesses}" (see kpt_node:state/0)
node_state() { node_call 'kpt_node state'; }

# kprof's agent modules (AGENT_EBIN's .beam files), as an Erlang list
agent_modules="[$(cd "$ebin" && ls -- *.beam | sed 's/\.beam$//' | paste -sd, -)]"

# kprof_left: what the node still holds of the code kprof loads into it:
# "{ok,[]}" when nothing, else the agent modules it has, current or old,
# that are not the node's own (loaded from its code path, as by a release
# that ships kprof), and `nif' when it maps the tracer NIF kprof brought
# (written under /tmp/kprof-nif-*). After any kprof command, a node whose
# code path has no kprof holds none of it (kprof_unload.erl). A node whose
# code path has kprof (the test sets node_ships_kprof=1) keeps its own
# kprof_tracer module, and the NIF kprof loaded into it where its priv/ had
# none: only its modules are checked.
node_ships_kprof=
kprof_left() {
  local r
  r=$(HOME=$work timeout 30 erl_call -sname "$node" -e <<<"[M || M <- $agent_modules,
        erlang:check_old_code(M) orelse (erlang:module_loaded(M) andalso
          code:which(M) =/= code:where_is_file(atom_to_list(M) ++ \".beam\"))]." 2>&1 |
    tr -d ' \n') || r="erl_call-failed($r)"
  if [ -z "$node_ships_kprof" ] && [ -n "$node_pid" ] && grep -q 'kprof-nif-[^/]*/kprof_tracer\.so' "/proc/$node_pid/maps" 2>/dev/null; then
    r="$r,nif"
  fi
  printf '%s' "$r"
}

# wait_nothing_left SECONDS: waits until kprof_left is "{ok,[]}"; sets
# `left`; fails after SECONDS.
wait_nothing_left() {
  local deadline=$((SECONDS + $1))
  while :; do
    left=$(kprof_left)
    [ "$left" = '{ok,[]}' ] && return 0
    [ $SECONDS -lt $deadline ] || fail "kprof's code still in the node after $1 s: $left" \
      "(its modules not from the node's code path, current or old; nif: the tracer NIF)"
    sleep 0.2
  done
}

# wait_clean SECONDS: waits until the node is as kpt_node left it (depth 13,
# no agent, no kprof process) and holds no code of kprof's (kprof_left);
# sets `state` and `left`; fails after SECONDS.
wait_clean() {
  local deadline=$((SECONDS + $1))
  while :; do
    state=$(node_state)
    [ "$state" = '{13,false,0}' ] && break
    [ $SECONDS -lt $deadline ] || fail "node not clean after $1 s: state $state" \
      "(backtrace_depth, kprof_agent registered, kprof processes; expected {13,false,0})"
    sleep 0.2
  done
  wait_nothing_left $((deadline > SECONDS ? deadline - SECONDS : 0))
}

# In a container the node gets SIGTERM, while the process waited for (and
# killed if need be) is unshare, which ignores SIGTERM while it waits for
# the node and takes it along when killed (--kill-child).
stop_node() {
  [ -n "$node_pid" ] || return 0
  local waited=${container_unshare:-$node_pid}
  if kill -0 "$waited" 2>/dev/null; then
    kill -TERM "$node_pid" 2>/dev/null || true
    local i
    for i in $(seq 1 75); do
      kill -0 "$waited" 2>/dev/null || break
      sleep 0.2
    done
    # fails when the node is already gone, which must not end a caller under set -e
    kill -9 "$waited" 2>/dev/null || true
  fi
  wait "$waited" 2>/dev/null || true
  container_unshare=
  node_pid=
}

# wait_exit PID SECONDS: waits for a background job and sets exit_rc to its
# exit status; fails after SECONDS.
exit_rc=
wait_exit() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "process $pid still running after $2s"
    sleep 0.1
  done
  exit_rc=0
  wait "$pid" || exit_rc=$?
}

# --- format checks -------------------------------------------------------
# Our own minimal rules (FORMATS.md), always run; the shared linters too
# when ../shared/tools exists beside the checkout.

# check_perf FILE [NAME]: plain perf-script text.
check_perf() {
  local f=$1 name=${2:-$1}
  awk -v name="$name" '
    function bad(msg) { printf "%s:%d: %s\n", name, NR, msg > "/dev/stderr"; err = 1; exit 1 }
    /\r/ { bad("CR character") }
    state == 0 && /^#/ { next }
    state == 0 && !/^[^ \t#0-9]+ [0-9]+\/[0-9]+ \[[0-9]+\] [0-9]+\.[0-9][0-9][0-9][0-9][0-9][0-9]: [0-9]+ [A-Za-z0-9_.-]+:/ {
      bad("the first non-comment line is not a sample header") }
    /^$/ {
      if (state != 2) bad("blank line outside a sample")
      state = 1; next }
    /^\t/ {
      if (state != 2) bad("frame outside a sample")
      if ($0 !~ /^\t[0-9a-f]+ [^ \t]+ \([^ ()]+\)$/) bad("malformed frame: " $0)
      next }
    /^#/ { if (state == 2) bad("comment inside a sample"); next }
    {
      if (state == 2) bad("no blank line after the previous sample")
      if ($0 !~ /^[^ \t#0-9]+ [0-9]+\/[0-9]+ \[[0-9]+\] [0-9]+\.[0-9][0-9][0-9][0-9][0-9][0-9]: [0-9]+ [A-Za-z0-9_.-]+:/)
        bad("malformed sample header: " $0)
      split($4, t, ":"); ts = t[1]
      if (ts ~ /\.000000$/) bad("timestamp ends in .000000: " ts)
      split(ts, p, "."); us = p[1] * 1000000 + p[2]
      if (samples > 0 && us < last) bad("timestamp goes back: " ts)
      last = us; samples++; state = 2
    }
    END {
      if (err) exit 1
      if (state == 2) { printf "%s: the last sample has no blank line after it\n", name > "/dev/stderr"; exit 1 }
      if (samples < 2) { printf "%s: %d samples, at least 2 needed\n", name, samples > "/dev/stderr"; exit 1 }
    }' "$f" || return 1
  if [ -d "$shared_tools" ]; then
    python3 "$shared_tools/perf_lint.py" -q --name "$name" "$f" >"$work/lint.log" 2>&1 || {
      cat "$work/lint.log" >&2
      echo "$name: perf_lint.py failed" >&2
      return 1
    }
  fi
}

# check_folded FILE: "stack count" lines, sorted bytewise, each stack once.
check_folded() {
  local f=$1
  [ -s "$f" ] || { echo "$f: empty" >&2; return 1; }
  awk -v name="$f" '
    /\r/ || !/^[^ \t;][^\t]* [1-9][0-9]*$/ { printf "%s:%d: malformed: %s\n", name, NR, $0 > "/dev/stderr"; exit 1 }
    /;;|; | ;/ { printf "%s:%d: empty or spaced frame: %s\n", name, NR, $0 > "/dev/stderr"; exit 1 }' "$f" ||
    return 1
  sed 's/ [0-9]*$//' "$f" | LC_ALL=C sort -c -u 2>&1 >/dev/null | sed "s|^|$f: not sorted or a stack twice: |" >&2
  [ "${PIPESTATUS[1]}" -eq 0 ] || return 1
  if [ -d "$shared_tools" ]; then
    python3 "$shared_tools/folded_lint.py" -q "$f" >"$work/lint.log" 2>&1 || {
      cat "$work/lint.log" >&2
      echo "$f: folded_lint.py failed" >&2
      return 1
    }
  fi
}

# decompress FILE OUT: a segment of any compression, as plain text.
decompress() {
  case $1 in
    *.gz) gzip -dc "$1" >"$2" ;;
    *.zst) zstd -q -dc "$1" >"$2" ;;
    *) cp "$1" "$2" ;;
  esac
}

# check_output_dir DIR: every file kprof left there is complete and valid;
# no temporary (dot) file remains. Sets `segments` to the number of segments.
segments=
check_output_dir() {
  local dir=$1 f n=0
  local stray
  stray=$(find "$dir" -mindepth 1 \( -name '.*' -o -type d \) -print)
  [ -z "$stray" ] || fail "temporary files or directories left in $dir: $stray"
  for f in "$dir"/*; do
    case $(basename "$f") in
      samples-[0-9][0-9][0-9][0-9][0-9][0-9].perf | samples-[0-9][0-9][0-9][0-9][0-9][0-9].perf.gz | \
        samples-[0-9][0-9][0-9][0-9][0-9][0-9].perf.zst)
        decompress "$f" "$work/segment.txt" || fail "$f does not decompress"
        check_perf "$work/segment.txt" "$f" || fail "$f is not valid perf-script"
        n=$((n + 1))
        ;;
      cpu-[0-9][0-9][0-9][0-9][0-9][0-9].perf | cpu-[0-9][0-9][0-9][0-9][0-9][0-9].perf.gz | \
        cpu-[0-9][0-9][0-9][0-9][0-9][0-9].perf.zst) # native CPU samples
        decompress "$f" "$work/segment.txt" || fail "$f does not decompress"
        check_perf "$work/segment.txt" "$f" || fail "$f is not valid perf-script"
        ;;
      samples-[0-9][0-9][0-9][0-9][0-9][0-9].pb.gz) # --pprof
        gzip -t "$f" 2>/dev/null || fail "$f is not gzip" ;;
      *.folded) check_folded "$f" || fail "$f is not a valid folded file" ;;
      *.svg) check_svg "$f" || fail "$f is not the flame graph of $(basename "${f%.svg}").folded" ;;
      README.txt) [ -s "$f" ] || fail "$f is empty" ;;
      cpu-files.tsv) # a comment, then FILE<TAB>BUILD_ID<TAB>PATH lines
        awk -F '\t' '!/^#/ && !(NF == 3 && $2 ~ /^[0-9a-f]+$/) { bad = 1 } END { exit bad }' "$f" ||
          fail "$f has a malformed line: $(grep -v '^#' "$f" | head -n 2)" ;;
      report.html) grep -q 'id="kprof-data"' "$f" || fail "$f is not kprof's report page" ;;
      *) fail "unexpected file $f" ;;
    esac
  done
  segments=$n
}

# svg_boxes SVG: the boxes of a flame graph kprof drew, a line each: name,
# depth, start and weight, TAB-separated. Fails when an XML parser cannot
# read it.
svg_boxes() {
  python3 -c '
import sys, xml.dom.minidom
for g in xml.dom.minidom.parse(sys.argv[1]).getElementsByTagName("g"):
    if g.getAttribute("class") == "f":
        print(g.getAttribute("data-n"), g.getAttribute("data-d"), g.getAttribute("data-x"),
              g.getAttribute("data-w"), sep="\t")
' "$1"
}

# check_svg SVG: a flame graph beside its folded file, which an XML parser
# reads and whose root box weighs what the folded file sums to.
check_svg() {
  local folded=${1%.svg}.folded
  [ -f "$folded" ] || { log "no $(basename "$folded") beside $(basename "$1")"; return 1; }
  python3 -c '
import sys, xml.dom.minidom
svg, folded = sys.argv[1], sys.argv[2]
try:
    doc = xml.dom.minidom.parse(svg)
except Exception as e:
    sys.exit("%s: not well-formed XML: %s" % (svg, e))
roots = [g.getAttribute("data-w") for g in doc.getElementsByTagName("g")
         if g.getAttribute("data-n") == "all" and g.getAttribute("data-d") == "0"]
total = sum(int(line.rsplit(" ", 1)[1]) for line in open(folded) if line.strip())
if roots != [str(total)]:
    sys.exit("%s: the root weighs %s, the folded file sums to %d" % (svg, roots, total))
' "$1" "$folded" || return 1
}

# folded_total FILE [PATTERN]: the sum of the counts of lines matching PATTERN
# (an awk regular expression; all lines without one); 0 if FILE is missing.
folded_total() {
  if [ -e "$1" ]; then
    awk -v pat="${2:-}" 'pat == "" || $0 ~ pat { s += $NF } END { print s + 0 }' "$1"
  else
    echo 0
  fi
}
