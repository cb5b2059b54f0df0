#!/usr/bin/env bash
# A fuzz input handed over as a trace: runs a machine harness on corpus inputs one at a time
# with SBX_FUZZ_TRACE set, then replays each trace offline with `sandboxio replay`, which must
# find it identical (exit 0). Usage: trace_handover.sh HARNESS SANDBOXIO CORPUS_DIR
set -euo pipefail
harness=$1 cli=$2 corpus=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
# The ten largest inputs: the longest sessions.
for input in $(ls -S "$corpus" | head -10); do
  rm -rf "$work/one" && mkdir "$work/one" && cp "$corpus/$input" "$work/one/"
  SBX_FUZZ_TRACE="$work/trace" "$harness" "$work/one" >/dev/null
  if ! out=$("$cli" replay --quiet "$work/trace" 2>&1); then
    echo "FAIL: the trace of $input did not replay identically:" >&2
    echo "$out" >&2
    exit 1
  fi
  case $out in *"identical to the recording"*) ;; *) echo "FAIL: $input: $out" >&2; exit 1 ;; esac
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no corpus input in $corpus" >&2; exit 1; }
echo "$n fuzz inputs handed over as traces and replayed identically"
