"""The package installed as a user installs it: `pip install --no-build-isolation` of a fresh copy
of the repo into a venv that sees Debian's torch, then the console command, `python -m`, and a
training run from outside the repo.

It builds the extension once more (minutes), so it runs when MSPROBE_TEST_INSTALL=1, which
tools/test.sh (and so CI) sets."""
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from testenv import ROOT

pytestmark = pytest.mark.slow  # tools/test.sh --fast leaves it out

installs = pytest.mark.skipif(os.environ.get("MSPROBE_TEST_INSTALL") != "1",
                              reason="set MSPROBE_TEST_INSTALL=1 (tools/test.sh does) to build and install")

# setup.py as pip runs it, up to its first check (no build): `find_spec` stands for what the
# interpreter can import, `path` is added to sys.path.
SETUP_AS_PIP_RUNS_IT = """
import importlib.util, runpy, sys
real = importlib.util.find_spec
hidden = set(sys.argv[1].split(",")) - {""}
importlib.util.find_spec = lambda name, *a: None if name in hidden else real(name, *a)
sys.path.append(sys.argv[2])
sys.argv = ["setup.py", "bdist_wheel"]
runpy.run_path(SETUP, run_name="__main__")
"""


def setup_says(hidden: str, path: str = "", **env: str) -> subprocess.CompletedProcess:
    script = SETUP_AS_PIP_RUNS_IT.replace("SETUP", repr(str(ROOT / "setup.py")))
    return subprocess.run([sys.executable, "-c", script, hidden, path], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, **env), timeout=120)


def test_pips_build_isolation_is_named_as_what_hides_torch(tmp_path):
    done = setup_says("torch", str(tmp_path / "pip-build-env-x1y2" / "overlay"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "msprobe_cpp: cannot build: pip's build isolation hides this venv's torch: add --no-build-isolation "
        "(pip install --no-build-isolation .)"), done.stderr
    without = setup_says("torch")  # no isolation: the interpreter has none
    assert "has no torch: install one first" in without.stderr.strip().splitlines()[-1], without.stderr


def test_missing_dev_packages_are_named_up_front(tmp_path):
    done = setup_says("", MSPROBE_CPP_INCLUDE_DIRS=str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "msprobe_cpp: cannot build: missing nlohmann-json3-dev, libyaml-cpp-dev (their headers): "
        "apt-get install nlohmann-json3-dev libyaml-cpp-dev"), done.stderr

TRAIN = """
import json, pathlib, sys
import torch
import msprobe_cpp
assert "site-packages" in msprobe_cpp.__file__, msprobe_cpp.__file__
# The test hooks are an extension of their own (tests/ext), never installed (issue 54).
import importlib.util
assert importlib.util.find_spec("msprobe_cpp_units") is None
assert not hasattr(msprobe_cpp._C, "_units")
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = msprobe_cpp.PrecisionDebugger(dump_path="dump", level="mix")
for step in range(3):
    debugger.start(model)
    loss = model(torch.randn(5, 4)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
debugger.drain()  # the writer thread's steps on disk, for this script to read
for step in range(3):
    data = json.loads(pathlib.Path(f"dump/step{step}/rank/dump.json").read_text())["data"]
    assert "Module.0.Linear.forward.0" in data and "Functional.linear.0.forward" in data
print("trained", msprobe_cpp.__version__)
"""


def fresh_copy(dest: pathlib.Path) -> None:
    """The repo's files as a clone would have them (tracked, plus new files not ignored), without
    any build output."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))


def run(*args, extra_env=None, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing from the repo
    env.update(extra_env or {})
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=1200, **kw)


def make_venv(venv: pathlib.Path) -> None:
    """A venv that sees the torch this test runs on: Debian's through the system site packages, or,
    run from a venv of its own (tools/test.sh's torch 2 run), that venv's packages through a .pth
    file, so that pip builds against that torch (a venv made from a venv sees only the base
    interpreter's system packages)."""
    if sys.prefix == sys.base_prefix:
        r = run("/usr/bin/python3", "-m", "venv", "--system-site-packages", venv)
        assert r.returncode == 0, r.stderr
        return
    r = run(pathlib.Path(sys.base_prefix) / "bin" / "python3", "-m", "venv", venv)
    assert r.returncode == 0, r.stderr
    site = run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    ours = [p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)]
    (pathlib.Path(site.stdout.strip()) / "torch_env.pth").write_text("\n".join(ours) + "\n")


@installs
def test_pip_install_into_a_venv(tmp_path, fixtures):
    repo, venv, work = tmp_path / "repo", tmp_path / "venv", tmp_path / "elsewhere"
    repo.mkdir()
    work.mkdir()
    fresh_copy(repo)
    make_venv(venv)

    start = time.monotonic()
    r = run(venv / "bin" / "pip", "install", "--no-build-isolation", "--no-index", "-v", repo)
    minutes = (time.monotonic() - start) / 60
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    print(f"pip install: {minutes:.1f} min")
    # The build's own progress reached pip's verbose output, and the core was compiled once, in as
    # many unity batches as pip runs jobs (cmake/unity.cmake).
    log = r.stdout + r.stderr
    assert "] Building CXX object CMakeFiles/msprobe_core.dir/Unity/unity_0_cxx.cxx.o" in log
    assert log.count("msprobe_core.dir/Unity/unity_0_cxx.cxx.o") == 1
    assert "msprobe_core.dir/csrc/core/detector.cpp.o" not in log

    command = venv / "bin" / "msprobe-cpp"
    assert command.read_bytes().startswith(b"#!"), "the console command is a script, not a second binary"
    version = run(command, "--version")
    assert version.returncode == 0 and version.stdout.startswith("msprobe-cpp ")
    py_version = run(venv / "bin" / "python", "-c", "import msprobe_cpp; print(msprobe_cpp.__version__)", cwd=work)
    assert version.stdout == f"msprobe-cpp {py_version.stdout.strip()}\n", py_version.stderr

    dump = fixtures / "mlp_overflow_check_L1" / "dump.json"
    for args in (["check", dump], ["check", dump, "--format", "text"], ["check", work / "missing.json"]):
        console = run(command, *args, cwd=work)
        module = run(venv / "bin" / "python", "-m", "msprobe_cpp", *args, cwd=work)
        standalone = run(os.environ.get("MSPROBE_CPP_BIN", ROOT / "build" / "bin" / "msprobe-cpp"), *args, cwd=work)
        assert (console.returncode, console.stdout, console.stderr) == \
            (module.returncode, module.stdout, module.stderr) == \
            (standalone.returncode, standalone.stdout, standalone.stderr), args
    assert console.returncode == 2 and "missing.json" in console.stderr

    trained = run(venv / "bin" / "python", "-c", TRAIN, cwd=work)
    assert trained.returncode == 0, trained.stderr[-4000:]
    assert trained.stdout.strip() == f"trained {py_version.stdout.strip()}"

    if sys.prefix == sys.base_prefix:
        return
    # The torch 2 run: the same copy installed again, into a venv with Debian's torch (issue 33).
    # That build gets a folder of its own: it once reused the first one's CMake cache, linked
    # torch 2's headers against 1.13's libraries, said "Successfully installed" and failed at
    # import with an undefined symbol.
    other = tmp_path / "venv-debian-torch"
    r = run("/usr/bin/python3", "-m", "venv", "--system-site-packages", other)
    assert r.returncode == 0, r.stderr
    # One job (torch's MAX_JOBS, which setup.py reads): one unity batch a library, torch's headers
    # parsed once for the engine, not once a core: 93 s of CPU instead of 112 (user time, this
    # 2-core VM) in a suite that is CPU-bound. The first install above keeps pip's default.
    r = run(other / "bin" / "pip", "install", "--no-build-isolation", "--no-index", "-v", repo,
            extra_env={"MAX_JOBS": "1"})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "msprobe_engine.dir/Unity/unity_0_cxx.cxx.o" in r.stdout + r.stderr
    assert "msprobe_engine.dir/Unity/unity_1_cxx.cxx.o" not in r.stdout + r.stderr
    probe = ("import torch, msprobe_cpp; from msprobe_cpp import _torch_check as c; "
             "print(torch.__version__, c.built_for(c.extension_file())[0])")

    def each_imports() -> None:
        for env in (other, venv):  # the last install, and the other one still
            imported = run(env / "bin" / "python", "-c", probe, cwd=work)
            assert imported.returncode == 0, imported.stderr[-4000:]  # never an abort (rc 134, 139)
            running, built = imported.stdout.split()
            assert running == built, imported.stdout
    each_imports()
    trained = run(other / "bin" / "python", "-c", TRAIN, cwd=work)
    assert trained.returncode == 0, trained.stderr[-4000:]
    # Issue 44: installed again from the same copy, in both orders. Each build folder is up to
    # date (nothing compiles); the shared build/lib.* once kept the last torch's library, and the
    # next install copied it into a venv of the other torch.
    for env, jobs in ((venv, {}), (other, {"MAX_JOBS": "1"})):  # as each was built: its batches
        r = run(env / "bin" / "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                "--force-reinstall", "-v", repo, extra_env=jobs)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        assert "Building CXX object" not in r.stdout + r.stderr
        each_imports()
    assert len(list((repo / "build").glob("temp.*/cmake-*"))) == 2  # one build folder per torch


def test_the_demo_imports_an_installed_package_before_the_source_trees(tmp_path):
    """Issue 44: run from a venv where the package is installed, the demo imported the source
    tree's build instead."""
    installed = tmp_path / "site" / "msprobe_cpp"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text('raise SystemExit("the installed msprobe_cpp")\n')
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_overflow_demo.py")], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")), capture_output=True, text=True,
                          timeout=300)
    assert done.stderr.strip().endswith("the installed msprobe_cpp"), done.stderr[-2000:]
