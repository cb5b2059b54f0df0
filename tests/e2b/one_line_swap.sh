#!/usr/bin/env bash
# One downstream program (examples/one_line_swap.cpp), unchanged, on fake://, docker:// and
# e2b:// (the local E2B-compatible server over TLS): only the DSN changes, and the output must
# be the same on all three.
#   one_line_swap.sh PROGRAM SERVER_DIR
set -euo pipefail
program=$1 dir=$2
skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
[ -s "$dir/ports.json" ] || skip "the local E2B server is not running"
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
cat "$out/fake"
diff -u "$out/fake" "$out/docker"
diff -u "$out/fake" "$out/e2b"
echo "the same output on fake://, docker:// and e2b://"
