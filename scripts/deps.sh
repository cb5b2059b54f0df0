#!/usr/bin/env bash
# Installs the Debian 12 packages sandboxio builds and tests with, when any is missing.
# As root it runs apt-get itself; otherwise it prints the one command to run and fails.
set -euo pipefail
packages=(
  cmake ninja-build g++ clang-14 clang-format clang-tidy ccache pkg-config binutils
  libsimdjson-dev libyaml-cpp-dev libasio-dev libssl-dev libcli11-dev node-llhttp
  libgtest-dev libgmock-dev libbenchmark-dev libclang-rt-14-dev nodejs
  mkdocs mkdocs-material python3-yaml zsh fish
)
# mkdocs and mkdocs-material build the docs site; python3-yaml serves tools/gen_*.py; zsh and
# fish are there for the completion test (bash is always there).
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
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
