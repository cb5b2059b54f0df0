"""The Python suite's backends and modes.

Every contract test runs on each backend (fake://, docker:// on the local test image, e2b://
on the local E2B-compatible server over TLS, local://, modal:// on the local Modal server over
TLS) and in each mode: `sync` (the blocking
transport) and `async` (sandboxio's asyncio transport, one event loop per test). A backend
that is not available here skips loudly, except under SBX_REQUIRE_DOCKER=1 (CI), where
docker:// and e2b:// fail instead, and SBX_REQUIRE_LOCAL=1 for local://.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Callable, Iterator

import pytest

import sandboxio

pytest_plugins = ["pytester"]

DOCKER_IMAGE = "sandboxio-test/python:bookworm"
E2B_API_KEY = "e2b_local_test_key"
TEST_CA = "/var/lib/sandboxio-test/tls/ca.pem"


def pytest_configure(config: pytest.Config) -> None:
    # fake:// says once per sandbox that it isolates nothing: expected here.
    config.addinivalue_line("filterwarnings", "ignore:SBX_E1402:sandboxio.errors.SandboxWarning")


def _skip_or_fail(reason: str, required_by: str) -> None:
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{reason}, and {required_by}=1", pytrace=False)
    sys.stderr.write(f"\n*** SKIPPED: {reason} ***\n")
    pytest.skip(reason)


def _docker_up() -> bool:
    if not shutil.which("docker"):
        return False
    r = subprocess.run(["docker", "image", "inspect", DOCKER_IMAGE], capture_output=True)
    return r.returncode == 0


def e2b_dsn() -> str:
    folder = os.environ.get("SBX_E2B_DIR")
    ports_file = os.path.join(folder, "ports.json") if folder else ""
    if not folder or not os.path.exists(ports_file):
        _skip_or_fail("the local E2B server is not running (ctest starts it; scripts/e2b-env)",
                      "SBX_REQUIRE_DOCKER")
    with open(ports_file) as f:
        ports = json.load(f)
    os.environ["E2B_API_KEY"] = E2B_API_KEY
    return (f"e2b://base?api_url=https://127.0.0.1:{ports['apiTls']}"
            f"&sandbox_url=https://127.0.0.1:{ports['sandboxTls']}&ca={TEST_CA}")


def modal_dsn() -> str:
    """modal:// on the local Modal server, its control plane over TLS (ALPN h2)."""
    folder = os.environ.get("SBX_MODAL_DIR")
    ports_file = os.path.join(folder, "ports.json") if folder else ""
    if not folder or not os.path.exists(ports_file):
        _skip_or_fail("the local Modal server is not running (ctest starts it)",
                      "SBX_REQUIRE_DOCKER")
    with open(ports_file) as f:
        ports = json.load(f)
    os.environ.update(MODAL_TOKEN_ID="ak-local-test", MODAL_TOKEN_SECRET="as-local-test",
                      MODAL_CONFIG_PATH="/nonexistent")
    return (f"modal://{DOCKER_IMAGE}?server_url=https://127.0.0.1:{ports['grpcTls']}"
            f"&ca={TEST_CA}")


def e2b_addresses(sandbox_id: str) -> set:
    """The client addresses of the connections that carried requests for a sandbox, as the
    local E2B server saw them (its /_test/connections)."""
    import re
    import urllib.request

    with open(os.path.join(os.environ["SBX_E2B_DIR"], "ports.json")) as f:
        ports = json.load(f)
    url = f"http://127.0.0.1:{ports['api']}/_test/connections?sandbox={sandbox_id}"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return set(re.findall(r'"(127\.0\.0\.1:[0-9]+)"', text))


def dsn_for(backend: str) -> str:
    if backend == "fake":
        return "fake://"
    if backend == "docker":
        if not _docker_up():
            _skip_or_fail(f"no Docker engine with {DOCKER_IMAGE} (scripts/docker-env)",
                          "SBX_REQUIRE_DOCKER")
        return f"docker://{DOCKER_IMAGE}"
    if backend == "local":
        if not shutil.which("bwrap"):
            _skip_or_fail("no bubblewrap for local:// (scripts/deps.sh)", "SBX_REQUIRE_LOCAL")
        return "local://"
    if backend == "modal":
        return modal_dsn()
    return e2b_dsn()


class AsyncAsSync:
    """An AsyncSandbox behind the sync API's shape: each call runs on the test's own loop, so
    one test body checks both transports."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sb: sandboxio.AsyncSandbox) -> None:
        self._loop = loop
        self._sb = sb

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._sb, name)
        if name == "stream":
            return lambda *a, **k: _AsyncProcessAsSync(self._loop, value(*a, **k))
        if asyncio.iscoroutinefunction(value):
            return lambda *a, **k: self._loop.run_until_complete(value(*a, **k))
        return value

    def close(self) -> None:
        self._loop.run_until_complete(self._sb.aclose())

    def __enter__(self) -> "AsyncAsSync":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _AsyncProcessAsSync:
    def __init__(self, loop: asyncio.AbstractEventLoop, proc: sandboxio.AsyncProcess) -> None:
        self._loop = loop
        self._proc = proc

    def __iter__(self) -> Iterator[sandboxio.OutputChunk]:
        while True:
            try:
                yield self._loop.run_until_complete(self._proc.__anext__())
            except StopAsyncIteration:
                return

    def wait(self) -> sandboxio.ExecResult:
        return self._loop.run_until_complete(self._proc.wait())

    def kill(self) -> None:
        self._loop.run_until_complete(self._proc.kill())

    def __enter__(self) -> "_AsyncProcessAsSync":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.run_until_complete(self._proc.__aexit__(*exc))


@pytest.fixture(params=["fake", "docker", "e2b", "local", "modal"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make(backend: str, mode: str) -> Iterator[Callable[..., Any]]:
    """make(**options) -> a sandbox on this backend in this mode, closed after the test."""
    dsn = dsn_for(backend)
    made: list = []
    loop = asyncio.new_event_loop() if mode == "async" else None

    def factory(**options: Any) -> Any:
        if loop is None:
            sb: Any = sandboxio.create(dsn, **options)
        else:
            sb = AsyncAsSync(loop, loop.run_until_complete(sandboxio.acreate(dsn, **options)))
        made.append(sb)
        return sb

    factory.dsn = dsn  # type: ignore[attr-defined]
    factory.mode = mode  # type: ignore[attr-defined]
    factory.backend = backend  # type: ignore[attr-defined]
    factory.loop = loop  # type: ignore[attr-defined]
    yield factory
    for sb in made:
        sb.close()
    if loop is not None:
        loop.close()
