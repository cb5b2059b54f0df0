#!/usr/bin/env python3
"""sandboxio from Python, as a benchmark peer of the docker:// suite (bench/docker_e2e.cpp).

    peer.py IMAGE                   warm: one JSON command per stdin line, one answer line
        {"op":"run_true_sync"}      -> {"ms": N}  sb.run(["true"]), the sync API
        {"op":"run_true_async"}     -> {"ms": N}  await sb.run(["true"]), the asyncio API
    peer.py --concurrent K IMAGE    K sandboxes at once from one event loop, each created,
                                    running `echo ready` and removed; prints
                                    {"wall_ms": N, "peak_rss_kib": N, "ok": N}

Times are taken inside the process, as the C++ peers take theirs. The package comes from
PYTHONPATH (the build tree's python/ directory) or an installed sandboxio.
"""

import asyncio
import json
import resource
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


def warm(dsn: str) -> None:
    loop = asyncio.new_event_loop()
    sync_sb = sandboxio.create(dsn)
    async_sb = loop.run_until_complete(sandboxio.acreate(dsn))
    sync_sb.run(["true"])
    loop.run_until_complete(async_sb.run(["true"]))
    try:
        for line in sys.stdin:
            op = json.loads(line).get("op")
            t = time.perf_counter()
            if op == "run_true_sync":
                ok = sync_sb.run(["true"]).ok
            elif op == "run_true_async":
                ok = loop.run_until_complete(async_sb.run(["true"])).ok
            else:
                print(json.dumps({"error": f"unknown op {op}"}), flush=True)
                continue
            ms = (time.perf_counter() - t) * 1000
            print(json.dumps({"ms": ms} if ok else {"error": "run failed"}), flush=True)
    finally:
        sync_sb.close()
        loop.run_until_complete(async_sb.aclose())
        loop.close()


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--concurrent":
        k, dsn = int(sys.argv[2]), "docker://" + sys.argv[3]
        t = time.perf_counter()
        ok = asyncio.run(concurrent(k, dsn))
        print(json.dumps({"wall_ms": (time.perf_counter() - t) * 1000,
                          "peak_rss_kib": peak_rss_kib(), "ok": ok}))
        return 0 if ok == k else 1
    if len(sys.argv) == 2:
        warm("docker://" + sys.argv[1])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
