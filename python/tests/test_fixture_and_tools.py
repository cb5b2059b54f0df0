"""The sbx_fake fixture for users' own tests, and the agent tools."""

from __future__ import annotations

import asyncio
import json

import sandboxio
from sandboxio import tools


def count_lines(dsn: str, text: str) -> str:
    """A user's agent tool under test: it takes a DSN."""
    with sandboxio.create(dsn) as sb:
        sb.write_file("/tmp/input.txt", text)
        return sb.run(["python3", "count.py", "/tmp/input.txt"]).stdout_text


def test_sbx_fake_scripts_answers_and_records_calls(sbx_fake):
    sbx_fake.on(["python3", "count.py", "/tmp/input.txt"], stdout="3\n")
    assert count_lines(sbx_fake.dsn, "a\nb\nc\n") == "3\n"
    ops = [c.operation for c in sbx_fake.calls]
    assert ops == ["create", "write_file", "run", "kill"]
    run = sbx_fake.calls[2]
    assert run.argv == ("python3", "count.py", "/tmp/input.txt")
    assert run.network == sandboxio.NetworkPolicy()  # the tool did not widen egress


def test_sbx_fake_fails_a_test_that_leaves_a_sandbox_running(pytester):
    pytester.makepyfile("""
        import sandboxio
        KEEP = []
        def test_leaks(sbx_fake):
            KEEP.append(sandboxio.create(sbx_fake.dsn))
    """)
    result = pytester.runpytest("-p", "sandboxio.testing", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*left*sandboxes*running*"])


def test_the_command_tool_answers_with_exit_code_and_output(sbx_fake):
    with sbx_fake.sandbox() as sb:
        run = tools.run_command_tool(sb)
        assert run("echo hi; echo oops >&2; exit 3") == "exit_code: 3\nstdout:\nhi\nstderr:\noops\n"
        assert run.__name__ == run.name == "run_command"
        assert run.__annotations__ == {"command": "str", "return": "str"}
        spec = run.openai_tool()
        assert spec["function"]["parameters"]["required"] == ["command"]
        json.dumps(spec)  # JSON all the way down


def test_the_tools_cut_long_output_and_say_so(sbx_fake):
    with sbx_fake.sandbox() as sb:
        text = tools.run_command_tool(sb, max_output=100)("head -c 5000 /dev/zero")
    assert "characters cut" in text and len(text) < 300


def test_the_tools_are_coroutines_for_an_async_sandbox(sbx_fake):
    sbx_fake.on_code("print(1)", stdout="1\n")

    async def main():
        async with await sandboxio.acreate(sbx_fake.dsn) as sb:
            run_code = tools.run_code_tool(sb)
            assert asyncio.iscoroutinefunction(run_code)
            return await run_code("print(1)")

    assert asyncio.run(main()) == "exit_code: 0\nstdout:\n1\n"
