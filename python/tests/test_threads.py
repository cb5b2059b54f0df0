"""The sync API and Python threads: the GIL is released while a call waits, and a sandbox
closed from another thread ends after the call in flight, never under it."""

from __future__ import annotations

import threading

import sandboxio
from conftest import dsn_for


def test_other_threads_run_while_a_call_waits():
    with sandboxio.create(dsn_for("local")) as sb:
        done = threading.Event()
        result = {}

        def call():
            result["r"] = sb.run(["sleep", "0.5"])
            done.set()

        t = threading.Thread(target=call)
        t.start()
        spins = 0
        while not done.is_set():  # holds the GIL whenever the other thread lets it go
            spins += 1
        t.join()
        assert result["r"].ok
        assert spins > 10_000, f"the waiting call held the GIL: {spins} spins"


def test_a_close_from_another_thread_never_pulls_the_sandbox_from_under_a_call():
    # close() races a run() in flight: the run either finishes (the sandbox ends after it) or
    # finds the sandbox closed; it never sees it vanish midway, and nothing crashes.
    for _ in range(20):
        sb = sandboxio.create(dsn_for("local"))
        result = {}

        def call():
            try:
                result["r"] = sb.run(["sh", "-c", "sleep 0.05; echo done"])
            except sandboxio.errors.SandboxGone as e:
                result["gone"] = e

        t = threading.Thread(target=call)
        t.start()
        sb.close()
        t.join()
        if "r" in result:
            assert (result["r"].termination, result["r"].stdout) == ("exited", b"done\n")
        else:
            assert "closed" in result["gone"].detail
        try:
            sb.run(["true"])
        except sandboxio.errors.SandboxGone:
            pass
        else:
            raise AssertionError("a closed sandbox still ran a command")
