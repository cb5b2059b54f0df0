"""The sync API: the engine's blocking transport, with the GIL released while it waits.

    with sandboxio.create("docker://python:3.12-slim") as sb:
        print(sb.run(["python3", "-c", "print(6 * 7)"]).stdout_text)
"""

from __future__ import annotations

import warnings as _warnings
from typing import Any, Iterator, Mapping, Optional, Tuple, Union

from . import _native, _options
from ._types import (CodeContext, ExecResult, FileInfo, IsolationTier, OutputChunk, Problem,
                     SandboxInfo, chunk_from, files_from, info_from, problem_from, result_from)


class Process:
    """A running command (``Sandbox.stream()``): iterate its OutputChunks, then ``wait()``.
    Leaving the with-block, or dropping it, before the end kills the remote process."""

    def __init__(self, native: _native.SyncProcess) -> None:
        self._native = native
        self._result: Optional[ExecResult] = None
        self._drained = False  # its output ended: the process has ended too

    def __iter__(self) -> Iterator[OutputChunk]:
        while True:
            chunk = self._native.next()
            if chunk is None:
                self._drained = True
                return
            yield chunk_from(chunk)

    def wait(self) -> ExecResult:
        """Waits for the end (discarding output not read) and returns the result, whose
        stdout and stderr are empty by construction (``streamed=True``)."""
        if self._result is None:
            self._result = result_from(self._native.wait())
        return self._result

    def kill(self) -> None:
        """Kills the remote process now; ``wait()`` then reports ``"cancelled"``."""
        self._native.kill()

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._result is None:
            if self._drained:
                self.wait()  # ended by itself: keep its result for wait() after the block
            else:
                self._native.kill()


class Sandbox:
    """A sandbox driven on the calling thread. Use it from one thread at a time; the with-block's
    end, or ``close()``, kills it (unless ``outlive_owner=True`` or ``detach()``)."""

    def __init__(self, native: _native.SyncSandbox) -> None:
        self._native = native
        for problem in self.warnings:
            _warnings.warn(f"{problem.code}: {problem.detail}", _sandbox_warning(), stacklevel=3)

    # ---- facts ----
    @property
    def id(self) -> str:
        return self._native.id

    @property
    def backend(self) -> str:
        return self._native.backend

    @property
    def tier(self) -> IsolationTier:
        return IsolationTier(self._native.tier)

    @property
    def capabilities(self) -> Tuple[str, ...]:
        return tuple(self._native.capabilities)

    @property
    def warnings(self) -> Tuple[Problem, ...]:
        return tuple(problem_from(p) for p in self._native.warnings())

    def info(self) -> SandboxInfo:
        return info_from(self._native.info())

    # ---- commands and code ----
    def run(self, argv: _options.Argv, *, env: Optional[Mapping[str, str]] = None,
            secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
            timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
            output_limit: Optional[int] = None) -> ExecResult:
        """Runs a command to its end. A string is run by ``sh -c``. A non-zero exit, a timeout
        (the process tree is killed) or a signal is a result, not an exception."""
        return result_from(self._native.run(_options.command(
            argv, env=env, secrets=secrets, workdir=workdir, timeout=timeout, stdin=stdin,
            output_limit=output_limit)))

    def stream(self, argv: _options.Argv, *, env: Optional[Mapping[str, str]] = None,
               secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
               timeout: Optional[float] = None,
               stdin: Union[bytes, str, None] = None) -> Process:
        """Starts a command whose output arrives as it is produced."""
        return Process(self._native.stream(_options.command(
            argv, env=env, secrets=secrets, workdir=workdir, timeout=timeout, stdin=stdin)))

    def run_code(self, code: str, *, language: str = "python",
                 context: Union[CodeContext, str, None] = None, timeout: Optional[float] = None,
                 env: Optional[Mapping[str, str]] = None,
                 secrets: Optional[Mapping[str, str]] = None) -> ExecResult:
        """Runs code in the sandbox's interpreter; with a context, its variables survive."""
        return result_from(self._native.run_code(_options.code_request(
            code, language=language, context=context, timeout=timeout, env=env,
            secrets=secrets)))

    def create_context(self, language: str = "python") -> CodeContext:
        return CodeContext(*self._native.create_context(language))

    # ---- files ----
    def write_file(self, path: str, data: Union[bytes, str]) -> None:
        self._native.write_file(path, data.encode() if isinstance(data, str) else bytes(data))

    def read_file(self, path: str) -> bytes:
        return self._native.read_file(path)

    def list_files(self, path: str) -> Tuple[FileInfo, ...]:
        return files_from(self._native.list_files(path))

    def remove_file(self, path: str) -> None:
        self._native.remove_file(path)

    # ---- life ----
    def kill(self) -> None:
        """Ends the sandbox now; later calls raise SandboxGone."""
        self._native.kill()

    def detach(self) -> None:
        """Keeps the sandbox alive after this object ends, until its lifetime runs out."""
        self._native.detach()

    def close(self) -> None:
        """Ends this handle: kills the sandbox unless it was detached or outlives its owner."""
        self._native.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._native.closed:
            return "<sandboxio.Sandbox closed>"
        return f"<sandboxio.Sandbox {self.backend}:{self.id}>"


def _sandbox_warning() -> type:
    from .errors import SandboxWarning

    return SandboxWarning


def create(dsn: str, **options: Any) -> Sandbox:
    """Creates a sandbox for ``dsn`` (``fake://``, ``docker://python:3.12-slim``,
    ``local://``, ``e2b://base``). Options: lifetime, create_timeout, env, secrets, workdir,
    labels, network, cpus, memory, pids, disk, require_isolation, outlive_owner,
    teardown_grace, traceparent, audit_log, capture_commands, record."""
    return Sandbox(_native.SyncSandbox.create(dsn, _options.create_options(options)))


def connect(dsn: str, sandbox_id: str, **options: Any) -> Sandbox:
    """Re-attaches to a running sandbox by id. The handle does not own it: closing the handle
    leaves the sandbox running."""
    return Sandbox(_native.SyncSandbox.connect(dsn, sandbox_id, _options.create_options(options)))
