"""What only the asyncio API has: the caller's event loop drives the machines, cancellation
kills remote work, and it scales without threads."""

from __future__ import annotations

import asyncio
import threading
import uuid

import anyio
import pytest

import sandboxio
from conftest import dsn_for, e2b_addresses

REAL = ["docker", "e2b", "local"]


async def _started(sb: sandboxio.AsyncSandbox, marker: str) -> None:
    """Waits until a process whose command line holds `marker` runs (a round trip each)."""
    for _ in range(200):
        if (await sb.run(["pgrep", "-f", marker])).exit_code == 0:
            return
    raise AssertionError(f"no process with {marker} started")


@pytest.mark.parametrize("backend", REAL)
def test_cancelling_a_run_kills_the_remote_process(backend):
    dsn = dsn_for(backend)

    async def main():
        async with await sandboxio.acreate(dsn) as sb:
            marker = uuid.uuid4().hex[:12]
            task = asyncio.create_task(sb.run(["sh", "-c", f"sleep 300; echo {marker}"]))
            await _started(sb, marker)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):  # cancellation stays cancellation
                await task
            assert (await sb.run(["pgrep", "-f", marker])).exit_code == 1
            assert (await sb.run(["echo", "usable"])).stdout == b"usable\n"

    asyncio.run(main())


@pytest.mark.parametrize("backend", REAL)
def test_an_anyio_cancel_scope_kills_the_remote_process(backend):
    dsn = dsn_for(backend)

    async def main():
        sb = await sandboxio.acreate(dsn)
        try:
            marker = uuid.uuid4().hex[:12]
            with anyio.move_on_after(0.5) as scope:
                await sb.run(["sh", "-c", f"sleep 300; echo {marker}"])
            assert scope.cancel_called
            # anyio cancels again on every checkpoint, which may cut the wait for the kill's
            # confirmation short; the kill itself goes on: wait for its effect.
            for _ in range(200):
                if (await sb.run(["pgrep", "-f", marker])).exit_code == 1:
                    break
            else:
                raise AssertionError("the cancelled command still runs")
        finally:
            await sb.aclose()

    anyio.run(main, backend="asyncio")


def test_a_thousand_concurrent_runs_from_one_loop_and_no_thread():
    async def main():
        threads = threading.active_count()
        async with await sandboxio.acreate("fake://") as sb:
            results = await asyncio.gather(*(sb.run(["echo", str(i)]) for i in range(1000)))
            assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(1000)]
        assert threading.active_count() == threads

    asyncio.run(main())


def test_a_hundred_sandboxes_from_one_loop():
    async def one(i):
        async with await sandboxio.acreate("fake://") as sb:
            return (await sb.run(["echo", str(i)])).stdout

    async def main():
        return await asyncio.gather(*(one(i) for i in range(100)))

    assert asyncio.run(main()) == [f"{i}\n".encode() for i in range(100)]


@pytest.mark.parametrize("backend", ["docker", "local"])
def test_operations_on_one_sandbox_overlap(backend):
    dsn = dsn_for(backend)

    async def main():
        async with await sandboxio.acreate(dsn) as sb:
            # Three commands that each wait for the next: they finish only if they run at once.
            await sb.run(["mkfifo", "/tmp/f1", "/tmp/f2"])
            results = await asyncio.gather(
                sb.run(["sh", "-c", "cat /tmp/f1"]),
                sb.run(["sh", "-c", "echo one > /tmp/f1; cat /tmp/f2"]),
                sb.run(["sh", "-c", "echo two > /tmp/f2"]), )
            assert [r.stdout for r in results] == [b"one\n", b"two\n", b""]

    asyncio.run(main())


def test_cancelling_create_leaves_no_sandbox_behind(sbx_fake):
    async def main():
        task = asyncio.create_task(sandboxio.acreate(sbx_fake.dsn))
        await asyncio.sleep(0)  # let it start: it is cancelled in flight or right after
        task.cancel()
        try:
            sb = await task
        except asyncio.CancelledError:
            return
        await sb.aclose()

    asyncio.run(main())
    assert sbx_fake.live_sandboxes == ()


def test_a_stream_is_a_plain_factory_and_an_async_iterator(sbx_fake):
    async def main():
        async with await sandboxio.acreate(sbx_fake.dsn) as sb:
            proc = sb.stream("echo a; echo b >&2; exit 2")
            assert not asyncio.iscoroutine(proc)
            async with proc:
                chunks = [c async for c in proc]
                result = await proc.wait()
            return chunks, result

    chunks, result = asyncio.run(main())
    assert sorted((c.stream, c.data) for c in chunks) == [("stderr", b"b\n"), ("stdout", b"a\n")]
    assert result.exit_code == 2 and result.streamed


def test_runs_share_one_kept_alive_connection_and_a_later_sandbox_reuses_it():
    dsn = dsn_for("e2b")

    async def main():
        async with await sandboxio.acreate(dsn) as a:
            for _ in range(20):
                assert (await a.run(["true"])).ok
            first = e2b_addresses(a.id)
        # a's idle connections went to the loop's pool when it ended
        async with await sandboxio.acreate(dsn) as b:
            assert (await b.run(["echo", "reused"])).stdout == b"reused\n"
            second = e2b_addresses(b.id)
        return first, second

    first, second = asyncio.run(main())
    assert len(first) == 1, f"20 runs on one sandbox used {len(first)} connections"
    assert first & second, "the second sandbox opened new connections only"
