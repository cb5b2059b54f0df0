#!/usr/bin/env bash
# The MCP image builds offline, runs as uid 10001, and answers an MCP session on fake://.
#   image_test.sh SANDBOXIO_BINARY
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! docker info >/dev/null 2>&1; then
  echo "*** SKIPPED: no Docker engine (scripts/docker-env starts one) ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
fi
tag=sandboxio/mcp:test-$$
trap 'docker rmi -f "$tag" >/dev/null 2>&1 || true' EXIT
"$root/mcp/image/build.sh" "${1:?}" "$tag" >/dev/null
uid=$(docker run --rm --entrypoint id "$tag" -u)
[ "$uid" = 10001 ] || { echo "FAIL: the image runs as uid $uid, not 10001" >&2; exit 1; }
session=$(printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"image-test","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"echo from-the-image"}}}' |
  docker run -i --rm "$tag" --backend fake:// 2>/dev/null)
echo "$session" | grep -q '"id":1,"result":{"protocolVersion":"2025-11-25"' ||
  { echo "FAIL: no initialize result: $session" >&2; exit 1; }
echo "$session" | grep -q 'from-the-image' ||
  { echo "FAIL: the tool call did not answer: $session" >&2; exit 1; }
echo "ok: image $tag built, uid 10001, answered an MCP session on fake://"
