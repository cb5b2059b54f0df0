"""sandboxio's PEP 517 build backend: CMake builds the extension, this file packs the wheel.

Why not setuptools or scikit-build-core: Debian 12 has no scikit-build-core, and pip builds in
an isolated environment that would have to download setuptools from PyPI, which a machine
without a package index cannot. This backend needs nothing but the standard library, CMake,
a C++20 compiler and Debian's pybind11, so ``pip install .`` works offline. It builds in
``build/python`` (kept, with ccache, so a second install is quick); ``SANDBOXIO_BUILD_DIR``
moves it, ``CMAKE_BUILD_PARALLEL_LEVEL`` sets the jobs.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "sandboxio"
NAME = "sandboxio"


def _version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(sandboxio VERSION ([0-9.]+)", text)
    if not match:
        raise RuntimeError("no version in CMakeLists.txt's project()")
    return match.group(1)


def _tag() -> str:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _metadata(version: str) -> str:
    readme = (ROOT / "python" / "README.md").read_text()
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        "Summary: One secure API for running AI-agent code in any sandbox\n"
        "License: MIT\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Programming Language :: C++\n"
        "Classifier: Framework :: AsyncIO\n"
        "Classifier: Framework :: Pytest\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme)


def _build_extension() -> Path:
    build = Path(os.environ.get("SANDBOXIO_BUILD_DIR", ROOT / "build" / "python"))
    env = dict(os.environ)
    env.setdefault("CCACHE_DIR", "/var/cache/sandboxio-ccache" if os.access(
        "/var/cache/sandboxio-ccache", os.W_OK) else str(build / ".ccache"))
    env.setdefault("CCACHE_BASEDIR", str(ROOT))
    env.setdefault("CCACHE_NOHASHDIR", "true")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    if not (build / "CMakeCache.txt").exists():
        # -O2, the level the project's presets test (g++ 12 at -O3 reports false -Wrestrict
        # positives in libstdc++), and warnings as warnings: a user's compiler is not ours.
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), *generator,
                        "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG",
                        "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG", "-DSANDBOXIO_WERROR=OFF",
                        "-DSANDBOXIO_BUILD_TESTS=OFF", "-DSANDBOXIO_BUILD_BENCH=OFF",
                        f"-DPython3_EXECUTABLE={sys.executable}"],
                       check=True, env=env, stdout=sys.stderr)
    subprocess.run(["cmake", "--build", str(build), "--target", "sandboxio_python_package"],
                   check=True, env=env, stdout=sys.stderr)
    staged = build / "python" / "sandboxio"
    if not any(staged.glob("_native*.so")):
        raise RuntimeError(f"the build made no extension in {staged}: is pybind11-dev installed?")
    return staged


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory: str, config_settings: Optional[Dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    version = _version()
    staged = _build_extension()
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_name = f"{NAME}-{version}-{_tag()}.whl"
    files: Dict[str, bytes] = {}
    for path in sorted(staged.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            files[f"{NAME}/{path.name}"] = path.read_bytes()
    files[f"{dist_info}/METADATA"] = _metadata(version).encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: sandboxio_build\nRoot-Is-Purelib: false\n"
        f"Tag: {_tag()}\n").encode()
    files[f"{dist_info}/entry_points.txt"] = b"[pytest11]\nsandboxio = sandboxio.testing\n"
    files[f"{dist_info}/LICENSE"] = (ROOT / "LICENSE").read_bytes()
    record: List[str] = [_record_line(n, d) for n, d in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(wheel_directory) / wheel_name
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return wheel_name


def get_requires_for_build_wheel(config_settings: Optional[Dict] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict] = None) -> str:
    dist_info = Path(metadata_directory) / f"{NAME}-{_version()}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata(_version()))
    (dist_info / "entry_points.txt").write_text("[pytest11]\nsandboxio = sandboxio.testing\n")
    return dist_info.name
