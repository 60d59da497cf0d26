"""pip install . (setup.py runs the project's CMake for the module), into a fresh prefix,
then import tilefeed from another directory. Slow: it builds the C++ library. Registered as
its own ctest entry (python;slow;process)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pip_install_then_import_elsewhere(tmp_path):
    prefix = tmp_path / "prefix"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)  # the build tree's module must not be what is imported
    if shutil.which("ccache"):
        env.setdefault("CMAKE_ARGS", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache "
                                     "-DCMAKE_C_COMPILER_LAUNCHER=ccache")
        env.setdefault("CCACHE_BASEDIR", str(ROOT))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    # The README's command: -v shows the C++ build's progress ("[ 31%] Building CXX ...").
    # MPI, ZeroMQ and OpenBLAS made unfindable: the module needs only the loader's libraries.
    env["CMAKE_ARGS"] = env.get("CMAKE_ARGS", "") + (
        " -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_cppzmq=ON")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "-v",
                           "--no-deps", "--prefix", str(prefix), str(ROOT)],
                          env=env, cwd=tmp_path, timeout=1700, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert re.search(r"^\s*\[\s*\d+%\] (Building CXX object|Built target)", output, re.M), \
        output[-3000:]
    found = list(prefix.rglob("tilefeed/__init__.py"))
    assert len(found) == 1, found
    site = found[0].parent.parent
    assert list(site.glob("tilefeed/_tilefeed*.so")) and (site / "tilefeed/_tilefeed.pyi").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [sys.executable, "-c", "import tilefeed; print(tilefeed.__version__, tilefeed.__file__)"],
        check=True, capture_output=True, text=True, cwd=elsewhere,
        env=dict(env, PYTHONPATH=str(site)))
    version, path = run.stdout.split()
    project = re.search(r"project\(tilefeed VERSION ([0-9.]+)",
                        (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert version == project
    assert Path(path).is_relative_to(site)
    print(f"installed tilefeed {version} at {site}")
