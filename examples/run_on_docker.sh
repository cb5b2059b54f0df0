#!/usr/bin/env bash
# Runs an example against the Docker engine; skips (77) loudly without one, fails instead when
# SBX_REQUIRE_DOCKER=1 (CI).
#   run_on_docker.sh [--canary] PROGRAM ARG...
# --canary starts a TCP listener on the Docker bridge's gateway address, passes it to the program
# as its last argument, and fails unless exactly SBX_CANARY_EXPECT connections (default 0) reached
# it from the sandbox (deny_egress's probe target: one where its allow list is enforced).
set -euo pipefail
canary=0
if [ "${1:-}" = --canary ]; then canary=1; shift; fi
if ! { [ -S /var/run/docker.sock ] && docker info >/dev/null 2>&1; }; then
  echo "*** SKIPPED: no Docker engine ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
fi
if [ "$canary" = 0 ]; then exec "$@"; fi
ipv4='^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$'
gateway=$(docker network inspect bridge --format '{{(index .IPAM.Config 0).Gateway}}' 2>/dev/null || true)
if ! [[ $gateway =~ $ipv4 ]]; then
  # The engine's answer had no gateway (seen once in CI): the bridge's own address is the same.
  gateway=$(ip -4 -o addr show docker0 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -n1)
fi
[[ $gateway =~ $ipv4 ]] || { echo "no IPv4 address for the Docker bridge's gateway (got '$gateway')" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill "$listener" 2>/dev/null || true; rm -rf "$dir"' EXIT
python3 - "$gateway" "$dir" <<'PY' &
import socket, sys, pathlib
host, d = sys.argv[1], pathlib.Path(sys.argv[2])
s = socket.socket(); s.bind((host, 0)); s.listen(16)
(d / "port").write_text(str(s.getsockname()[1]))
count = 0
while True:
    c, _ = s.accept(); count += 1; c.close()
    (d / "hits").write_text(str(count))
PY
listener=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.05; done
[ -s "$dir/port" ] || { echo "the canary listener did not start" >&2; exit 1; }
target="$gateway:$(cat "$dir/port")"
# The canary answers from the host: the address is live, so a denied probe is the policy's doing.
python3 -c "import socket,sys; socket.create_connection(('$gateway', $(cat "$dir/port")), 3)" ||
  { echo "the canary is not reachable from the host" >&2; exit 1; }
for _ in $(seq 100); do [ "$(cat "$dir/hits" 2>/dev/null)" = 1 ] && break; sleep 0.05; done
[ "$(cat "$dir/hits" 2>/dev/null)" = 1 ] || { echo "the canary did not count the host's connection" >&2; exit 1; }
"$@" "$target"
expect=${SBX_CANARY_EXPECT:-0}
for _ in $(seq 40); do [ "$(cat "$dir/hits")" = $((expect + 1)) ] && break; sleep 0.05; done
got=$(($(cat "$dir/hits") - 1))
if [ "$got" != "$expect" ]; then
  echo "FAIL: the canary at $target saw $got connections from the sandbox, not $expect" >&2
  exit 1
fi
echo "the canary at $target saw $got connections from the sandbox, as it should"
