#!/bin/sh
# The local:// tests once more as a normal user (uid 65534), when run as root: the path a user
# without privileges takes (bubblewrap in an unprivileged user namespace, no setpriv).
# Skips (77) when not root, where the suite already ran as a normal user.
set -eu
tests="$1"
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: not root; the local:// suite already ran as this user"
  exit 77
fi
home=$(mktemp -d)
chmod 755 "$home"
chown 65534:65534 "$home"
trap 'rm -rf "$home"' EXIT
cd "$home"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
  env -i PATH=/usr/bin:/bin HOME="$home" SBX_REQUIRE_LOCAL="${SBX_REQUIRE_LOCAL:-0}" \
  "$tests" --gtest_brief=1
