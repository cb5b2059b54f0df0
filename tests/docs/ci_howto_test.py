#!/usr/bin/env python3
"""docs/how-to/ci.md works as written: its project builds and its workflow's steps pass.

    ci_howto_test.py JOB DOC BUILD_DIR CXX

JOB is `offline` or `docker`. The page's C++ and CMake blocks become a project in a scratch
directory; sandboxio is installed from BUILD_DIR into a prefix put on PATH and
CMAKE_PREFIX_PATH. Then the job's steps run in order with the job's environment, each with
`bash -eo pipefail`, as GitHub Actions runs them, except the steps that reach outside this
machine: `uses:` (the checkout: the project is already there), "Install sandboxio" (the prefix
stands in), and "Pull the image" (no registry here; the test image is local). In the docker
job, python:3.12-slim is replaced by the local test image. Exit 77 skips the docker job when no
engine runs (not in CI, where SBX_REQUIRE_DOCKER=1 makes it a failure).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

TEST_IMAGE = "sandboxio-test/python:bookworm"


def blocks(md, lang):
    return re.findall(r"```" + lang + r"\n(.*?)```", md, re.S)


def check_shape(workflow):
    """The promises the page makes about the workflow, checked on its YAML."""
    problems = []
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    if not isinstance(triggers, dict) or "pull_request" not in triggers or "push" not in triggers:
        problems.append("the workflow must run on pull_request and on push")
    jobs = workflow.get("jobs", {})
    offline, docker = jobs.get("offline", {}), jobs.get("docker", {})
    if "pull_request" not in offline.get("if", "") or offline.get("env", {}).get("SANDBOX_DSN") != "fake://":
        problems.append("the offline job must run on pull requests with SANDBOX_DSN=fake://")
    if "main" not in docker.get("if", "") or not docker.get("env", {}).get("SANDBOX_DSN", "").startswith("docker://"):
        problems.append("the docker job must run on main with a docker:// SANDBOX_DSN")
    leak = [s for s in docker.get("steps", []) if "reap --check" in s.get("run", "")]
    if not leak or leak[-1].get("if") != "always()" or docker["steps"][-1] is not leak[-1]:
        problems.append("the docker job must end with a leak check (sandboxio reap --check) that runs always()")
    return problems


def main():
    job_name, doc, build, cxx = sys.argv[1:5]
    md = pathlib.Path(doc).read_text()
    workflow = yaml.safe_load(blocks(md, "yaml")[0])
    problems = check_shape(workflow)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    if job_name == "docker":
        up = shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
        if not up:
            print("*** SKIPPED: no Docker engine ***", file=sys.stderr)
            return 1 if os.environ.get("SBX_REQUIRE_DOCKER") == "1" else 77
    work = pathlib.Path(tempfile.mkdtemp(prefix="sbx-ci-howto-"))
    try:
        project = work / "project"
        project.mkdir()
        (project / "tools_test.cpp").write_text(blocks(md, "cpp")[0])
        (project / "CMakeLists.txt").write_text(blocks(md, "cmake")[0])
        prefix = work / "prefix"
        subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True,
                       stdout=subprocess.DEVNULL)
        shim = work / "bin"
        shim.mkdir()
        (shim / "sudo").write_text('#!/bin/sh\nexec "$@"\n')  # the runner's sudo; we are root or need none
        (shim / "sudo").chmod(0o755)
        job = workflow["jobs"][job_name]
        env = dict(os.environ)
        env.update({k: str(v) for k, v in job.get("env", {}).items()})
        env["SANDBOX_DSN"] = env["SANDBOX_DSN"].replace("python:3.12-slim", TEST_IMAGE)
        env["PATH"] = f"{prefix / 'bin'}:{shim}:{env['PATH']}"
        env["CMAKE_PREFIX_PATH"] = str(prefix)
        env["CXX"] = cxx
        failed = False
        for step in job["steps"]:
            name = step.get("name", step.get("uses", "?"))
            if "uses" in step or name in ("Install sandboxio", "Pull the image"):
                print(f"-- {name}: stands in (see the docstring)")
                continue
            if failed and step.get("if") != "always()":
                print(f"-- {name}: skipped after a failure")
                continue
            print(f"-- {name}: {step['run'].strip()}", flush=True)
            rc = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=project, env=env).returncode
            if rc != 0:
                print(f"FAIL: step '{name}' exited {rc}", file=sys.stderr)
                failed = True
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
