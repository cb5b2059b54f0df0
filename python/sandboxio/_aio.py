"""The asyncio API: sandboxio's machines driven by Python's own event loop.

This module is a transport, as the C++ Asio and blocking ones are: it performs the
machine's requests with asyncio's connections (Unix, TCP, TLS, and process endpoints such as
local://'s bubblewrap), feeds it their bytes and the loop's time, and arms one timer at the
machine's next deadline. No thread and no second event loop: N sandboxes are N machines on
the caller's loop.

    async with await sandboxio.acreate("docker://python:3.12-slim") as sb:
        result = await sb.run(["python3", "-c", "print(6 * 7)"])
        async with sb.stream(["sh", "-c", "echo a; echo b >&2"]) as proc:
            async for chunk in proc:
                print(chunk.stream, chunk.text)
            print((await proc.wait()).exit_code)

Cancelling a task that awaits an operation cancels the operation: a running command's
process is killed in the sandbox. The cancelled task waits for the kill to be confirmed for
at most the teardown grace (SBX_TEARDOWN_GRACE), then cancellation propagates as itself,
never wrapped in a SandboxioError. The kill goes on even if the wait is cut short.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import time
import warnings as _warnings
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Set, Tuple, Union, cast

from . import _native, _options, errors
from ._types import (CodeContext, ExecResult, FileInfo, IsolationTier, OutputChunk, Problem,
                     SandboxInfo, chunk_from, files_from, info_from, problem_from, result_from)

_CANCELLED = object()
_CONNECTION_FAILED = 1804
_CONNECTION_LOST = 1802
_TLS_ERROR = 1805

# Drivers whose sandbox handle is gone but whose machine still has work nobody waits for
# (removing a half-made sandbox, a kill): kept alive until the work is done or the grace ends.
_DRAINING: Set["_Driver"] = set()


def _now() -> int:
    return time.monotonic_ns()



# One TLS context per trust configuration, made on first use and kept for the process: the
# system's CA bundle costs 19 to 35 ms of CPU to load, which a context per connection paid on
# every handshake (the C++ transports keep theirs the same way, sandboxio/tls.hpp).
_TLS_CONTEXTS: Dict[Tuple[str, str, str, Tuple[str, ...]], ssl.SSLContext] = {}


def _tls_context(ca: str, cert: str, key: str, alpn: Tuple[str, ...]) -> ssl.SSLContext:
    found = _TLS_CONTEXTS.get((ca, cert, key, alpn))
    if found is not None:
        return found
    context = ssl.create_default_context(cafile=ca or None)
    if cert:
        context.load_cert_chain(cert, key or None)
    context.set_alpn_protocols(list(alpn) or ["http/1.1"])
    if len(_TLS_CONTEXTS) >= 16:
        _TLS_CONTEXTS.pop(next(iter(_TLS_CONTEXTS)))
    _TLS_CONTEXTS[(ca, cert, key, alpn)] = context
    return context


class _Parked(asyncio.Protocol):
    """An idle kept-alive connection in the pool. Anything it receives (a peer's close, or
    bytes nobody asked for) makes it unusable: it is closed and never handed out."""

    def __init__(self, transport: asyncio.Transport, expires: int) -> None:
        self.transport = transport
        self.expires = expires
        self.dead = False

    def data_received(self, data: bytes) -> None:
        self.drop()

    def eof_received(self) -> bool:
        self.drop()
        return False

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.dead = True

    def drop(self) -> None:
        self.dead = True
        self.transport.abort()


class _Pool:
    """Connections a machine left idle between HTTP exchanges (Close.reusable_for), kept for
    another machine's Open of the same endpoint on the same loop, as the C++ transports' pool
    does: at most 8 per endpoint and 64 in all, each until its peer's keep-alive ends."""

    PER_ENDPOINT = 8
    TOTAL = 64

    def __init__(self) -> None:
        self.idle: Dict[Tuple[Any, ...], Deque[_Parked]] = {}

    def park(self, key: Tuple[Any, ...], transport: asyncio.Transport, keep_ns: int) -> None:
        self.prune()
        queue = self.idle.setdefault(key, collections.deque())
        if len(queue) >= self.PER_ENDPOINT or sum(len(q) for q in self.idle.values()) >= self.TOTAL:
            transport.abort()
            return
        parked = _Parked(transport, _now() + keep_ns)
        transport.set_protocol(parked)
        asyncio.get_running_loop().call_later(keep_ns / 1e9, self.prune)  # closed on time
        if transport.is_reading() is False:
            transport.resume_reading()  # to see the peer close it meanwhile
        queue.append(parked)

    def take(self, key: Tuple[Any, ...]) -> Optional[asyncio.Transport]:
        self.prune()
        queue = self.idle.get(key)
        while queue:
            parked = queue.pop()  # the most recently used: the least likely to be stale
            if not parked.dead and not parked.transport.is_closing():
                return parked.transport
        return None

    def prune(self) -> None:
        now = _now()
        for key in list(self.idle):
            kept: Deque[_Parked] = collections.deque()
            for parked in self.idle[key]:
                if parked.dead or parked.transport.is_closing() or now >= parked.expires:
                    parked.transport.abort()
                else:
                    kept.append(parked)
            if kept:
                self.idle[key] = kept
            else:
                del self.idle[key]


_POOLS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool]" = weakref.WeakKeyDictionary()


def _pool(loop: asyncio.AbstractEventLoop) -> _Pool:
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = _Pool()
    return pool


def _pool_key(endpoint: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """An endpoint as the pool tells them apart: kind, address, port, TLS and its settings."""
    return tuple(endpoint[:8]) + (tuple(endpoint[10]),)


class _Conn(asyncio.Protocol):
    """One connection the machine asked for."""

    def __init__(self, driver: "_Driver", cid: int, tls: bool) -> None:
        self.driver = driver
        self.cid = cid
        self.tls = tls
        self.transport: Optional[asyncio.Transport] = None
        self.backlog: Deque[Tuple[bytes, int]] = collections.deque()  # bytes not yet consumed
        self.eof_pending = False
        self.ended = False  # the machine knows it ended (eof, failure) or closed it
        self.child: Any = None  # a process endpoint's child
        self.opening: Optional["asyncio.Task[None]"] = None
        self.unsent: List[bytes] = []  # sent by the machine before the connection was up
        self.half_close = False
        self.pool_key: Optional[Tuple[Any, ...]] = None  # reusable: where it goes

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        for data in self.unsent:
            transport.write(data)
        self.unsent.clear()
        if self.half_close:
            self.write_eof()

    def write(self, data: bytes) -> None:
        if self.transport is None:
            self.unsent.append(data)
        elif not self.transport.is_closing():
            self.transport.write(data)

    def write_eof(self) -> None:
        self.half_close = True
        if self.transport is not None and self.transport.can_write_eof():
            self.transport.write_eof()

    def data_received(self, data: bytes) -> None:
        if self.ended:
            return
        if self.backlog:
            self.backlog.append((data, 0))
            return
        self.driver.feed(self, data, 0)

    def eof_received(self) -> bool:
        if not self.ended:
            if self.backlog:
                self.eof_pending = True
            else:
                self.driver.ended(self, None)
        return not self.tls  # keep our half open for the machine (TLS cannot)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if self.ended:
            return
        if exc is None and self.backlog:
            self.eof_pending = True
            return
        self.driver.ended(self, exc)

    def close(self, reusable_ns: int = 0) -> None:
        self.ended = True
        idle = not self.backlog and not self.unsent and not self.half_close
        self.backlog.clear()
        if self.opening is not None and not self.opening.done():
            self.opening.cancel()
        if self.transport is not None:
            if (reusable_ns > 0 and idle and self.pool_key is not None and self.child is None
                    and not self.transport.is_closing()):
                _pool(self.driver.loop).park(self.pool_key, self.transport, reusable_ns)
            else:
                self.transport.abort()
            self.transport = None
        if self.child is not None:
            self.child.end()
            self.child = None


class _Op:
    __slots__ = ("future", "chunks", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: "asyncio.Future[Any]" = loop.create_future()
        self.chunks: Deque[OutputChunk] = collections.deque()
        self.waiter: Optional["asyncio.Future[None]"] = None


class _Driver:
    """Runs one machine on the running loop."""

    def __init__(self, engine: _native.Engine, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.loop = loop
        self.conns: Dict[int, _Conn] = {}
        self.ops: Dict[int, _Op] = {}
        self.timer: Optional[asyncio.TimerHandle] = None
        self.timer_at: Optional[int] = None
        self.warnings: List[Problem] = []
        self.drain_until: Optional[int] = None
        self.shut = False  # its connections are closed and it drives nothing any more
        self.repoll = False  # an input was fed while performing: poll the machine again

    # ---- operations ----
    def submit(self, submit: Callable[[int], int]) -> int:
        op = submit(_now())
        self.ops[op] = _Op(self.loop)
        self.pump()
        return op

    async def result(self, op: int) -> Tuple[str, Any]:
        """The completion of `op` as (kind, value); a failure raises its SandboxioError."""
        entry = self.ops[op]
        try:
            value = await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            await self.cancel(op)
            raise
        finally:
            if entry.future.done():
                self.ops.pop(op, None)
        if value is _CANCELLED:
            raise asyncio.CancelledError()
        return cast(Tuple[str, Any], value)

    async def cancel(self, op: int) -> None:
        """Cancels op; waits for the machine's confirmation for at most the teardown grace.
        Cut short by another cancellation, the kill still goes on."""
        entry = self.ops.get(op)
        if entry is None or entry.future.done():
            return
        self.engine.submit_cancel(op, _now())
        self.pump()
        try:
            await asyncio.wait_for(asyncio.shield(entry.future),
                                   self.engine.teardown_grace_ns / 1e9)
        except asyncio.TimeoutError:
            _warnings.warn("the cancelled operation's remote work was not confirmed stopped "
                           "within the teardown grace", errors.OrphanedSandboxWarning)
        except (asyncio.CancelledError, errors.SandboxioError):
            pass

    async def finish(self, op: int, orphan_warning: str) -> None:
        """Waits for op (a kill) to end. Cancelled meanwhile, waits on for the teardown grace,
        then re-raises; a failure of the op is in its record, not raised here."""
        entry = self.ops[op]
        try:
            await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            try:
                await asyncio.wait_for(asyncio.shield(entry.future),
                                       self.engine.teardown_grace_ns / 1e9)
            except asyncio.TimeoutError:
                _warnings.warn(orphan_warning, errors.OrphanedSandboxWarning)
            except (asyncio.CancelledError, errors.SandboxioError):
                pass
            raise
        except errors.SandboxioError:
            pass
        finally:
            if entry.future.done():
                self.ops.pop(op, None)

    async def next_chunk(self, op: int) -> Optional[OutputChunk]:
        entry = self.ops.get(op)
        if entry is None:
            return None
        while not entry.chunks:
            if entry.future.done():
                return None
            entry.waiter = self.loop.create_future()
            try:
                await entry.waiter
            finally:
                entry.waiter = None
        chunk = entry.chunks.popleft()
        self.engine.handle_consumed(op, len(chunk.data), _now())
        self.pump()
        self.refeed()
        return chunk

    # ---- the machine ----
    def pump(self) -> None:
        if self.shut:
            return
        self.repoll = True
        while self.repoll:
            self.repoll = False
            requests, events = self.engine.poll(_now())
            for request in requests:
                self.perform(request)
            for event in events:
                self.dispatch(event)
        for problem in self.engine.take_warnings():
            p = problem_from(problem)
            self.warnings.append(p)
            _warnings.warn(f"{p.code}: {p.detail}", errors.SandboxWarning, stacklevel=2)
        self.arm()
        if self.drain_until is not None and (not self.working() or _now() >= self.drain_until):
            self.shutdown()

    def arm(self) -> None:
        """One timer at the machine's deadline. A later deadline keeps an earlier timer (which
        then finds nothing due and re-arms): every operation moves the deadline, and a timer
        per operation would cost more than the operation's own Python."""
        deadline = self.engine.deadline()
        if deadline is None or (self.timer_at is not None and self.timer_at <= deadline):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = deadline
        self.timer = self.loop.call_later(max(0, deadline - _now()) / 1e9, self.on_timer)

    def on_timer(self) -> None:
        self.timer = None
        self.timer_at = None
        deadline = self.engine.deadline()
        now = _now()
        if deadline is not None and now >= deadline:
            self.engine.handle_timeout(now)
        self.pump()

    def dispatch(self, event: Tuple[Any, ...]) -> None:
        kind, op = event[0], event[1]
        entry = self.ops.get(op)
        if entry is None:
            return
        if kind == "output":
            entry.chunks.append(chunk_from(event[2]))
            if entry.waiter is not None and not entry.waiter.done():
                entry.waiter.set_result(None)
            return
        if entry.future.done():
            return
        if kind == "done":
            entry.future.set_result(event[2])
        elif kind == "failed":
            entry.future.set_exception(errors.from_code(*event[2]))
            entry.future.exception()  # retrieved: nobody may await a forgotten operation
        else:  # cancelled
            entry.future.set_result(_CANCELLED)
        if entry.waiter is not None and not entry.waiter.done():
            entry.waiter.set_result(None)

    # ---- requests ----
    def perform(self, request: Tuple[Any, ...]) -> None:
        kind, cid = request[0], request[1]
        if kind == "open":
            endpoint, may_reuse = request[2], request[3]
            opening = _Conn(self, cid, bool(endpoint[3]))
            self.conns[cid] = opening
            if endpoint[0] != "process":
                opening.pool_key = _pool_key(endpoint)
            kept = _pool(self.loop).take(opening.pool_key) if may_reuse and opening.pool_key else None
            if kept is not None:  # a connection another machine left idle: up at once
                kept.set_protocol(opening)
                opening.connection_made(kept)
                self.engine.handle_reused(cid, _now())
                self.repoll = True  # pump() takes what the machine does next
                return
            opening.opening = self.loop.create_task(self.open(opening, endpoint))
            return
        conn = self.conns.get(cid)
        if conn is None:
            return
        if kind == "send":
            conn.write(request[2])
        elif kind == "half_close":
            conn.write_eof()
        else:  # close, keeping an idle connection for reuse when the machine says it may
            del self.conns[cid]
            conn.close(int(request[2]))

    async def open(self, conn: _Conn, endpoint: Tuple[Any, ...]) -> None:
        kind, address, port, tls, server_name, ca, cert, key, peer_pid, argv, alpn = endpoint
        try:
            if kind == "unix":
                transport, _ = await self.loop.create_unix_connection(lambda: conn, address)
                if peer_pid:
                    sock = transport.get_extra_info("socket")
                    wrong = _native.check_peer(sock.fileno(), peer_pid)
                    if wrong is not None:
                        transport.abort()
                        raise _Refused(_CONNECTION_FAILED, wrong)
            elif kind == "tcp":
                context = None
                if tls:
                    context = _tls_context(ca, cert, key, tuple(alpn))
                transport, _ = await self.loop.create_connection(
                    lambda: conn, address, port, ssl=context,
                    server_hostname=server_name if tls else None)
                if tls and alpn:
                    agreed = transport.get_extra_info("ssl_object").selected_alpn_protocol()
                    if agreed not in alpn:
                        transport.abort()
                        raise _Refused(_TLS_ERROR, f"{server_name} did not agree to {alpn[0]} "
                                       f"by ALPN (it named {agreed or 'none'})")
            else:
                child = _native.spawn(list(argv))
                conn.child = child
                sock = socket.socket(fileno=child.fd)
                await self.loop.create_unix_connection(lambda: conn, sock=sock)
        except asyncio.CancelledError:
            conn.close()
            return
        except _Refused as e:
            self.fail(conn, e.number, e.detail)
            return
        except ssl.SSLError as e:
            self.fail(conn, _TLS_ERROR, f"TLS with {address}:{port} failed: {e}")
            return
        except (OSError, errors.SandboxioError) as e:
            self.fail(conn, _CONNECTION_FAILED, f"cannot connect to {address}"
                      + (f":{port}" if kind == "tcp" else "") + f": {e}")
            return
        if conn.ended:  # the machine closed it while it was opening
            conn.close()
            return
        self.engine.handle_connected(conn.cid, _now())
        self.pump()

    def fail(self, conn: _Conn, number: int, detail: str) -> None:
        if conn.ended or self.conns.get(conn.cid) is not conn:
            return
        conn.ended = True
        del self.conns[conn.cid]
        conn.close()
        self.engine.handle_connect_failed(conn.cid, number, detail, _now())
        self.pump()

    def feed(self, conn: _Conn, data: bytes, offset: int) -> None:
        taken = self.engine.handle_bytes(conn.cid, data, offset, _now())
        if offset + taken < len(data):  # the machine is full: hold the rest, stop reading
            conn.backlog.appendleft((data, offset + taken))
            if conn.transport is not None:
                conn.transport.pause_reading()
        self.pump()

    def refeed(self) -> None:
        """Offers held bytes again after a consumer made room."""
        for conn in list(self.conns.values()):
            while conn.backlog and not conn.ended:
                data, offset = conn.backlog.popleft()
                before = len(conn.backlog)
                self.feed(conn, data, offset)
                if len(conn.backlog) > before:
                    break  # still full
            if not conn.backlog and not conn.ended:
                if conn.eof_pending:
                    self.ended(conn, None)
                elif conn.transport is not None and not conn.transport.is_closing():
                    conn.transport.resume_reading()

    def ended(self, conn: _Conn, exc: Optional[BaseException]) -> None:
        if conn.ended or self.conns.get(conn.cid) is not conn:
            return
        conn.ended = True
        if exc is None:
            self.engine.handle_eof(conn.cid, _now())
        else:
            del self.conns[conn.cid]
            conn.close()
            self.engine.handle_connect_failed(conn.cid, _CONNECTION_LOST, str(exc), _now())
        self.pump()

    # ---- the end ----
    def working(self) -> bool:
        """Work is in flight: an operation not yet ended, or the machine's own (busy)."""
        return self.engine.busy() or any(not e.future.done() for e in self.ops.values())

    def release(self) -> None:
        """The handle is gone: drive the machine's unfinished work, bounded by the grace."""
        if self.working():
            self.drain_until = _now() + self.engine.teardown_grace_ns
            _DRAINING.add(self)
            self.loop.call_later(self.engine.teardown_grace_ns / 1e9, self.pump)  # the bound
            self.pump()
        else:
            self.shutdown()

    def shutdown(self) -> None:
        self.shut = True
        self.drain_until = None
        _DRAINING.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for conn in list(self.conns.values()):
            conn.close()
        self.conns.clear()


class _Refused(Exception):
    def __init__(self, number: int, detail: str) -> None:
        super().__init__(detail)
        self.number = number
        self.detail = detail


def _expect(value: Tuple[str, Any], kind: str) -> Any:
    if value[0] != kind:
        raise errors.ProtocolError(f"the backend answered with {value[0]} where {kind} was due")
    return value[1]


class AsyncProcess:
    """A running command (``AsyncSandbox.stream()``). ``async for chunk in proc`` yields its
    output; ``await proc.wait()`` its result. Leaving the async with-block before the end
    kills the remote process."""

    def __init__(self, driver: _Driver, op: int) -> None:
        self._driver = driver
        self._op = op
        self._result: Optional[ExecResult] = None

    def __aiter__(self) -> "AsyncProcess":
        return self

    async def __anext__(self) -> OutputChunk:
        chunk = await self._driver.next_chunk(self._op)
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def wait(self) -> ExecResult:
        """Waits for the end (discarding output not read) and returns the result."""
        if self._result is None:
            entry = self._driver.ops.get(self._op)
            while entry is not None and not entry.future.done():
                if await self._driver.next_chunk(self._op) is None:
                    break
            self._result = result_from(_expect(await self._driver.result(self._op), "result"))
        return self._result

    async def kill(self) -> None:
        """Kills the remote process (waits for the kill, up to the teardown grace)."""
        if self._result is None:
            await self._driver.cancel(self._op)
            self._result = ExecResult(exit_code=137, termination="cancelled", signal=9,
                                      streamed=True)
            self._driver.ops.pop(self._op, None)

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        entry = self._driver.ops.get(self._op)
        if self._result is None and entry is not None and not entry.future.done():
            await self.kill()


class AsyncSandbox:
    """A sandbox on the running event loop. ``async with`` (or ``aclose()``) kills it at the
    end, unless ``outlive_owner=True`` or ``detach()``."""

    def __init__(self, driver: _Driver, info: SandboxInfo, owned: bool) -> None:
        self._driver = driver
        self._info = info
        self._owned = owned
        self._closed = False

    @classmethod
    async def _open(cls, dsn: str, options: Mapping[str, Any], sandbox_id: Optional[str]) -> "AsyncSandbox":
        native_options = _options.create_options(options)
        if sandbox_id is not None:
            native_options["outlive_owner"] = True  # re-attaching does not take ownership
        loop = asyncio.get_running_loop()
        driver = _Driver(_native.Engine(dsn, native_options, _now()), loop)
        try:
            if sandbox_id is None:
                op = driver.submit(driver.engine.submit_create)
            else:
                known_id = sandbox_id
                op = driver.submit(lambda now: driver.engine.submit_connect(known_id, now))
            info = info_from(_expect(await driver.result(op), "info"))
        except BaseException:
            driver.release()  # a half-made sandbox is removed, bounded by the grace
            raise
        return cls(driver, info, owned=sandbox_id is None and not driver.engine.outlive_owner)

    # ---- facts ----
    @property
    def id(self) -> str:
        return self._info.id

    @property
    def backend(self) -> str:
        return self._driver.engine.scheme

    @property
    def tier(self) -> IsolationTier:
        return IsolationTier(self._driver.engine.tier)

    @property
    def capabilities(self) -> Tuple[str, ...]:
        return tuple(self._driver.engine.capabilities)

    @property
    def warnings(self) -> Tuple[Problem, ...]:
        return tuple(self._driver.warnings)

    async def info(self) -> SandboxInfo:
        return info_from(_expect(await self._call(self._driver.engine.submit_info), "info"))

    # ---- commands and code ----
    async def run(self, argv: _options.Argv, *, env: Optional[Mapping[str, str]] = None,
                  secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
                  timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
                  output_limit: Optional[int] = None) -> ExecResult:
        """Runs a command to its end (see ``Sandbox.run``)."""
        cmd = _options.command(argv, env=env, secrets=secrets, workdir=workdir, timeout=timeout,
                               stdin=stdin, output_limit=output_limit)
        return result_from(_expect(
            await self._call(lambda now: self._driver.engine.submit_run(cmd, now)), "result"))

    def stream(self, argv: _options.Argv, *, env: Optional[Mapping[str, str]] = None,
               secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
               timeout: Optional[float] = None,
               stdin: Union[bytes, str, None] = None) -> AsyncProcess:
        """Starts a command now; not awaitable: use the process as an async context manager."""
        cmd = _options.command(argv, env=env, secrets=secrets, workdir=workdir, timeout=timeout,
                               stdin=stdin)
        self._check_open()
        return AsyncProcess(self._driver,
                            self._driver.submit(lambda now: self._driver.engine.submit_stream(cmd, now)))

    async def run_code(self, code: str, *, language: str = "python",
                       context: Union[CodeContext, str, None] = None,
                       timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                       secrets: Optional[Mapping[str, str]] = None) -> ExecResult:
        req = _options.code_request(code, language=language, context=context, timeout=timeout,
                                    env=env, secrets=secrets)
        return result_from(_expect(
            await self._call(lambda now: self._driver.engine.submit_run_code(req, now)), "result"))

    async def create_context(self, language: str = "python") -> CodeContext:
        value = _expect(await self._call(
            lambda now: self._driver.engine.submit_create_context(language, now)), "context")
        return CodeContext(*value)

    # ---- files ----
    async def write_file(self, path: str, data: Union[bytes, str]) -> None:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        await self._call(lambda now: self._driver.engine.submit_write_file(path, raw, now))

    async def read_file(self, path: str) -> bytes:
        data: bytes = _expect(await self._call(
            lambda now: self._driver.engine.submit_read_file(path, now)), "bytes")
        return data

    async def list_files(self, path: str) -> Tuple[FileInfo, ...]:
        return files_from(_expect(await self._call(
            lambda now: self._driver.engine.submit_list_files(path, now)), "files"))

    async def remove_file(self, path: str) -> None:
        await self._call(lambda now: self._driver.engine.submit_remove_file(path, now))

    # ---- life ----
    async def kill(self) -> None:
        """Ends the sandbox now; later calls raise SandboxGone."""
        await self._call(self._driver.engine.submit_kill)
        self._owned = False

    def detach(self) -> None:
        """Keeps the sandbox alive after this handle ends, until its lifetime runs out."""
        if self._owned:
            self._owned = False
            op = self._driver.engine.submit_release(_now())
            if op is not None:  # nobody waits for it: a failure shows in the records
                self._driver.ops[op] = _Op(self._driver.loop)
            self._driver.pump()

    async def aclose(self) -> None:
        """Ends this handle: kills the sandbox unless it was detached or outlives its owner,
        and waits until the backend confirms. Cancelled meanwhile, it gives the kill the
        teardown grace (SBX_TEARDOWN_GRACE), then lets the cancellation through; the kill
        goes on in the loop either way."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._owned:
                self._owned = False
                op = self._driver.submit(self._driver.engine.submit_kill)
                await self._driver.finish(op, f"sandbox {self.id} was not confirmed killed within "
                                              "the teardown grace; `sandboxio reap` removes it")
        finally:
            self._driver.release()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:  # dropped without aclose(): kill it anyway, driven by the loop in the background
            if self._owned and not self._driver.loop.is_closed():
                self._driver.submit(self._driver.engine.submit_kill)
            self._driver.release()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<sandboxio.AsyncSandbox {self.backend}:{self.id}{' closed' if self._closed else ''}>"

    async def _call(self, submit: Callable[[int], int]) -> Tuple[str, Any]:
        self._check_open()
        return await self._driver.result(self._driver.submit(submit))

    def _check_open(self) -> None:
        if self._closed:
            raise errors.SandboxGone("this sandbox handle was closed",
                                     "create a new sandbox; aclose() and the async with-block's end kill it")


async def acreate(dsn: str, **options: Any) -> AsyncSandbox:
    """Creates a sandbox on the running event loop (the options of ``sandboxio.create``).
    Cancelling the creation removes the half-made sandbox, bounded by the teardown grace."""
    return await AsyncSandbox._open(dsn, options, None)


async def aconnect(dsn: str, sandbox_id: str, **options: Any) -> AsyncSandbox:
    """Re-attaches to a running sandbox by id; the handle does not own it."""
    return await AsyncSandbox._open(dsn, options, sandbox_id)
