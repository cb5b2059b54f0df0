#!/bin/sh
# The docker:// contract suite once more, against Podman's Docker-compatible API (podman
# system service, which scripts/podman-env starts): the exec path and the agent (direct socket
# and attach stream), through the blocking and the Asio transports. Not the gVisor targets:
# no runsc runtime is registered with Podman. Skips (77) loudly without the service, unless
# SBX_REQUIRE_PODMAN=1 (CI), where that fails.
set -eu
tests="$1"
sock=${SBX_PODMAN_SOCK:-/run/sandboxio-podman.sock}
if ! curl -fsS --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
  if [ "${SBX_REQUIRE_PODMAN:-0}" = 1 ]; then
    echo "FAILED: no podman system service answers on $sock, and SBX_REQUIRE_PODMAN=1" >&2
    exit 1
  fi
  echo "SKIPPED LOUDLY: no podman system service on $sock (scripts/podman-env starts one)"
  exit 77
fi
DOCKER_HOST="unix://$sock" exec "$tests" --gtest_brief=1 \
  --gtest_filter='Docker/DockerContract.Case/*:-*Gvisor*'
