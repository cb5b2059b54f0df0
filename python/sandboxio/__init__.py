"""sandboxio: one secure API for running AI-agent code in any sandbox.

Sync::

    import sandboxio
    with sandboxio.create("docker://python:3.12-slim") as sb:
        print(sb.run(["python3", "-c", "print(6 * 7)"]).stdout_text)

Async (on the caller's own event loop)::

    async with await sandboxio.acreate("fake://") as sb:
        print((await sb.run("echo hi")).stdout_text)

Egress is denied unless allowed (``network=NetworkPolicy(allow=("pypi.org",))``); a
backend that cannot enforce what is asked refuses to create. Errors are
``sandboxio.errors`` exceptions with a code, a hint and a docs URL.
"""

from . import errors, tools
from ._aio import AsyncProcess, AsyncSandbox, aconnect, acreate
from ._native import __version__
from ._sync import Process, Sandbox, connect, create
from ._types import (CodeContext, CodeError, ExecResult, FileInfo, IsolationTier, NetworkPolicy,
                     OutputChunk, Problem, RichOutput, SandboxInfo)
from .errors import SandboxioError, SandboxTimeout

__all__ = [
    "AsyncProcess", "AsyncSandbox", "CodeContext", "CodeError", "ExecResult", "FileInfo",
    "IsolationTier", "NetworkPolicy", "OutputChunk", "Problem", "Process", "RichOutput",
    "Sandbox", "SandboxInfo", "SandboxTimeout", "SandboxioError", "__version__", "aconnect",
    "acreate", "connect", "create", "errors", "tools",
]
