"""``sbx_fake``: the pytest fixture for testing your agent tools offline.

Installed with the package as a pytest plugin, so the fixture is there in every test::

    def test_my_tool_counts_lines(sbx_fake):
        sbx_fake.on(["python3", "count.py", "/tmp/in.txt"], stdout="3\\n")
        assert count_lines(sbx_fake.dsn, "a\\nb\\nc\\n") == "3\\n"   # your tool takes a DSN
        run = sbx_fake.calls[-2]
        assert run.argv[1] == "count.py"
        assert run.network == sandboxio.NetworkPolicy()    # it did not widen egress

Each test gets its own fake world (``fake://NAME``): its own sandboxes, scripted answers and
call log, and no code runs on the machine. A test that leaves sandboxes or processes running
fails at teardown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, Sequence, Tuple, Union

import pytest

from . import _native
from ._sync import Sandbox, create
from ._types import NetworkPolicy


@dataclass(frozen=True)
class Call:
    """One call a tool made on a fake sandbox."""

    operation: str  # "create", "run", "stream", "run_code", "write_file", "kill", ...
    sandbox_id: str
    argv: Tuple[str, ...]
    code: str
    path: str
    env: Tuple[Tuple[str, str], ...]
    workdir: str
    network: NetworkPolicy
    network_attempts: Tuple[str, ...]  # hosts the call tried to reach


class FakeWorld:
    """A fake:// world: its DSN, its scripted answers and the calls made in it."""

    def __init__(self) -> None:
        self._world = _native.FakeWorld.create()

    @property
    def dsn(self) -> str:
        return self._world.dsn

    def on(self, argv: Union[str, Sequence[str]], *, stdout: Union[str, bytes] = b"",
           stderr: Union[str, bytes] = b"", exit_code: int = 0, duration: float = 0.0) -> None:
        """Answers the command ``argv`` (a string: ``sh -c`` it) with this output instead of
        running the built-in shell."""
        args = ["sh", "-c", argv] if isinstance(argv, str) else list(argv)
        self._world.on(args, _b(stdout), _b(stderr), exit_code, duration)

    def on_code(self, needle: str, *, stdout: Union[str, bytes] = b"",
                stderr: Union[str, bytes] = b"", exit_code: int = 0,
                duration: float = 0.0) -> None:
        """Answers run_code calls whose code contains ``needle``."""
        self._world.on_code(needle, _b(stdout), _b(stderr), exit_code, duration)

    @property
    def calls(self) -> Tuple[Call, ...]:
        out = []
        for op, sid, argv, code, path, env, workdir, allow, learn, attempts in self._world.calls():
            out.append(Call(op, sid, tuple(argv), code, path, tuple(sorted(env.items())), workdir,
                            NetworkPolicy(allow=tuple(allow), learn=learn), tuple(attempts)))
        return tuple(out)

    def sandbox(self, **options: object) -> Sandbox:
        """A sandbox in this world (``sandboxio.create(self.dsn, **options)``)."""
        return create(self.dsn, **options)

    @property
    def live_sandboxes(self) -> Tuple[str, ...]:
        return tuple(self._world.live_sandboxes())

    @property
    def running_processes(self) -> int:
        return int(self._world.running_processes())


def _b(value: Union[str, bytes]) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


@pytest.fixture
def sbx_fake() -> Iterator[FakeWorld]:
    """A fresh fake:// world per test; fails the test if it leaves anything running."""
    world = FakeWorld()
    yield world
    leftover: Dict[str, object] = {}
    if world.live_sandboxes:
        leftover["sandboxes"] = world.live_sandboxes
    if world.running_processes:
        leftover["processes"] = world.running_processes
    if leftover:
        pytest.fail(f"the test left {leftover} running in {world.dsn}: close the sandbox "
                    "(a with-block) and wait for or kill its processes", pytrace=False)
