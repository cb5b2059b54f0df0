# Sourced by the test scripts that drive pinned npm packages (tests/mcp, tests/otel): what they
# need, or a loud skip (exit 77), which fails instead under SBX_REQUIRE_DOCKER=1 (CI).
#   . "$here/../require.sh"; require_npm "$here" PACKAGE_FILE; require_engine_for "$dsn"

skip() {
  echo "*** SKIPPED: $* ***" >&2
  [ "${SBX_REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 77
}

# FILE under DIR/node_modules (installed by `npm ci` in DIR, which scripts/test runs).
require_npm() {
  [ -f "$1/node_modules/$2" ] || skip "run 'npm ci' in tests/$(basename "$1") (scripts/test does)"
}

# A docker:// DSN needs an engine answering on /var/run/docker.sock; other DSNs need none.
require_engine_for() {
  case "${1:-}" in
    docker://*)
      python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect("/var/run/docker.sock")
s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(4096) else 1)' 2>/dev/null ||
        skip "no Docker engine answers on /var/run/docker.sock"
      ;;
  esac
}
