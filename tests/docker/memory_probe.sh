#!/usr/bin/env bash
# Runs sandboxio_memory_probe against the Docker test image (skips loudly without an engine,
# fails under SBX_REQUIRE_DOCKER=1).
#   memory_probe.sh PROBE BYTES RATE SLOW_SECONDS BOUND_MIB
#   memory_probe.sh PROBE --repeat N SLACK_KIB
set -euo pipefail
probe=$1
shift
if ! [ -S /var/run/docker.sock ] || ! docker info >/dev/null 2>&1; then
  echo "*** SKIPPED: no Docker engine (scripts/docker-env starts one) ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
fi
dsn=docker://sandboxio-test/python:bookworm
if [ "${1:-}" = --repeat ]; then
  shift
  exec "$probe" --repeat "$dsn" "$@"
fi
exec "$probe" "$dsn" "$@"
