#!/usr/bin/env bash
# The package's types serve users: mypy --strict passes on the package and on typed user code
# (typing_sample.py), and catches each of the mistakes in typing_mistakes.py.
#   typing_check.sh PACKAGE_DIR   (the staged package: build/<preset>/python)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v mypy >/dev/null || { echo "*** SKIPPED: mypy is not installed (scripts/deps.sh) ***" >&2; exit 77; }
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
export MYPYPATH=$1
mypy --strict --cache-dir "$cache" "$1/sandboxio" "$here/typing_sample.py"
out=$(mypy --strict --cache-dir "$cache" "$here/typing_mistakes.py" 2>&1 || true)
found=$(grep -c ': error:' <<<"$out" || true)
if [ "$found" != 3 ]; then
  echo "mypy found $found mistakes in typing_mistakes.py, not 3:" >&2
  echo "$out" >&2
  exit 1
fi
echo "typing: the package and the sample pass mypy --strict; the 3 mistakes are caught"
