#!/usr/bin/env bash
# `pip install .` in a fresh virtualenv (Debian's python3-venv, --system-site-packages), offline
# (--no-index), then the installed package runs a command in docker:// and in local://, and
# its pytest plugin (sbx_fake) is found by entry point.
#   pip_install.sh SOURCE_DIR BUILD_DIR PYTHON
# BUILD_DIR is this build's tree: the backend builds the extension there (already built: the
# same configuration is not built twice). A first `pip install .` without it configures and
# builds build/python itself, which takes minutes (docs/how-to/python.md).
set -euo pipefail
src=$1 build=$2 python=$3
. "$src/tests/require.sh"
"$python" -m venv --help >/dev/null 2>&1 || skip "python3-venv is not installed (scripts/deps.sh)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
SANDBOXIO_BUILD_DIR=$build "$work/venv/bin/pip" install --no-index --quiet "$src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os, sandboxio
path = sandboxio.__file__
assert "/venv/" in path, f"imported from {path}, not from the virtualenv"
dsns = ["local://"]
docker_up = os.system("docker image inspect sandboxio-test/python:bookworm >/dev/null 2>&1") == 0
if docker_up:
    dsns.append("docker://sandboxio-test/python:bookworm")
elif os.environ.get("SBX_REQUIRE_DOCKER") == "1":
    raise SystemExit("no Docker engine, and SBX_REQUIRE_DOCKER=1")
else:
    print("*** SKIPPED: docker:// (no engine with the test image) ***")
for dsn in dsns:
    with sandboxio.create(dsn) as sb:
        r = sb.run(["python3", "-c", "print(6 * 7)"])
        assert r.stdout == b"42\n", (dsn, r)
        print(f"{dsn}: {r.stdout_text.strip()} ({sb.info().agent})")
PY
cat > test_plugin.py <<'PY'
def test_fixture_comes_from_the_entry_point(sbx_fake):
    assert sbx_fake.dsn.startswith("fake://")
PY
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider test_plugin.py -W ignore::UserWarning
echo "pip install: the package installed offline into a virtualenv and ran"
