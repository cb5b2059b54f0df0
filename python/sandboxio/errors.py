"""sandboxio's exceptions: one class per code of the error catalog (docs/errors/).

Every exception carries its code (``"SBX_E1302"``), the catalog's hint and the URL of its
page. A code ending in 00 names a group, and the codes of the group derive from it::

    try:
        sb.run(["python3", "-c", "..."])
    except sandboxio.errors.PolicyError as e:      # every SBX_E14xx
        print(e.code, e.hint, e.url)

No sandboxio exception derives from a builtin one or shadows its name (decision Q4):
``except OSError`` never swallows a sandbox timeout. ``SandboxTimeout`` is the catch-all of
every timeout: ``CreateTimeout``, ``ExecutionTimeout``, ``OperationTimeout`` and
``AuditSinkTimeout``. A command that runs past its own timeout is not an exception at all:
``run()`` returns an ``ExecResult`` whose ``termination`` is ``"timeout"``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type


class SandboxioError(Exception):
    """The root of every sandboxio exception."""

    number: int = 0
    """The catalog's number of this class (1302); an instance's own is ``number`` too."""

    def __init__(self, detail: str = "", hint: Optional[str] = None, *, number: Optional[int] = None):
        self.number = number if number is not None else type(self).number
        entry = _entry(self.number)
        self.detail = detail or (entry[3] if entry else "")
        self.hint = hint or (entry[4] if entry else "")
        self.url = entry[5] if entry else ""
        super().__init__(self.detail)

    @property
    def code(self) -> str:
        """The catalog id, ``"SBX_E1302"``."""
        return f"SBX_E{self.number}"

    def __str__(self) -> str:
        text = f"{self.code} {type(self).__name__}: {self.detail}"
        if self.hint:
            text += f" Hint: {self.hint}"
        return text

    def __reduce__(self) -> Tuple[Any, ...]:  # picklable across processes, like the builtin exceptions
        return (_rebuild, (self.number, self.detail, self.hint))


class SandboxTimeout(SandboxioError):
    """Catch-all base of every sandboxio timeout (never the builtin TimeoutError)."""


# The groups (codes ending in 00) and their members, as docs/errors/ lists them. A test
# checks this list against the engine's catalog, both ways.
class ConfigurationError(SandboxioError): number = 1000
class InvalidDsn(ConfigurationError): number = 1001
class InvalidOption(ConfigurationError): number = 1002
class InvalidEnvironment(ConfigurationError): number = 1003
class InvalidCreateOptions(ConfigurationError): number = 1004
class InvalidRoutingFile(ConfigurationError): number = 1005
class BackendError(SandboxioError): number = 1100
class BackendNotFound(BackendError): number = 1100
class BackendNotInstalled(BackendError): number = 1101
class BackendUnavailable(BackendError): number = 1102
class SandboxError(SandboxioError): number = 1200
class CreateFailed(SandboxError): number = 1201
class ImageNotFound(CreateFailed): number = 1202
class CreateTimeout(SandboxError, SandboxTimeout): number = 1203
class SandboxGone(SandboxError): number = 1204
class PossibleOrphan(SandboxError): number = 1205
class SandboxNotFound(SandboxError): number = 1206
class ExecutionError(SandboxioError): number = 1300
class ExecutionFailed(ExecutionError): number = 1301
class ExecutionTimeout(ExecutionError, SandboxTimeout): number = 1302
class OutputLimitExceeded(ExecutionError): number = 1303
class ProcessClosed(ExecutionError): number = 1304
class CodeContextNotFound(ExecutionError): number = 1305
class PolicyError(SandboxioError): number = 1400
class CapabilityNotSupported(PolicyError): number = 1401
class IsolationNotSatisfied(PolicyError): number = 1402
class PolicyUnenforceable(PolicyError): number = 1403
class ResourceLimitUnsupported(PolicyError): number = 1404
class EgressDenied(PolicyError): number = 1405
class AuthenticationError(SandboxioError): number = 1500
class CredentialsMissing(AuthenticationError): number = 1501
class AuditError(SandboxioError): number = 1600
class AuditSinkTimeout(AuditError, SandboxTimeout): number = 1601
class AuditSinkFailed(AuditError): number = 1602
class TraceInvalid(AuditError): number = 1603
class ReplayDiverged(AuditError): number = 1604
class FilesystemError(SandboxioError): number = 1700
class FileNotFound(FilesystemError): number = 1701
class NotADirectory(FilesystemError): number = 1702
class IsADirectory(FilesystemError): number = 1703
class InvalidPath(FilesystemError): number = 1704
class FilePermissionDenied(FilesystemError): number = 1705
class ProtocolError(SandboxioError): number = 1800
class RemoteProtocolViolation(ProtocolError): number = 1801
class ConnectionLost(ProtocolError): number = 1802
class MessageTooLarge(ProtocolError): number = 1803
class ConnectionFailed(ProtocolError): number = 1804
class TlsError(ProtocolError): number = 1805
class RateLimited(ProtocolError): number = 1806
class QueueFull(ProtocolError): number = 1807
class OperationTimeout(ProtocolError, SandboxTimeout): number = 1808
class ApiMisuse(ProtocolError): number = 1809


class OrphanedSandboxWarning(UserWarning):
    """A sandbox's teardown ran out of grace: it may still run until its lifetime ends
    (``sandboxio reap`` removes it)."""


class SandboxWarning(UserWarning):
    """A problem the backend reported without failing (an UNKNOWN isolation tier, an audit
    sink that was slow). ``Sandbox.warnings`` keeps them too."""


# The catalog's BackendNotFound is number 1100, the group's own number: the group class is
# BackendError, so that `except BackendError` reads as what it catches.
_BY_NUMBER: Dict[int, Type[SandboxioError]] = {}
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, SandboxioError) and _cls.number:
        if _cls is not BackendError:
            _BY_NUMBER[_cls.number] = _cls
_BY_NUMBER[1200] = SandboxError

_CATALOG: Optional[Dict[int, Tuple[Any, ...]]] = None


def _entry(number: int) -> Optional[Tuple[Any, ...]]:
    global _CATALOG
    if _CATALOG is None:
        from . import _native

        _CATALOG = {e[0]: e for e in _native.catalog()}
    return _CATALOG.get(number)


def from_code(number: int, detail: str = "", hint: str = "") -> SandboxioError:
    """The exception for catalog number ``number`` (the engine's errors arrive this way)."""
    cls = _BY_NUMBER.get(number)
    if cls is None:  # a code this package does not know: its group's class, else the root
        cls = _BY_NUMBER.get(number // 100 * 100, SandboxioError)
    return cls(detail, hint or None, number=number)


def _rebuild(number: int, detail: str, hint: str) -> SandboxioError:
    return from_code(number, detail, hint)


__all__ = [name for name, value in globals().items()
           if isinstance(value, type) and issubclass(value, (SandboxioError, UserWarning))]
