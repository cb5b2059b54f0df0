"""The contract, from Python: what every backend promises, in the sync and the async API."""

from __future__ import annotations

import uuid

import pytest

import sandboxio
from sandboxio import errors


def test_a_command_runs_and_its_output_comes_back(make):
    sb = make()
    r = sb.run(["sh", "-c", "echo out; echo err >&2"])
    assert r == sandboxio.ExecResult(exit_code=0, stdout=b"out\n", stderr=b"err\n",
                                     duration=r.duration, bytes_out=8, backend=make.backend)
    assert r.ok and r.stdout_text == "out\n"


def test_the_meter_counts_what_went_in_and_came_out(make):
    sb = make()
    r = sb.run(["cat"], stdin=b"x" * 1000)
    assert (r.bytes_in, r.bytes_out, r.backend) == (1000, 1000, make.backend)
    with sb.stream(["sh", "-c", "echo 12345; echo 678 >&2"]) as p:
        list(p)
        streamed = p.wait()
    assert streamed.stdout == b"" and streamed.bytes_out == 10


def test_a_failing_command_is_a_result_not_an_exception(make):
    sb = make()
    r = sb.run("echo partial; exit 3")
    assert (r.exit_code, r.termination, r.ok, r.stdout) == (3, "exited", False, b"partial\n")


def test_a_command_past_its_timeout_is_killed_and_says_so(make):
    sb = make()
    r = sb.run(["sh", "-c", "echo before; sleep 30; echo after"], timeout=1)
    assert r.termination == "timeout"
    assert not r.ok
    assert b"after" not in r.stdout


def test_env_secrets_workdir_and_stdin_reach_the_command(make):
    sb = make()
    r = sb.run(["sh", "-c", 'echo "$A $S"; pwd; cat'], env={"A": "plain"},
               secrets={"S": "hunter2"}, workdir="/tmp", stdin=b"from stdin")
    assert r.stdout == b"plain hunter2\n/tmp\nfrom stdin"


def test_files_round_trip_every_byte_and_are_listed_and_removed(make):
    sb = make()
    data = bytes(range(256)) * 1024
    sb.write_file("/tmp/py-contract/all.bin", data)
    assert sb.read_file("/tmp/py-contract/all.bin") == data
    listed = {f.name: f for f in sb.list_files("/tmp/py-contract")}
    assert listed["all.bin"].size == len(data) and listed["all.bin"].type == "file"
    assert listed["all.bin"].path == "/tmp/py-contract/all.bin"
    sb.remove_file("/tmp/py-contract/all.bin")
    with pytest.raises(errors.FileNotFound):
        sb.read_file("/tmp/py-contract/all.bin")


def test_a_missing_file_is_a_coded_error_with_a_hint(make):
    sb = make()
    with pytest.raises(errors.FilesystemError) as caught:
        sb.read_file("/no/such/file")
    e = caught.value
    assert isinstance(e, errors.FileNotFound) and not isinstance(e, OSError)
    assert e.code == "SBX_E1701" and e.hint and e.url.endswith("SBX_E1701.md")
    assert "SBX_E1701" in str(e)


def test_streamed_output_arrives_in_order_and_the_result_says_streamed(make):
    sb = make()
    with sb.stream(["sh", "-c", "echo 1; echo 2; echo 3; echo 4; echo 5; echo e >&2; exit 4"]) as p:
        chunks = list(p)
    result = p.wait()  # after the with-block: a process that ended by itself is not killed
    out = b"".join(c.data for c in chunks if c.stream == "stdout")
    err = b"".join(c.data for c in chunks if c.stream == "stderr")
    assert (out, err) == (b"1\n2\n3\n4\n5\n", b"e\n")
    offsets = [c.offset for c in chunks if c.stream == "stdout"]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert result.streamed and result.exit_code == 4 and result.stdout == b""


def test_leaving_a_stream_early_kills_its_process(make):
    sb = make()
    marker = uuid.uuid4().hex[:12]
    with sb.stream(["sh", "-c", f"echo started; sleep 300; echo {marker}"]) as p:
        first = next(iter(p))
        assert first.data == b"started\n"
    # The with-block's end waited for the kill: nothing of it runs any more.
    if make.backend != "fake":
        assert sb.run(["pgrep", "-f", marker]).exit_code == 1


def test_run_code_prints_and_fails_with_the_exception(make):
    sb = make()
    if make.backend == "fake":
        pytest.skip("fake:// runs no Python")
    ok = sb.run_code("print(6 * 7)")
    assert ok.stdout == b"42\n" and ok.error is None
    bad = sb.run_code("raise ValueError('boom')")
    assert bad.error is not None and bad.error.name == "ValueError" and bad.error.value == "boom"


def test_egress_is_denied_unless_allowed(make):
    sb = make()
    assert sb.info().network == sandboxio.NetworkPolicy()
    assert sb.info().network.denies_all


def test_an_allow_list_the_backend_cannot_enforce_is_refused(make):
    if "network_allow_list" in make(lifetime=60).capabilities:
        pytest.skip(f"{make.backend}:// enforces allow-lists")
    with pytest.raises(errors.PolicyError) as caught:
        make(network=sandboxio.NetworkPolicy(allow=("pypi.org",)))
    assert caught.value.code == "SBX_E1403"


def test_info_describes_the_sandbox_honestly(make):
    sb = make()
    info = sb.info()
    assert info.id == sb.id and info.backend == make.backend and info.state == "running"
    assert info.tier == sb.tier and set(info.capabilities) == set(sb.capabilities)
    assert info.lifetime == 600


def test_a_closed_sandbox_is_gone(make):
    sb = make()
    sb.close()
    with pytest.raises(errors.SandboxGone):
        sb.run(["true"])


def test_a_killed_sandbox_cannot_be_connected_to(make):
    sb = make()
    sandbox_id = sb.id
    sb.kill()
    if "reattach" not in sb.capabilities:
        pytest.skip(f"{make.backend}:// cannot re-attach")
    with pytest.raises((errors.SandboxNotFound, errors.SandboxGone)):
        if make.mode == "sync":
            sandboxio.connect(make.dsn, sandbox_id)
        else:
            make.loop.run_until_complete(sandboxio.aconnect(make.dsn, sandbox_id))


def test_a_connected_handle_does_not_own_the_sandbox(make):
    sb = make()
    if "reattach" not in sb.capabilities:
        pytest.skip(f"{make.backend}:// cannot re-attach")
    if make.mode == "sync":
        other = sandboxio.connect(make.dsn, sb.id)
        assert other.run(["echo", "via connect"]).stdout == b"via connect\n"
        other.close()
    else:
        async def attach_and_close():
            other = await sandboxio.aconnect(make.dsn, sb.id)
            assert (await other.run(["echo", "via connect"])).stdout == b"via connect\n"
            await other.aclose()
        make.loop.run_until_complete(attach_and_close())
    assert sb.run(["echo", "still here"]).stdout == b"still here\n"
