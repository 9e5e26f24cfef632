"""tools/architecture_checks.py fails on the regressions it exists for (docs/architecture.md):
a crossing into Python outside the crossing class, and a reference to another class's Guarded
state. Each rule is shown to pass on the tree and to fail on a copy with one planted line."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "architecture_checks.py"


def run_checks(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--quiet", "--root", str(root)],
                          capture_output=True, text=True)


def test_the_tree_passes():
    result = run_checks(ROOT)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("planted, rule", [
    ("void f(PyObject* o) { Py_INCREF(o); }", "crossing"),
    ("void f(PyObject* o) { Py_XDECREF(o); }", "crossing"),
    ("void f() { PyErr_Clear(); }", "crossing"),
    ("void f() { pybind11::gil_scoped_acquire gil; }", "crossing"),
    ("void f() { auto g = PyGILState_Ensure(); PyGILState_Release(g); }", "crossing"),
    ("class Reacher { Guarded<StepCalls>& state_; };", "ownership"),
    ("Reacher::Reacher(Guarded<GuardState>& state) {}", "ownership"),
])
def test_a_planted_line_fails(tmp_path, planted, rule):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    target = tmp_path / "csrc" / "live" / "hooks" / "planted.cpp"
    target.write_text("// planted\nnamespace msprobe {\n" + planted + "\n}\n")
    result = run_checks(tmp_path)
    assert result.returncode == 1
    assert f"csrc/live/hooks/planted.cpp:3: {rule}:" in result.stdout


def test_the_crossing_class_itself_is_allowed(tmp_path):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    header = tmp_path / "csrc" / "live" / "crossing" / "python_crossing.h"
    assert "Py_XINCREF" in header.read_text()
    assert run_checks(tmp_path).returncode == 0


def test_a_comment_or_string_is_not_code(tmp_path):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    target = tmp_path / "csrc" / "live" / "hooks" / "planted.cpp"
    target.write_text('// Py_INCREF(o) is not called here\nconst char* s = "PyErr_Clear();";\n')
    assert run_checks(tmp_path).returncode == 0
