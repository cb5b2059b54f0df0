#!/usr/bin/env bash
# Gate: every async operation has a sync twin. Each `async_NAME(` declared in the async API
# (sandboxio/async.hpp) must be declared as `NAME(` in the sync API (sandboxio/sync.hpp).
#   check_parity.sh ASYNC_HEADER SYNC_HEADER
set -euo pipefail
async=${1:?} sync=${2:?}
ops=$(grep -oE '\bauto async_[a-z_]+\(' "$async" | sed -E 's/^auto async_//; s/\($//' | sort -u)
[ -n "$ops" ] || { echo "PARITY: no async operations found in $async" >&2; exit 1; }
missing=()
for op in $ops; do
  grep -qE "\b${op}\(" "$sync" || missing+=("$op")
done
if [ "${#missing[@]}" -ne 0 ]; then
  echo "PARITY: async operations without a sync twin in $(basename "$sync"): ${missing[*]}" >&2
  exit 1
fi
echo "parity gate passed: $(wc -w <<<"$ops") async operations, each with a sync twin: $(tr '\n' ' ' <<<"$ops")"
