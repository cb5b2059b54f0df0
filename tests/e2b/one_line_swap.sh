#!/usr/bin/env bash
# One downstream program (examples/one_line_swap.cpp), unchanged, on fake://, docker://,
# e2b:// (the local E2B-compatible server over TLS) and modal:// (the local Modal server): only
# the DSN changes, and the output must be the same on all four.
#   one_line_swap.sh PROGRAM E2B_SERVER_DIR MODAL_SERVER_DIR
set -euo pipefail
program=$1 dir=$2 modal_dir=$3
skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
[ -s "$dir/ports.json" ] || skip "the local E2B server is not running"
[ -s "$modal_dir/ports.json" ] || skip "the local Modal server is not running"
[ -S /var/run/docker.sock ] && docker info >/dev/null 2>&1 || skip "no Docker engine"
port() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$dir/ports.json"; }
export E2B_API_KEY=e2b_local_test_key
ca=${SBX_TLS_DIR:-/var/lib/sandboxio-test/tls}/ca.pem
e2b="e2b://base?api_url=https://127.0.0.1:$(port apiTls)&sandbox_url=https://127.0.0.1:$(port sandboxTls)&ca=$ca"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$program" fake:// >"$out/fake" 2>/dev/null
"$program" docker://sandboxio-test/python:bookworm >"$out/docker"
"$program" "$e2b" >"$out/e2b"
modal_port=$(sed -n 's/.*"grpc":\([0-9]*\).*/\1/p' "$modal_dir/ports.json")
MODAL_TOKEN_ID=ak-local-test MODAL_TOKEN_SECRET=as-local-test MODAL_CONFIG_PATH=/nonexistent \
  "$program" "modal://sandboxio-test/python:bookworm?server_url=http://127.0.0.1:$modal_port" >"$out/modal"
cat "$out/fake"
diff -u "$out/fake" "$out/docker"
diff -u "$out/fake" "$out/e2b"
diff -u "$out/fake" "$out/modal"
echo "the same output on fake://, docker://, e2b:// and modal://"
