#!/usr/bin/env bash
# stdio framing without any SDK: one JSON message per line on stdout, nothing else; a parse
# error without an id; requests still in flight at end of input are answered before exit.
#   stdio_test.sh SANDBOXIO_BINARY
set -euo pipefail
out=$(printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' \
  '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_command","arguments":{"argv":["sh","-c","echo a; exit 4"]}}}' \
  '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}' \
  '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_command","arguments":{}}}' \
  'not json' \
  '{"jsonrpc":"2.0","id":6,"method":"no/such/method"}' |
  "${1:?}" mcp --backend fake:// 2>/dev/null)
fail() { echo "FAIL: $*" >&2; echo "$out" >&2; exit 1; }
lines=$(printf '%s\n' "$out" | wc -l)
[ "$lines" = 7 ] || fail "expected 7 lines (one per request), got $lines"
printf '%s\n' "$out" | while read -r l; do
  node -e 'JSON.parse(process.argv[1])' "$l" 2>/dev/null || fail "not one JSON message: $l"
done
grep -q '"id":1,"result":{"protocolVersion":"2025-06-18"' <<<"$out" || fail "version not echoed"
grep -q '"id":3,.*"exit_code":4' <<<"$out" || fail "exit code lost"
grep -q '"id":4,"error":{"code":-32602' <<<"$out" || fail "unknown tool is not -32602"
grep -q '"id":5,.*"isError":true' <<<"$out" || fail "bad arguments are not a tool error"
grep -q '^{"jsonrpc":"2.0","error":{"code":-32700' <<<"$out" || fail "parse error carries an id"
grep -q '"id":6,"error":{"code":-32601' <<<"$out" || fail "unknown method is not -32601"
echo "ok: stdio framing, errors and end of input"
