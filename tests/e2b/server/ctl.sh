#!/usr/bin/env bash
# Starts or stops the local E2B-compatible server for a test run.
#   ctl.sh start DIR   starts it in the background; DIR/ports.json tells where it listens
#   ctl.sh stop DIR    stops it, and fails when a sandbox or a mount it made is left
# Without root or without the root filesystem (scripts/e2b-env), start exits 77 (skip) unless
# SBX_REQUIRE_DOCKER=1 (CI), where it fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=$1 dir=$2
rootfs=${SBX_E2B_ROOTFS:-/var/lib/sandboxio-test/e2b-rootfs}
tls=${SBX_TLS_DIR:-/var/lib/sandboxio-test/tls}
skip() {
  echo "*** SKIPPED: $* (scripts/e2b-env prepares it) ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
case $cmd in
start)
  [ "$(id -u)" = 0 ] || skip "the local E2B server needs root (namespaces, mounts)"
  [ -x "$rootfs/usr/bin/python3" ] || skip "no sandbox root filesystem at $rootfs"
  [ -s "$tls/server-cert.pem" ] || skip "no test TLS certificates in $tls"
  mkdir -p "$dir"
  rm -f "$dir/ports.json"
  nohup node "$here/server.mjs" --rootfs "$rootfs" --state "$dir/sandboxes" \
    --ports-file "$dir/ports.json" --tls-cert "$tls/server-cert.pem" \
    --tls-key "$tls/server-key.pem" >"$dir/server.log" 2>&1 &
  for _ in $(seq 1 100); do
    [ -s "$dir/ports.json" ] && { cat "$dir/ports.json"; echo; exit 0; }
    kill -0 $! 2>/dev/null || break
    sleep 0.1
  done
  echo "the local E2B server did not start; its log:" >&2
  cat "$dir/server.log" >&2
  exit 1
  ;;
stop)
  [ -s "$dir/ports.json" ] || exit 0
  pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$dir/ports.json")
  api=$(sed -n 's/.*"api":\([0-9]*\).*/\1/p' "$dir/ports.json")
  # Nothing the tests made may outlive them: every sandbox must be gone before the server is.
  running=$(curl -fsS -H 'X-API-KEY: e2b_local_test_key' \
    "http://127.0.0.1:$api/v2/sandboxes?state=running" 2>/dev/null || echo '?')
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  rm -f "$dir/ports.json"
  left=$(grep -c " $dir/sandboxes/" /proc/mounts || true)
  if [ "$left" != 0 ]; then
    echo "the local E2B server left $left sandbox mounts behind" >&2
    exit 1
  fi
  if [ "$running" != "[]" ]; then
    echo "leak check: sandboxes were still running when the tests ended: $running" >&2
    exit 1
  fi
  echo "leak check: no sandbox left on the local E2B server"

  ;;
*)
  echo "usage: ctl.sh start|stop DIR" >&2
  exit 2
  ;;
esac
