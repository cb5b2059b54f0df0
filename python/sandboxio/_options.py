"""Keyword arguments -> the engine's option dicts, checked here so that a typo is an
InvalidCreateOptions with a hint, not a silent default."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import errors
from ._types import IsolationTier, NetworkPolicy

Argv = Union[str, Sequence[str]]

_CREATE_KEYS = {
    "lifetime", "create_timeout", "env", "secrets", "workdir", "labels", "network", "cpus",
    "memory", "pids", "disk", "require_isolation", "outlive_owner", "teardown_grace",
    "traceparent", "audit_log", "capture_commands", "record",
}


def create_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    unknown = sorted(set(options) - _CREATE_KEYS)
    if unknown:
        raise errors.InvalidCreateOptions(
            f"unknown create option(s): {', '.join(unknown)}",
            "the options are: " + ", ".join(sorted(_CREATE_KEYS)))
    out: Dict[str, Any] = {}
    for key in ("lifetime", "create_timeout", "teardown_grace", "cpus"):
        if options.get(key) is not None:
            out[key] = _number(key, options[key])
    for key, native in (("memory", "memory_bytes"), ("disk", "disk_bytes"), ("pids", "pids")):
        if options.get(key) is not None:
            out[native] = _count(key, options[key])
    out.update(_env(options))
    if options.get("workdir") is not None:
        out["workdir"] = str(options["workdir"])
    if options.get("labels") is not None:
        out["labels"] = {str(k): str(v) for k, v in dict(options["labels"]).items()}
    network = options.get("network")
    if network is not None:
        if not isinstance(network, NetworkPolicy):
            raise errors.InvalidCreateOptions(
                f"network must be a sandboxio.NetworkPolicy, not {type(network).__name__}",
                "network=sandboxio.NetworkPolicy(allow=('pypi.org',))")
        out["allow"] = list(network.allow)
        out["learn"] = network.learn
        out["pinned"] = dict(network.pinned)
    tier = options.get("require_isolation")
    if tier is not None:
        out["require_isolation"] = IsolationTier(tier).value
    for key in ("outlive_owner", "capture_commands"):
        if options.get(key) is not None:
            out[key] = bool(options[key])
    for key in ("traceparent", "audit_log", "record"):
        if options.get(key) is not None:
            out[key] = str(options[key])
    return out


def command(argv: Argv, *, env: Optional[Mapping[str, str]] = None,
            secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
            timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
            output_limit: Optional[int] = None) -> Dict[str, Any]:
    """A string is a shell command line (``sh -c``); a sequence is the argv itself."""
    if isinstance(argv, str):
        args = ["sh", "-c", argv]
    else:
        args = [str(a) for a in argv]
    if not args:
        raise errors.ApiMisuse("the command is empty", "run(['echo', 'hi']) or run('echo hi')")
    out: Dict[str, Any] = {"argv": args}
    out.update(_env({"env": env, "secrets": secrets}))
    if workdir is not None:
        out["workdir"] = str(workdir)
    if timeout is not None:
        out["timeout"] = _number("timeout", timeout)
    if stdin is not None:
        out["stdin"] = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
    if output_limit is not None:
        out["output_limit"] = _count("output_limit", output_limit)
    return out


def code_request(code: str, *, language: str = "python", context: Any = None,
                 timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                 secrets: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {"code": str(code), "language": language}
    if context is not None:
        out["context"] = getattr(context, "id", context)
    if timeout is not None:
        out["timeout"] = _number("timeout", timeout)
    out.update(_env({"env": env, "secrets": secrets}))
    return out


def _env(options: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key in ("env", "secrets"):
        value = options.get(key)
        if value is not None:
            out[key] = {str(k): str(v) for k, v in dict(value).items()}
    return out


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise errors.InvalidCreateOptions(f"{key} must be a non-negative number of seconds, not {value!r}",
                                          f"{key}=30")
    return float(value)


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise errors.InvalidCreateOptions(f"{key} must be a non-negative integer, not {value!r}",
                                          f"{key}=512 * 2**20" if key in ("memory", "disk") else f"{key}=256")
    return value
