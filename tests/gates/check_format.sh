#!/usr/bin/env bash
# Gate: every C++ source of ours is clang-formatted (clang-format --dry-run -Werror).
set -euo pipefail
root=${1:?usage: check_format.sh SOURCE_DIR}
cd "$root"
fmt=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$fmt" ] || { echo "clang-format not found: apt-get install clang-format" >&2; exit 1; }
# npm's trees (tests/*/node_modules) hold other projects' sources, some of them C++.
mapfile -t files < <(find engine transports backends contract tests examples fuzz bench tools cli agent mcp runtime \
  -name node_modules -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' \) -print 2>/dev/null | sort)
[ "${#files[@]}" -gt 0 ] || { echo "no sources found under $root" >&2; exit 1; }
if ! "$fmt" --dry-run -Werror "${files[@]}"; then
  echo "format gate FAILED: run  $fmt -i \$(git ls-files '*.cpp' '*.hpp')" >&2
  exit 1
fi
echo "format gate passed: ${#files[@]} files"
