#!/usr/bin/env bash
# Runs sdk_scenario.mjs (the official E2B SDKs) against the local server the fixture started.
#   sdk_scenario.sh SERVER_DIR [tls]
# Plain HTTP gives HTTP/1.1 (as the recorded wire capture); tls gives HTTP/2 over TLS with the
# test CA.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1 mode=${2:-plain}
skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
[ -f "$here/node_modules/e2b/package.json" ] || skip "run 'npm ci' in tests/e2b (scripts/e2b-env does)"
[ -s "$dir/ports.json" ] || skip "the local E2B server is not running"
port() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$dir/ports.json"; }
export E2B_API_KEY=e2b_local_test_key
if [ "$mode" = tls ]; then
  export NODE_EXTRA_CA_CERTS=${SBX_TLS_DIR:-/var/lib/sandboxio-test/tls}/ca.pem
  export E2B_API_URL=https://127.0.0.1:$(port apiTls) E2B_SANDBOX_URL=https://127.0.0.1:$(port sandboxTls)
else
  export E2B_API_URL=http://127.0.0.1:$(port api) E2B_SANDBOX_URL=http://127.0.0.1:$(port sandbox)
fi
exec node "$here/sdk_scenario.mjs"
