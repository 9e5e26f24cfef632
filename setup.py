"""pip's face for msprobe_cpp: the package, the `msprobe-cpp` console command, and the extension
msprobe_cpp._C, which the project's one CMake build makes (the core and the command line compiled
once, linked into the extension as into the standalone binary; the build also copies the rules
file the package reads at run time).

    python3 -m venv --system-site-packages VENV          # sees Debian's python3-torch
    VENV/bin/pip install --no-build-isolation .          # -v shows the build's progress

Nothing here imports torch: CMake asks the interpreter running this file for torch's paths.
"""
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version() -> str:
    """The version CMakeLists.txt declares, which the extension and `msprobe-cpp --version` report."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        match = re.search(r"project\(msprobe_cpp VERSION (\S+)", f.read())
    if not match:
        raise SystemExit("CMakeLists.txt: no `project(msprobe_cpp VERSION x.y.z ...)` line")
    return match.group(1)


def missing_prerequisite() -> str:
    """What this interpreter or machine lacks to build the extension, in one line ("" if nothing):
    said before any build output, where pip's 100 lines of traceback would bury it."""
    if importlib.util.find_spec("torch") is None:
        if any("pip-build-env-" in p for p in sys.path):
            return ("pip's build isolation hides this venv's torch: add --no-build-isolation "
                    "(pip install --no-build-isolation .)")
        return (f"{sys.executable} has no torch: install one first (Debian: apt-get install python3-torch, "
                "and a venv made with --system-site-packages; or pip install torch into the venv)")
    if {"bdist_wheel", "dist_info"} & set(sys.argv) and importlib.util.find_spec("wheel") is None:
        return f"{sys.executable} has no `wheel` package, which pip needs to build: pip install wheel"
    for tool, package in (("cmake", "cmake"), ("c++", "g++")):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: apt-get install {package}"
    missing = [package for header, package in DEV_HEADERS if not any(
        os.path.exists(os.path.join(d, header)) for d in INCLUDE_DIRS)]
    if missing:
        return f"missing {', '.join(missing)} (their headers): apt-get install {' '.join(missing)}"
    return ""


# The build's Debian -dev packages, by a header each installs: named up front, where CMake's
# find_package error would be buried in pip's output.
DEV_HEADERS = [("nlohmann/json.hpp", "nlohmann-json3-dev"),
               ("yaml-cpp/yaml.h", "libyaml-cpp-dev")]  # pybind11: torch ships its own headers
# Where they are looked for: MSPROBE_CPP_INCLUDE_DIRS replaces the compiler's usual places.
INCLUDE_DIRS = [d for d in os.environ.get("MSPROBE_CPP_INCLUDE_DIRS", os.pathsep.join(
    os.environ.get("CPATH", "").split(os.pathsep) + ["/usr/include", "/usr/local/include"])).split(os.pathsep) if d]


def torch_tag() -> str:
    """The torch this build is for, as a local version label ("torch2.13.0.cpu"), read without
    importing torch. A wheel's version carries it, so its file name and pip's "Successfully
    installed msprobe_cpp-0.2.0+torch2.13.0.cpu" say which torch it fits. A requirement
    (torch==2.13.0) was the other choice: in a venv with another torch pip would replace that torch
    (a multi-GB download) instead of refusing, so the import says it instead (_torch_check.py)."""
    try:
        import importlib.metadata as metadata
        version = metadata.version("torch")
    except Exception:  # noqa: BLE001 - no torch metadata: no tag
        return ""
    return "torch" + re.sub(r"[^A-Za-z0-9.]+", ".", version).strip(".")


def torch_key() -> str:
    """Which torch a build folder is for (its location, without importing it): another torch
    gets a build folder of its own, never one configured for the first."""
    origin = importlib.util.find_spec("torch").origin or ""
    return hashlib.sha1(f"{sys.executable}|{os.path.realpath(origin)}".encode()).hexdigest()[:12]


class CMakeBuild(build_ext):
    """Builds the extension with CMake, in this build's own folder, into where setuptools wants it."""

    def build_extension(self, ext: Extension) -> None:
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        build_dir = os.path.abspath(os.path.join(self.build_temp, f"cmake-{torch_key()}"))
        # The library is made inside the torch's own build folder and copied out: build/lib.* is
        # shared by every torch of this Python, and a library made there for one torch looked up
        # to date to the next torch's build (issue 44).
        made = os.path.join(build_dir, "package")
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DMSPROBE_EXTENSION_OUTPUT_DIR={made}",
            "-DMSPROBE_BUILD_TESTS=OFF",
            # A one-shot build: torch's headers parsed once per job, not once per five files.
            f"-DMSPROBE_UNITY_BATCHES={jobs}",
        ]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure += ["-G", "Ninja"]
        print(f"msprobe_cpp: building the extension with CMake in {build_dir}", flush=True)
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "msprobe_extension",
                               "--parallel", jobs])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(made, os.path.basename(target)), target)
        rules = os.path.join(os.path.dirname(target), "_rules")
        shutil.rmtree(rules, ignore_errors=True)
        shutil.copytree(os.path.join(made, "_rules"), rules)


_missing = missing_prerequisite() if any(
    a.startswith(("bdist", "build", "install", "develop", "editable", "dist_info")) for a in sys.argv[1:]) else ""
if _missing:
    raise SystemExit(f"msprobe_cpp: cannot build: {_missing}")

setup(
    name="msprobe_cpp",
    version=project_version() + (f"+{torch_tag()}" if torch_tag() else ""),
    description="C++ re-implementation of msprobe's PyTorch data dump with live overflow detection",
    python_requires=">=3.8",
    package_dir={"": "python"},
    packages=["msprobe_cpp"],
    py_modules=["msprobe_cpp_cli"],  # the console command's --version and --help, without torch
    ext_modules=[Extension("msprobe_cpp._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["msprobe-cpp = msprobe_cpp_cli:main"]},
    zip_safe=False,
)
