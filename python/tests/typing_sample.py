"""User code that must type-check under mypy --strict against the package (typing_check.sh)."""

from __future__ import annotations

import sandboxio
from sandboxio import ExecResult, IsolationTier, NetworkPolicy, OutputChunk, errors


def sync_use() -> int:
    with sandboxio.create("fake://", lifetime=60, network=NetworkPolicy(allow=("pypi.org",)),
                          require_isolation=IsolationTier.CONTAINER) as sb:
        r: ExecResult = sb.run(["echo", "hi"], timeout=5.0, env={"A": "1"})
        with sb.stream("echo a") as proc:
            chunks: list[OutputChunk] = list(proc)
        tier_ok: bool = sb.tier.satisfies(IsolationTier.CONTAINER)
        data: bytes = sb.read_file("/tmp/x")
        return (r.exit_code or 0) + len(chunks) + len(data) + int(tier_ok)


async def async_use() -> str:
    async with await sandboxio.acreate("fake://") as sb:
        r = await sb.run("echo hi")
        async with sb.stream(["echo", "a"]) as proc:
            async for chunk in proc:
                print(chunk.stream, chunk.text)
            done: ExecResult = await proc.wait()
        try:
            await sb.read_file("/nope")
        except errors.FileNotFound as e:
            print(e.code, e.hint, e.url)
        except errors.SandboxTimeout:
            pass
        return r.stdout_text + str(done.exit_code)
