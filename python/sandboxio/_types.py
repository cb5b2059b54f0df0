"""The value objects: frozen, compared with ``==``, every sequence a tuple."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple


class IsolationTier(str, enum.Enum):
    """How strongly a backend isolates its sandboxes from the host, ranked by escape
    resistance only. ``UNKNOWN`` satisfies no requirement. Compare with ``satisfies()``::

        sb.tier.satisfies(IsolationTier.CONTAINER)
    """

    UNKNOWN = "unknown"
    CONTAINER = "container"
    GVISOR = "gvisor"
    MICROVM = "microvm"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def satisfies(self, minimum: "IsolationTier") -> bool:
        """True when this tier is at least ``minimum`` (never for UNKNOWN)."""
        if self is IsolationTier.UNKNOWN:
            return False
        return self.rank >= IsolationTier(minimum).rank

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, IsolationTier):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, IsolationTier):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, IsolationTier):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, IsolationTier):
            return NotImplemented
        return self.rank >= other.rank

    def __str__(self) -> str:
        return self.value


_RANK = {IsolationTier.UNKNOWN: 0, IsolationTier.CONTAINER: 10, IsolationTier.GVISOR: 20,
         IsolationTier.MICROVM: 30}


@dataclass(frozen=True)
class NetworkPolicy:
    """Egress: denied unless allowed. ``NetworkPolicy()`` denies everything.

    ``allow`` holds host names (``"pypi.org"``), one leading wildcard label
    (``"*.pythonhosted.org"``) or IPv4 addresses, each optionally with a port
    (``"pypi.org:443"``). ``learn`` denies everything and records every attempt, so that a
    run shows which hosts it needs. ``pinned`` connects a name to a fixed address instead of
    resolving it (like curl's ``--resolve``).
    """

    allow: Tuple[str, ...] = ()
    learn: bool = False
    pinned: Tuple[Tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.allow, str):
            raise TypeError("NetworkPolicy.allow is a sequence of hosts, not one string")
        object.__setattr__(self, "allow", tuple(self.allow))
        pinned = self.pinned.items() if isinstance(self.pinned, dict) else self.pinned
        object.__setattr__(self, "pinned", tuple(sorted((str(k), str(v)) for k, v in pinned)))

    @classmethod
    def deny_all(cls) -> "NetworkPolicy":
        return cls()

    @classmethod
    def allowing(cls, *hosts: str) -> "NetworkPolicy":
        return cls(allow=tuple(hosts))

    @classmethod
    def learning(cls) -> "NetworkPolicy":
        return cls(learn=True)

    @property
    def denies_all(self) -> bool:
        return not self.allow


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a streamed command's output. Ordered within each stream, not between."""

    stream: str  # "stdout" or "stderr"
    data: bytes
    offset: int = 0  # where data starts in its stream

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class RichOutput:
    """A rich value run_code produced (Jupyter's mime bundle entries: image/png, text/html)."""

    mime_type: str
    data: bytes


@dataclass(frozen=True)
class CodeError:
    """An exception the code raised in run_code: its name, value and traceback."""

    name: str
    value: str
    traceback: str


@dataclass(frozen=True)
class ExecResult:
    """What a command or a code cell did. A non-zero exit, a timeout or a signal is a result,
    not an exception: look at ``termination`` (``"exited"``, ``"signalled"``, ``"timeout"``,
    ``"out_of_memory"``, ``"sandbox_gone"``, ``"cancelled"``)."""

    exit_code: Optional[int]
    stdout: bytes = b""
    stderr: bytes = b""
    duration: float = 0.0  # seconds
    termination: str = "exited"
    signal: Optional[int] = None
    streamed: bool = False  # stream()'s result: stdout and stderr empty by construction
    results: Tuple[RichOutput, ...] = ()
    error: Optional[CodeError] = None
    context_restarted: bool = False
    bytes_in: int = 0  # the meter: stdin or code sent in
    bytes_out: int = 0  # output that came out (stdout and stderr, streamed or kept)
    backend: str = ""  # the DSN scheme that ran it

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.termination == "exited" and self.exit_code == 0

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


@dataclass(frozen=True)
class FileInfo:
    path: str
    name: str
    type: str  # "file", "directory", "symlink", "other"
    size: int = 0
    mode: int = 0
    mtime: Optional[int] = None  # seconds since the epoch, when the backend knows it
    link_target: str = ""


@dataclass(frozen=True)
class SandboxInfo:
    backend: str
    id: str
    tier: IsolationTier
    capabilities: Tuple[str, ...]
    network: NetworkPolicy
    state: str
    lifetime: int  # seconds
    agent: str = ""


@dataclass(frozen=True)
class CodeContext:
    """A stateful code context (the stateful_code capability)."""

    id: str
    language: str


@dataclass(frozen=True)
class Problem:
    """A warning the backend reported: its catalog number, detail and hint."""

    number: int
    detail: str
    hint: str = ""

    @property
    def code(self) -> str:
        return f"SBX_E{self.number}"


# ---- from the engine's tuples ----

def result_from(t: Tuple[Any, ...]) -> ExecResult:
    (code, out, err, duration_ns, termination, sig, streamed, rich, error, restarted, bytes_in,
     bytes_out, backend) = t
    return ExecResult(
        exit_code=code, stdout=out, stderr=err, duration=duration_ns / 1e9,
        termination=termination, signal=sig, streamed=streamed,
        results=tuple(RichOutput(m, d) for m, d in rich),
        error=CodeError(*error) if error is not None else None,
        context_restarted=restarted, bytes_in=bytes_in, bytes_out=bytes_out, backend=backend)


def chunk_from(t: Tuple[Any, ...]) -> OutputChunk:
    return OutputChunk(t[0], t[1], t[2])


def info_from(d: Dict[str, Any]) -> SandboxInfo:
    return SandboxInfo(
        backend=d["backend"], id=d["id"], tier=IsolationTier(d["tier"]),
        capabilities=tuple(d["capabilities"]),
        network=NetworkPolicy(allow=tuple(d["allow"]), learn=d["learn"]),
        state=d["state"], lifetime=d["lifetime"], agent=d["agent"])


def files_from(rows: List[Tuple[Any, ...]]) -> Tuple[FileInfo, ...]:
    return tuple(FileInfo(*row) for row in rows)


def problem_from(t: Tuple[Any, ...]) -> Problem:
    return Problem(t[0], t[1], t[2])
