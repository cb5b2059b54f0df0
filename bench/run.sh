#!/usr/bin/env bash
# Runs the benchmarks of one build side by side with their peers and writes the page:
#   bench/run.sh BIN_DIR OUT_DIR [--short]
# BIN_DIR holds sandboxio_bench_{engine,docker,e2b}; results go to OUT_DIR/*.json. The full run
# writes docs/performance.md and docs/performance/*.png; --short runs every benchmark briefly
# and writes the page into OUT_DIR (ctest's bench.suite.short, so that none of it rots).
# Needs the Docker engine and test images (scripts/docker-env), the pinned Node peers (npm ci in
# bench/node and tests/e2b) and the local E2B server's root filesystem (scripts/e2b-env);
# SBX_E2B_DIR names a running local E2B server to use, else one is started and stopped.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$1 out=$2 short=0
[ "${3:-}" = --short ] && short=1
if [ "$short" = 1 ]; then
  engine_args=(--benchmark_min_time=0.01)
  e2e_args=(--short)
  page=$out/performance.md charts=$out/performance
else
  engine_args=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true)
  e2e_args=()
  page=$here/docs/performance.md charts=$here/docs/performance
fi
skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}
[ -S /var/run/docker.sock ] && docker info >/dev/null 2>&1 || skip "no Docker engine (scripts/docker-env)"
[ -d "$here/bench/node/node_modules/dockerode" ] || skip "dockerode is not installed (npm ci in bench/node)"
[ -d "$here/tests/e2b/node_modules/e2b" ] || skip "the E2B SDK is not installed (npm ci in tests/e2b)"
mkdir -p "$out"

{
  echo "measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
  echo "$(nproc) CPUs: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
  echo "compiler: $(c++ --version | head -1); build: the default preset (-O2)"
  echo "sandboxio: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$out/machine.txt"

echo "==> engine benchmarks" >&2
"$bin/sandboxio_bench_engine" "${engine_args[@]}" --benchmark_out="$out/engine.json" \
  --benchmark_out_format=json 2> >(grep -v 'IsolationNotSatisfied' >&2)

echo "==> docker:// end to end" >&2
"$bin/sandboxio_bench_docker" "${e2e_args[@]}" --json "$out/docker.json"

echo "==> e2b:// end to end" >&2
started=""
dir=${SBX_E2B_DIR:-}
if [ -z "$dir" ] || [ ! -s "$dir/ports.json" ]; then
  dir=$(mktemp -d)
  "$here/tests/e2b/server/ctl.sh" start "$dir" >/dev/null
  started=$dir
fi
stop_server() { [ -z "$started" ] || "$here/tests/e2b/server/ctl.sh" stop "$started" >/dev/null; }
trap stop_server EXIT
port() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$dir/ports.json"; }
ca=${SBX_TLS_DIR:-/var/lib/sandboxio-test/tls}/ca.pem
E2B_API_KEY=e2b_local_test_key \
  E2B_API_URL=https://127.0.0.1:$(port apiTls) E2B_SANDBOX_URL=https://127.0.0.1:$(port sandboxTls) \
  NODE_EXTRA_CA_CERTS=$ca \
  "$bin/sandboxio_bench_e2b" "${e2e_args[@]}" --dsn-options "?ca=$ca" --json "$out/e2b.json"

# The same again at a distance: both clients reach the server through a proxy that adds
# SBX_BENCH_RTT_MS (default 20) of round-trip time, as E2B's cloud is 20-100 ms away.
rtt=${SBX_BENCH_RTT_MS:-20}
# A 16 MiB file at a distance (the SDK's HTTP/2 windows make a large one take minutes).
rtt_args=(--file-mib 16)
[ "$short" = 1 ] && rtt_args=()
echo "==> e2b:// end to end at ${rtt} ms RTT" >&2
node "$here/bench/node/delay_proxy.mjs" --rtt-ms "$rtt" --ports-file "$out/delay.json" \
  apiTls="$(port apiTls)" sandboxTls="$(port sandboxTls)" &
proxy=$!
trap '{ kill $proxy 2>/dev/null || true; }; stop_server' EXIT
for _ in $(seq 1 100); do [ -s "$out/delay.json" ] && break; sleep 0.1; done
[ -s "$out/delay.json" ] || { echo "the delay proxy did not start" >&2; exit 1; }
via() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$out/delay.json"; }
E2B_API_KEY=e2b_local_test_key \
  E2B_API_URL=https://127.0.0.1:$(via apiTls) E2B_SANDBOX_URL=https://127.0.0.1:$(via sandboxTls) \
  NODE_EXTRA_CA_CERTS=$ca \
  "$bin/sandboxio_bench_e2b" "${e2e_args[@]}" "${rtt_args[@]}" --dsn-options "?ca=$ca" --rtt-ms "$rtt" \
  --near-dsn-options "?ca=$ca&api_url=https://127.0.0.1:$(port apiTls)&sandbox_url=https://127.0.0.1:$(port sandboxTls)" \
  --json "$out/e2b_rtt.json"
kill $proxy 2>/dev/null || true
rm -f "$out/delay.json"

python3 "$here/tools/bench_report.py" --engine "$out/engine.json" --docker "$out/docker.json" \
  --e2b "$out/e2b.json" --e2b-rtt "$out/e2b_rtt.json" --machine "$out/machine.txt" --out "$page" --charts "$charts"
# docs/performance.md is part of llms-full.txt: keep it current (gate.llms_txt checks it).
if [ "$page" = "$here/docs/performance.md" ]; then
  python3 "$here/tools/gen_llms.py" --write >/dev/null
fi
