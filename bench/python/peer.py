#!/usr/bin/env python3
"""sandboxio from Python, as a benchmark peer of the docker:// suite (bench/docker_e2e.cpp).

    peer.py IMAGE                   warm: one JSON command per stdin line, one answer line
        {"op":"run_true_sync"}      -> {"ms": N}  sb.run(["true"]), the sync API
        {"op":"run_true_async"}     -> {"ms": N}  await sb.run(["true"]), the asyncio API
        {"op":"burst_sync"}, {"op":"burst_async"}  -> {"ms": N}  the median of 10 runs in a row
    peer.py --concurrent K IMAGE    K sandboxes at once from one event loop, each created,
                                    running `echo ready` and removed; prints
                                    {"wall_ms": N, "peak_rss_kib": N, "ok": N}

Times are taken inside the process, as the C++ peers take theirs. The package comes from
PYTHONPATH (the build tree's python/ directory) or an installed sandboxio.
"""

import asyncio
import json
import resource
import statistics
import sys
import time

import sandboxio


def peak_rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def concurrent(k: int, dsn: str) -> int:
    async def one() -> bool:
        async with await sandboxio.acreate(dsn) as sb:
            return (await sb.run(["sh", "-c", "echo ready"])).stdout == b"ready\n"

    results = await asyncio.gather(*(one() for _ in range(k)), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            print(f"concurrent: {r}", file=sys.stderr)
    return sum(1 for r in results if r is True)


async def warm(dsn: str) -> None:
    """Serves the commands from inside a running event loop, as an asyncio application would
    call sandboxio: `await sb.run(...)` on its loop (the sync call blocks the loop meanwhile)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    sync_sb = sandboxio.create(dsn)
    async_sb = await sandboxio.acreate(dsn)
    sync_sb.run(["true"])
    await async_sb.run(["true"])
    try:
        while line := await reader.readline():
            op = json.loads(line).get("op")
            times = []
            ok = True
            for _ in range(10 if op in ("burst_sync", "burst_async") else 1):
                t = time.perf_counter()
                if op in ("run_true_sync", "burst_sync"):
                    ok = sync_sb.run(["true"]).ok and ok
                elif op in ("run_true_async", "burst_async"):
                    ok = (await async_sb.run(["true"])).ok and ok
                else:
                    ok = False
                    break
                times.append((time.perf_counter() - t) * 1000)
            if not ok:
                print(json.dumps({"error": f"{op} failed"}), flush=True)
                continue
            print(json.dumps({"ms": statistics.median(times)}), flush=True)
    finally:
        sync_sb.close()
        await async_sb.aclose()


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--concurrent":
        k, dsn = int(sys.argv[2]), "docker://" + sys.argv[3]
        t = time.perf_counter()
        ok = asyncio.run(concurrent(k, dsn))
        print(json.dumps({"wall_ms": (time.perf_counter() - t) * 1000,
                          "peak_rss_kib": peak_rss_kib(), "ok": ok}))
        return 0 if ok == k else 1
    if len(sys.argv) == 2:
        asyncio.run(warm("docker://" + sys.argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
