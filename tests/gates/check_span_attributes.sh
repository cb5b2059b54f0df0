#!/usr/bin/env bash
# Gate: every span attribute name sandboxio exports is spelled once, in
# runtime/src/span_attributes.hpp; each one there is used by the exporter (telemetry.cpp, and
# otlp_spans.cpp, which makes the spans) and documented in docs/how-to/observability.md.
#   check_span_attributes.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: check_span_attributes.sh SOURCE_ROOT}
names="$root/runtime/src/span_attributes.hpp"
fail=0
# 1. No attribute-like literal anywhere else in the library's code (comments aside).
strays=$(cd "$root" && grep -rnE '"(gen_ai|sandboxio|process|error|server|telemetry|service)\.[a-z_][a-z_.]*"' \
  engine runtime transports backends cli mcp agent --include='*.cpp' --include='*.hpp' |
  grep -v '^runtime/src/span_attributes.hpp:' | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
if [ -n "$strays" ]; then
  echo "SPAN ATTRIBUTES: names spelled outside runtime/src/span_attributes.hpp:" >&2
  echo "$strays" >&2
  fail=1
fi
# 2. Each constant is used by the exporter; each attribute name is documented.
while read -r constant value; do
  if ! grep -q "attr::$constant\b" "$root/runtime/src/telemetry.cpp" "$root/runtime/src/otlp_spans.cpp"; then
    echo "SPAN ATTRIBUTES: attr::$constant is never used by the exporter" >&2
    fail=1
  fi
  case "$value" in
    *.*) grep -qF "\`$value\`" "$root/docs/how-to/observability.md" ||
      { echo "SPAN ATTRIBUTES: \`$value\` is not in docs/how-to/observability.md" >&2; fail=1; } ;;
  esac
done < <(sed -nE 's/^inline constexpr std::string_view (k[A-Za-z]+) = "([^"]+)";/\1 \2/p' "$names")
[ "$fail" = 0 ] && echo "span attribute gate passed: $(grep -c '^inline constexpr' "$names") names"
exit "$fail"
