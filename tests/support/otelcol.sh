# shellcheck shell=bash
# A real OpenTelemetry Collector on loopback, for the tests of kprof push
# (sourced, not run; after tests/integration/lib.sh when a test uses both).
# The Collector is the one scripts/otelcol builds (tests/support/
# otelcol-builder.yaml: the otlp receiver, the file and debug exporters);
# it takes OTLP profiles over gRPC and HTTP on 127.0.0.1, plain or TLS, and
# writes every export it receives to DIR/profiles.json, one line of OTLP/JSON
# per export (tests/support/otlp_profiles.py reads them).
#
#   otelcol_require                skips the test (status 77, one line why)
#                                  when the Collector is not built
#   otelcol_bin                    prints the Collector's path, or says why
#                                  not on stderr and returns 1
#   otelcol_start DIR [tls]        starts it on free ports; sets OTELCOL_PID,
#                                  OTELCOL_GRPC and OTELCOL_HTTP (127.0.0.1:PORT),
#                                  OTELCOL_OUT (DIR/profiles.json), OTELCOL_LOG
#                                  (DIR/otelcol.log) and, with tls, OTELCOL_CA
#                                  (DIR/ca.pem: the CA of its certificate, for
#                                  127.0.0.1 and localhost)
#   otelcol_stop                   SIGTERM, then SIGKILL after 15 s
#   otelcol_restart_same_ports     starts it again (stopping it first if it
#                                  runs) on the same ports, config and files;
#                                  profiles.json is appended to, never emptied
#   otelcol_wait_exports N [SECS]  waits until profiles.json holds N exports
#   otelcol_exports                prints how many it holds
#   otelcol_cleanup RC             stops it; when RC is not 0, shows the end of
#                                  its log. lib.sh's cleanup calls it; a test
#                                  without lib.sh calls it from its EXIT trap.
# e.g.
#   . "$here/../support/otelcol.sh"
#   otelcol_require
#   otelcol_start "$work/otel" tls
#   run_kprof push ... --endpoint "https://$OTELCOL_HTTP" --ca "$OTELCOL_CA"
#   otelcol_wait_exports 1
#   python3 "$here/../support/otlp_profiles.py" folded "$OTELCOL_OUT" --type cpu
# The Collector stops by itself after KPT_OTELCOL_LIFETIME seconds (1200),
# in case the test is killed with SIGKILL and its trap cannot stop it.

otelcol_support=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OTELCOL_PID=
OTELCOL_GRPC=
OTELCOL_HTTP=
OTELCOL_OUT=
OTELCOL_LOG=
OTELCOL_CA=
otelcol_dir=
otelcol_timeout_pid=

otelcol_log() { printf '%s: %s\n' "${test_name:-$(basename "$0")}" "$*" >&2; }

otelcol_bin() {
  if [ -n "${KPROF_OTELCOL:-}" ]; then
    [ -x "$KPROF_OTELCOL" ] || { echo "KPROF_OTELCOL=$KPROF_OTELCOL is not an executable" >&2; return 1; }
    printf '%s\n' "$KPROF_OTELCOL"
    return 0
  fi
  "$otelcol_support/../../scripts/otelcol" --path
}

otelcol_require() {
  local why
  if ! why=$(otelcol_bin 2>&1 >/dev/null); then
    otelcol_log "SKIP: no Collector: ${why//$'\n'/ }"
    exit 77
  fi
}

# otelcol_free_ports: two free TCP ports on 127.0.0.1, held together while
# chosen so that they differ
otelcol_free_ports() {
  python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))'
}

# otelcol_certs DIR: a CA and a server certificate for 127.0.0.1 and localhost
otelcol_certs() {
  local d=$1
  (
    set -e
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=kprof test CA" -keyout ca-key.pem -out ca.pem \
      -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
      -keyout server-key.pem -out server.csr 2>/dev/null
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
      "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" \
      "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid,issuer" >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -set_serial "0x$(openssl rand -hex 8)" \
      -days 2 -extfile server.ext -out server.pem 2>/dev/null
    rm -f server.csr server.ext
  )
}

# otelcol_config DIR GRPC_PORT HTTP_PORT TLS: writes DIR/otelcol.yaml
otelcol_config() {
  local d=$1 grpc=$2 http=$3 tls=$4 tls_block=
  if [ -n "$tls" ]; then
    tls_block="
        tls:
          cert_file: $d/server.pem
          key_file: $d/server-key.pem"
  fi
  cat >"$d/otelcol.yaml" <<EOF
# written by tests/support/otelcol.sh
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$grpc$tls_block
      http:
        endpoint: 127.0.0.1:$http$tls_block
exporters:
  file:
    path: $d/profiles.json
    format: json
    append: true
    flush_interval: 50ms
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: info
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [file, debug]
EOF
}

# otelcol_listening PORT: something listens on 127.0.0.1:PORT (read from
# /proc/net/tcp: a connection to a TLS port would log a handshake error)
otelcol_listening() {
  awk -v a="$(printf '0100007F:%04X' "$1")" '$2 == a && $4 == "0A" { found = 1 } END { exit !found }' \
    /proc/net/tcp
}

# otelcol_launch: starts the Collector of $otelcol_dir; waits until both
# ports listen. Returns 2 when a port was taken meanwhile, 1 on other errors.
otelcol_launch() {
  local bin d=$otelcol_dir
  bin=$(otelcol_bin) || return 1
  printf -- '--- started %s\n' "$(date -u +%FT%TZ)" >>"$d/otelcol.log"
  timeout -k 5 "${KPT_OTELCOL_LIFETIME:-1200}" "$bin" --config "$d/otelcol.yaml" \
    --feature-gates=service.profilesSupport </dev/null >>"$d/otelcol.log" 2>&1 &
  otelcol_timeout_pid=$!
  OTELCOL_PID=
  local deadline=$((SECONDS + ${KPT_OTELCOL_START_TIMEOUT:-30}))
  while :; do
    [ -n "$OTELCOL_PID" ] || OTELCOL_PID=$(pgrep -P "$otelcol_timeout_pid" || true)
    if ! kill -0 "$otelcol_timeout_pid" 2>/dev/null; then
      wait "$otelcol_timeout_pid" 2>/dev/null || true
      otelcol_timeout_pid=
      OTELCOL_PID=
      if tail -n 20 "$d/otelcol.log" | grep -q 'address already in use'; then return 2; fi
      otelcol_log "the Collector exited during startup: $(tail -n 5 "$d/otelcol.log" | tr '\n' ' ')"
      return 1
    fi
    if [ -n "$OTELCOL_PID" ] && otelcol_listening "${OTELCOL_GRPC##*:}" &&
      otelcol_listening "${OTELCOL_HTTP##*:}" &&
      tail -n 20 "$d/otelcol.log" | grep -q 'Everything is ready'; then
      return 0
    fi
    if [ $SECONDS -ge "$deadline" ]; then
      otelcol_log "the Collector did not listen on $OTELCOL_GRPC and $OTELCOL_HTTP within" \
        "${KPT_OTELCOL_START_TIMEOUT:-30} s: $(tail -n 5 "$d/otelcol.log" | tr '\n' ' ')"
      otelcol_stop
      return 1
    fi
    sleep 0.1
  done
}

otelcol_start() {
  local d=$1 tls=${2:-} ports try rc
  [ -z "$tls" ] || [ "$tls" = tls ] || { otelcol_log "otelcol_start: unknown option $tls"; return 1; }
  [ -z "$otelcol_timeout_pid" ] || otelcol_stop
  mkdir -p "$d"
  otelcol_dir=$(cd "$d" && pwd)
  OTELCOL_OUT=$otelcol_dir/profiles.json
  OTELCOL_LOG=$otelcol_dir/otelcol.log
  OTELCOL_CA=
  if [ -n "$tls" ]; then
    otelcol_certs "$otelcol_dir" || { otelcol_log "openssl could not make the test certificates"; return 1; }
    # shellcheck disable=SC2034 # for the test that sourced this file
    OTELCOL_CA=$otelcol_dir/ca.pem
  fi
  for try in 1 2 3; do
    ports=$(otelcol_free_ports) || return 1
    OTELCOL_GRPC=127.0.0.1:${ports%% *}
    OTELCOL_HTTP=127.0.0.1:${ports##* }
    otelcol_config "$otelcol_dir" "${ports%% *}" "${ports##* }" "$tls"
    rc=0
    otelcol_launch || rc=$?
    [ "$rc" -eq 2 ] || return "$rc"
    otelcol_log "port taken meanwhile (try $try): choosing others"
  done
  return 1
}

otelcol_restart_same_ports() {
  [ -n "$otelcol_dir" ] || { otelcol_log "otelcol_restart_same_ports: no otelcol_start before"; return 1; }
  [ -z "$otelcol_timeout_pid" ] || otelcol_stop
  local deadline=$((SECONDS + 10))
  # the ports were ours a moment ago; wait if something still holds them
  while otelcol_listening "${OTELCOL_GRPC##*:}" || otelcol_listening "${OTELCOL_HTTP##*:}"; do
    [ $SECONDS -lt $deadline ] || { otelcol_log "$OTELCOL_GRPC or $OTELCOL_HTTP still taken"; return 1; }
    sleep 0.1
  done
  otelcol_launch
}

otelcol_stop() {
  local tpid=$otelcol_timeout_pid pid=$OTELCOL_PID
  otelcol_timeout_pid=
  OTELCOL_PID=
  [ -n "$tpid" ] || return 0
  # timeout passes SIGTERM on to the Collector, which shuts down (the file
  # exporter flushes) and exits
  kill -TERM "$tpid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    kill -0 "$tpid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$tpid" 2>/dev/null; then
    otelcol_log "the Collector did not stop within 15 s of SIGTERM: SIGKILL"
    [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
    kill -KILL "$tpid" 2>/dev/null || true
  fi
  wait "$tpid" 2>/dev/null || true
}

otelcol_exports() {
  # complete lines only: the exporter writes an export, then its newline
  if [ -s "$OTELCOL_OUT" ]; then wc -l <"$OTELCOL_OUT" | tr -d ' '; else echo 0; fi
}

otelcol_wait_exports() {
  local n=$1 deadline=$((SECONDS + ${2:-30}))
  while [ "$(otelcol_exports)" -lt "$n" ]; do
    if [ $SECONDS -ge "$deadline" ]; then
      otelcol_log "$(otelcol_exports) exports in $OTELCOL_OUT after ${2:-30} s, $n expected"
      return 1
    fi
    sleep 0.1
  done
}

otelcol_cleanup() {
  local rc=${1:-0}
  otelcol_stop
  if [ "$rc" -ne 0 ] && [ -n "$OTELCOL_LOG" ] && [ -s "$OTELCOL_LOG" ]; then
    otelcol_log "--- $OTELCOL_LOG:"
    tail -n 30 "$OTELCOL_LOG" >&2
  fi
}
