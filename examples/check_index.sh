#!/usr/bin/env bash
# Every example program (examples/*.cpp) is listed in examples/README.md, and every program the
# index names exists.
set -euo pipefail
dir=$1
failed=0
for f in "$dir"/*.cpp; do
  name=$(basename "$f")
  grep -q "($name)" "$dir/README.md" || { echo "examples/README.md does not list $name" >&2; failed=1; }
done
for name in $(grep -o '([a-z_]*\.cpp)' "$dir/README.md" | tr -d '()'); do
  [ -f "$dir/$name" ] || { echo "examples/README.md lists $name, which does not exist" >&2; failed=1; }
done
[ "$failed" = 0 ] && echo "examples/README.md lists all $(ls "$dir"/*.cpp | wc -l) programs"
exit $failed
