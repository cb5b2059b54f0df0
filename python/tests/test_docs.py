"""Every Python block in the README and docs/how-to/python.md runs as written.

A block whose first line is `# file: test_NAME.py` is a test file: pytest runs it. A block
whose first line starts with `# not run:` says why it is not run (a framework this repository
cannot install). Every other block runs as a script. docker://python:3.12-slim becomes the
local test image (no registry here).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import DOCKER_IMAGE, dsn_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "how-to" / "python.md"]


def blocks():
    for page in PAGES:
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)):
            yield pytest.param(code, id=f"{page.relative_to(ROOT)}#{i + 1}")


@pytest.mark.parametrize("code", list(blocks()))
def test_the_block_runs(code, tmp_path):
    first = code.splitlines()[0]
    if first.startswith("# not run:"):
        pytest.skip(first[2:])
    if "docker://" in code:
        dsn_for("docker")  # skips (or fails in CI) without an engine
        code = code.replace("docker://python:3.12-slim", f"docker://{DOCKER_IMAGE}")
    env = dict(os.environ, PYTHONWARNINGS="ignore::UserWarning")
    match = re.match(r"# file: (\S+\.py)$", first)
    if match:
        (tmp_path / match.group(1)).write_text(code)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "sandboxio.testing", "-p",
               "no:cacheprovider", "-W", "ignore::UserWarning", match.group(1)]
    else:
        (tmp_path / "block.py").write_text(code)
        cmd = [sys.executable, "block.py"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"


def test_the_pages_have_blocks():
    assert len(list(blocks())) >= 8
