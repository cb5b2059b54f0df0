#!/bin/sh
# The local:// tests once more as a normal user (uid 65534), when run as root: the path a user
# without privileges takes (bubblewrap in an unprivileged user namespace, no setpriv).
#   as_normal_user.sh TESTS AGENT
# The test binary and the agent are copied into a home of that user's first: a build tree under
# /root (0700) is out of its reach. Skips (77) when not root, where the suite already ran as a
# normal user.
set -eu
tests="$1"
agent="$2"
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: not root; the local:// suite already ran as this user"
  exit 77
fi
home=$(mktemp -d)
chmod 755 "$home"
trap 'rm -rf "$home"' EXIT
cp "$tests" "$home/sandboxio_local_tests"
cp "$agent" "$home/sandboxio-agent"
chmod 755 "$home/sandboxio_local_tests" "$home/sandboxio-agent"
chown -R 65534:65534 "$home"
cd "$home"
# Not exec: the trap removes the home afterwards.
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
  env -i PATH=/usr/bin:/bin HOME="$home" SBX_AGENT="$home/sandboxio-agent" \
  SBX_REQUIRE_LOCAL="${SBX_REQUIRE_LOCAL:-0}" \
  "$home/sandboxio_local_tests" --gtest_brief=1
