#!/usr/bin/env bash
# Builds the MCP server image offline: the sandboxio binary, the shared libraries it needs
# that the base image lacks, and this machine's CA bundle (for TLS to E2B), on top of a local
# base image (no registry is contacted).
#   build.sh SANDBOXIO_BINARY [TAG] [BASE]
# Environment: SBX_CA_BUNDLE, the bundle to copy (default /etc/ssl/certs/ca-certificates.crt,
# from Debian's ca-certificates).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:?usage: build.sh SANDBOXIO_BINARY [TAG] [BASE]}
tag=${2:-sandboxio/mcp:local}
base=${3:-sandboxio-test/python:bookworm}
ca=${SBX_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$ca" ]; then
  echo "build.sh: no CA bundle at $ca: apt-get install ca-certificates (or set SBX_CA_BUNDLE)" >&2
  exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/usr/local/lib/sandboxio"
cp "$binary" "$ctx/rootfs/usr/local/bin/sandboxio"
mkdir -p "$ctx/rootfs/etc/ssl/certs"
cp -L "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
# Every library the binary links, except the C library's own (the base has those).
ldd "$binary" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
    *) cp -L "$lib" "$ctx/rootfs/usr/local/lib/sandboxio/" ;;
  esac
done
cp "$here/Dockerfile" "$ctx/"
docker build -q --build-arg BASE="$base" -t "$tag" "$ctx" >/dev/null
echo "$tag"
