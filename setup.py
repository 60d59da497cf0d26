"""pip install . for the tilefeed Python package: its C++ module is built by the project's
own CMake (the _tilefeed target only: no tools, tests or benchmarks), with the interpreter
running pip. Needs what a CMake build of tilefeed needs (README "Build") plus python3-dev
and pybind11-dev; nothing is downloaded, so with Debian's setuptools:

    pip install --no-build-isolation -v .

(-v shows the C++ build's progress lines; without it pip is silent for the whole build.)

CMAKE_ARGS (e.g. "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache") is passed to CMake's configure
step, CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs (default: all cores)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    """The version in CMakeLists.txt's project() line, which the module also reports."""
    text = (ROOT / "CMakeLists.txt").read_text()
    found = re.search(r"project\(tilefeed\s+VERSION\s+([0-9.]+)", text)
    if not found:
        raise RuntimeError("setup.py: no 'project(tilefeed VERSION x.y.z' in CMakeLists.txt")
    return found.group(1)


class CMakeBuild(build_ext):
    """Builds tilefeed._tilefeed with CMake and puts it where setuptools packs it."""

    def build_extension(self, ext):
        build = Path(self.build_temp).resolve() / "cmake"
        build.mkdir(parents=True, exist_ok=True)
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DTILEFEED_BUILD_TESTS=OFF", "-DTILEFEED_BUILD_BENCH=OFF",
                     "-DTILEFEED_BUILD_TOOLS=OFF", "-DTILEFEED_BUILD_PYTHON=ON",
                     # The module links the loader and the launcher: no MPI, ZeroMQ, OpenBLAS.
                     "-DTILEFEED_BUILD_TRANSPORT=OFF", "-DTILEFEED_BUILD_TRAINER=OFF",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build), "--target", "_tilefeed", "-j", jobs],
                       check=True)
        built = list((build / "python" / "tilefeed").glob("_tilefeed*.so"))
        if len(built) != 1:
            raise RuntimeError(f"setup.py: expected one _tilefeed module in {build}, "
                               f"found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    name="tilefeed",
    version=project_version(),
    description="tilefeed's C++ image data loader for Python and PyTorch",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"torch": ["torch"]},
    package_dir={"": "python"},
    packages=["tilefeed"],
    package_data={"tilefeed": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("tilefeed._tilefeed", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
