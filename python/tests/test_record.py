"""The flight recorder from Python: ``record=DIR`` writes a trace, owner-only, whichever API
drives the machine, and the command line's ``sandboxio replay`` runs it again offline and finds
it identical."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess

import pytest

import sandboxio


def replay(trace):
    cli = os.environ.get("SBX_CLI")
    if not cli:
        pytest.skip("SBX_CLI (the sandboxio command) is not set")
    done = subprocess.run([cli, "replay", "--quiet", str(trace)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "identical to the recording" in done.stderr
    return done.stderr


def the_trace(directory):
    (trace,) = list(directory.iterdir())
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600
    return trace


def test_a_sync_session_records_a_trace_that_replays_identically(tmp_path):
    secrets = {"API_TOKEN": "tok-1234567"}
    with sandboxio.create("fake://", record=str(tmp_path / "t"), secrets=secrets) as sb:
        assert sb.run("echo recorded").stdout == b"recorded\n"
        sb.write_file("/tmp/x", b"data")
    trace = the_trace(tmp_path / "t")
    assert b"tok-1234567" not in trace.read_bytes()
    assert "4 records" in replay(trace)  # create, run, write_file, and the kill at close


def test_an_asyncio_session_records_a_trace_that_replays_identically(tmp_path):
    async def main():
        async with await sandboxio.acreate("fake://", record=str(tmp_path / "t")) as sb:
            results = await asyncio.gather(*(sb.run(["echo", str(i)]) for i in range(20)))
            assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(20)]

    asyncio.run(main())
    replay(the_trace(tmp_path / "t"))
