#!/usr/bin/env bash
# The MCP image serves a real backend: run with no arguments (its default, e2b://base) against
# the local E2B server over TLS, it answers an MCP session whose tool call runs a command in an
# e2b:// sandbox. The image's own CA bundle is checked to be there; the test server's CA is
# handed in with SSL_CERT_FILE, as a user with a private CA would.
#   image_e2b_test.sh SANDBOXIO_BINARY E2B_SERVER_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
binary=${1:?usage: image_e2b_test.sh SANDBOXIO_BINARY E2B_SERVER_DIR}
dir=${2:?usage: image_e2b_test.sh SANDBOXIO_BINARY E2B_SERVER_DIR}
skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
docker info >/dev/null 2>&1 || skip "no Docker engine (scripts/docker-env starts one)"
[ -s "$dir/ports.json" ] || skip "the local E2B server is not running (scripts/e2b-env)"
port() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$dir/ports.json"; }
api=$(port apiTls)
sandbox=$(port sandboxTls)
ca=/var/lib/sandboxio-test/tls/ca.pem
[ -s "$ca" ] || skip "no test CA at $ca (scripts/docker-env makes it)"
key=e2b_local_test_key

tag=sandboxio/mcp:test-e2b-$$
trap 'docker rmi -f "$tag" >/dev/null 2>&1 || true' EXIT
"$root/mcp/image/build.sh" "$binary" "$tag" >/dev/null
cmd=$(docker inspect -f '{{json .Config.Cmd}}' "$tag")
[ "$cmd" = '["--backend","e2b://base"]' ] ||
  { echo "FAIL: the image's default is $cmd, not --backend e2b://base" >&2; exit 1; }
docker run --rm --entrypoint sh "$tag" -c 'test -s "$SSL_CERT_FILE" && grep -q "BEGIN CERTIFICATE" "$SSL_CERT_FILE"' ||
  { echo "FAIL: the image has no CA bundle at its SSL_CERT_FILE" >&2; exit 1; }

count() {
  curl -fsS -H "X-API-KEY: $key" "http://127.0.0.1:$(port api)/v2/sandboxes" |
    { grep -o '"sandboxID"' || true; } | wc -l
}
before=$(count)
session=$(printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"image-e2b-test","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"echo from-e2b-in-the-image; id -un; cat /etc/hostname >/dev/null"}}}' |
  docker run -i --rm --network host \
    -v "$ca:/run/test-ca.pem:ro" -e SSL_CERT_FILE=/run/test-ca.pem \
    -e E2B_API_KEY="$key" -e E2B_API_URL="https://127.0.0.1:$api" \
    -e E2B_SANDBOX_URL="https://127.0.0.1:$sandbox" "$tag" 2>/tmp/image-e2b-test.$$.err) || true
err=$(cat /tmp/image-e2b-test.$$.err; rm -f /tmp/image-e2b-test.$$.err)
echo "$session" | grep -q '"id":1,"result":{"protocolVersion":"2025-11-25"' ||
  { echo "FAIL: no initialize result: $session $err" >&2; exit 1; }
echo "$session" | grep -q 'from-e2b-in-the-image' ||
  { echo "FAIL: the tool call did not run in e2b://: $session $err" >&2; exit 1; }
# E2B runs commands as the template's user, and so does the local server: the command ran
# there, not in the image (which would say sandboxio).
echo "$session" | grep -q 'from-e2b-in-the-image\\nuser\\n' ||
  { echo "FAIL: the command did not run as E2B's user: $session" >&2; exit 1; }
# The session's end ends its sandbox, before the server exits: it leaves none behind.
[ "$(count)" -le "$before" ] ||
  { echo "FAIL: the sandbox outlived the MCP session ($(count) running, $before before)" >&2; exit 1; }
echo "ok: image $tag, default e2b://base over TLS, answered an MCP session on the local E2B server"
