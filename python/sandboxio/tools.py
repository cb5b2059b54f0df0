"""Agent tools over a sandbox, without any agent framework's package.

``run_command_tool(sb)`` and ``run_code_tool(sb)`` return plain functions, typed and
documented the way tool decorators read them (LangGraph's ``@tool`` / ``StructuredTool``, the
OpenAI Agents SDK's ``function_tool``), and carrying their JSON schema::

    run_python = sandboxio.tools.run_code_tool(sb)
    run_python("print(6 * 7)")          # 'exit_code: 0\\nstdout:\\n42\\n'
    run_python.name, run_python.description, run_python.parameters   # for any framework
    run_python.openai_tool()            # {"type": "function", "function": {...}}

Given an AsyncSandbox, the tools are coroutine functions. What a tool returns is text for a
model: the exit code (or how the command ended), stdout and stderr, each cut to
``max_output`` characters with the cut said. A failed command is an answer, not an
exception; sandboxio errors (a gone sandbox) propagate.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from ._aio import AsyncSandbox
from ._sync import Sandbox
from ._types import ExecResult

AnySandbox = Union[Sandbox, AsyncSandbox]


def describe_result(result: ExecResult, max_output: int = 20_000) -> str:
    """An ExecResult as a model reads it best: how it ended, then its output."""
    if result.termination == "exited":
        head = f"exit_code: {result.exit_code}"
    elif result.termination == "timeout":
        head = "the command was killed at its timeout"
    elif result.termination == "signalled":
        head = f"the command was killed by signal {result.signal}"
    else:
        head = f"the command ended: {result.termination}"
    parts = [head + "\n"]
    for label, data in (("stdout", result.stdout), ("stderr", result.stderr)):
        if data:
            parts.append(f"{label}:\n" + _line(_cut(data.decode("utf-8", "replace"), max_output)))
    if result.error is not None:
        parts.append(f"error: {result.error.name}: {result.error.value}\n"
                     + _line(_cut(result.error.traceback, max_output)))
    for rich in result.results:
        parts.append(f"result ({rich.mime_type}, {len(rich.data)} bytes)\n")
    return "".join(parts)


def _line(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def _finish(fn: Callable[..., Any], name: str, description: str,
            parameters: Dict[str, Any]) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = description
    fn.name = name  # type: ignore[attr-defined]
    fn.description = description  # type: ignore[attr-defined]
    fn.parameters = parameters  # type: ignore[attr-defined]
    fn.openai_tool = lambda: {  # type: ignore[attr-defined]
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }
    return fn


def run_command_tool(sandbox: AnySandbox, *, name: str = "run_command",
                     timeout: float = 60.0, workdir: Optional[str] = None,
                     max_output: int = 20_000) -> Callable[..., Any]:
    """A tool that runs a shell command line in ``sandbox`` (``sh -c``)."""
    description = (f"Run a shell command in an isolated sandbox ({sandbox.backend}://) and "
                   "return its exit code, stdout and stderr. Network access is restricted. "
                   f"Commands are killed after {timeout:g} seconds.")
    parameters = {
        "type": "object",
        "properties": {"command": {"type": "string",
                                   "description": "The shell command line to run, as for sh -c."}},
        "required": ["command"],
        "additionalProperties": False,
    }
    if isinstance(sandbox, AsyncSandbox):
        asb = sandbox

        async def run_command(command: str) -> str:
            r = await asb.run(command, timeout=timeout, workdir=workdir)
            return describe_result(r, max_output)
        return _finish(run_command, name, description, parameters)

    sb = sandbox

    def run_command_sync(command: str) -> str:
        return describe_result(sb.run(command, timeout=timeout, workdir=workdir), max_output)
    return _finish(run_command_sync, name, description, parameters)


def run_code_tool(sandbox: AnySandbox, *, name: str = "run_code", language: str = "python",
                  stateful: bool = True, timeout: float = 60.0,
                  max_output: int = 20_000) -> Callable[..., Any]:
    """A tool that runs code in ``sandbox``'s interpreter. With ``stateful`` (and a backend
    with the stateful_code capability), variables survive between calls, as in a notebook."""
    keeps = stateful and "stateful_code" in sandbox.capabilities
    description = (f"Run {language} code in an isolated sandbox and return what it printed, "
                   "its result and any exception. "
                   + ("Variables and imports persist between calls. " if keeps else
                      "Each call starts fresh. ")
                   + f"Code is stopped after {timeout:g} seconds.")
    parameters = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": f"The {language} code to run."}},
        "required": ["code"],
        "additionalProperties": False,
    }
    context: Dict[str, Any] = {}

    if isinstance(sandbox, AsyncSandbox):
        asb = sandbox

        async def run_code(code: str) -> str:
            if keeps and "id" not in context:
                context["id"] = (await asb.create_context(language)).id
            r = await asb.run_code(code, language=language, context=context.get("id"),
                                       timeout=timeout)
            return describe_result(r, max_output)
        return _finish(run_code, name, description, parameters)

    sb = sandbox

    def run_code_sync(code: str) -> str:
        if keeps and "id" not in context:
            context["id"] = sb.create_context(language).id
        r = sb.run_code(code, language=language, context=context.get("id"), timeout=timeout)
        return describe_result(r, max_output)
    return _finish(run_code_sync, name, description, parameters)


__all__ = ["describe_result", "run_code_tool", "run_command_tool"]
