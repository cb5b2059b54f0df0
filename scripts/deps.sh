#!/usr/bin/env bash
# Installs the Debian 12 packages sandboxio builds and tests with, when any is missing.
# As root it runs apt-get itself; otherwise it prints the one command to run and fails.
set -euo pipefail
packages=(
  cmake ninja-build g++ clang-14 clang-format clang-tidy ccache pkg-config binutils
  libsimdjson-dev libnghttp2-dev libyaml-cpp-dev libasio-dev libssl-dev libcli11-dev node-llhttp
  libgtest-dev libgmock-dev libbenchmark-dev libclang-rt-14-dev nodejs
  mkdocs mkdocs-material python3-yaml zsh fish make bubblewrap python3 procps iproute2 iptables
  ca-certificates python3-dev python3-pybind11 pybind11-dev python3-venv python3-pytest
  python3-pytest-asyncio python3-anyio mypy chromium
)
# mkdocs and mkdocs-material build the docs site; python3-yaml serves tools/gen_*.py; zsh and
# fish are there for the completion test (bash is always there). make is CMake's default
# generator (the install gate's consumer project uses it). bubblewrap is what local:// runs
# sandboxes in, and python3 and procps (pgrep) what the demo and the tests run inside them.
# iproute2 and iptables give the local E2B server's sandboxes their egress firewall.
# ca-certificates is the CA bundle the MCP image carries (mcp/image/build.sh).
# python3-dev, pybind11 and python3-venv build the Python package (python/); pytest,
# pytest-asyncio, anyio and mypy test it. chromium renders `sandboxio replay --html`'s page
# headless (the replay page test).
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm: stock Debian 12 has nodejs without it (the official SDKs and MCP tools the tests use
# come from the npm registry); machines with a Node of their own have their own npm.
command -v npm >/dev/null || missing+=(npm)
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "sandboxio needs these Debian packages: ${missing[*]}" >&2
  echo "Run:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "Installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
