"""tools/architecture_checks.py fails on the regressions it exists for (docs/architecture.md):
a crossing into Python outside the crossing class, a reference to another class's Guarded
state, a GIL claim unchecked, a raw PyObject* beyond a file's count, an unregistered task. Each rule is shown to pass on the tree and to fail on a copy with one planted line."""
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
    ("PyObject* f() { PyErr_SetString(PyExc_RuntimeError, \"no\"); return nullptr; }", "crossing"),
    ("bool f(long r) { return r == -1 && PyErr_Occurred(); }", "crossing"),
    ("void f(pybind11::error_already_set& e) { e.restore(); }", "crossing"),
    ("class Reacher { Guarded<StepCalls>& state_; };", "ownership"),
    ("Reacher::Reacher(Guarded<GuardState>& state) {}", "ownership"),
    ("void f(PyObject* o);", "raw-object"),
    ("class Planted final : public TaskProcessor {};", "task"),
    ("void f(at::Tensor t) { t.register_hook([](const at::Tensor& g) {}); }", "backward-hook"),
    ("void f(NodePtr n) { n->add_post_hook(nullptr); }", "backward-hook"),
])
def test_a_planted_line_fails(tmp_path, planted, rule):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    # A task's class is looked for in headers, as every other rule's lines are in both.
    # An autograd hook is allowed in live/hooks/ (the recorders), so that one is planted in a task.
    folder = "free_benchmark" if rule == "backward-hook" else "hooks"
    target = tmp_path / "csrc" / "live" / folder / ("planted.h" if rule == "task" else "planted.cpp")
    target.write_text("// planted\nnamespace msprobe {\n" + planted + "\n}\n")
    result = run_checks(tmp_path)
    assert result.returncode == 1
    assert f"csrc/live/{folder}/{target.name}:3: {rule}:" in result.stdout


def test_a_raw_object_fails_in_a_file_that_had_some_and_passes_in_the_bindings(tmp_path):
    """No file outside crossing/ and bind/ keeps a raw PyObject* (issue 54): tool_log.h had one."""
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    target = tmp_path / "csrc" / "live" / "log" / "tool_log.h"
    target.write_text(target.read_text() + "\nnamespace msprobe {\nvoid planted(PyObject* o);\n}\n")
    result = run_checks(tmp_path)
    assert result.returncode == 1 and "csrc/live/log/tool_log.h:" in result.stdout
    assert ": raw-object: void planted(PyObject* o);" in result.stdout
    target.write_text(target.read_text().replace("void planted(PyObject* o);", ""))
    (tmp_path / "csrc" / "bind" / "planted.cpp").write_text("void planted(PyObject* o);\n")
    assert run_checks(tmp_path).returncode == 0


def test_the_crossing_class_itself_is_allowed(tmp_path):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    header = tmp_path / "csrc" / "live" / "crossing" / "python_crossing.h"
    assert ".inc_ref()" in header.read_text() and "PyErr_Fetch" in header.read_text()
    assert run_checks(tmp_path).returncode == 0


def test_a_comment_or_string_is_not_code(tmp_path):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    target = tmp_path / "csrc" / "live" / "hooks" / "planted.cpp"
    target.write_text('// Py_INCREF(o) is not called here\nconst char* s = "PyErr_Clear();";\n')
    assert run_checks(tmp_path).returncode == 0


@pytest.mark.parametrize("claimed_in", ["definition", "header"])
def test_a_gil_claim_without_assert_gil_fails(tmp_path, claimed_in):
    """Issue 54: "GIL required" in a function's comment is a claim the debug build checks: its
    definition begins with PythonCrossing::assert_gil()."""
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    hooks = tmp_path / "csrc" / "live" / "hooks"
    body = "void reads_a_dict(pybind11::handle d) {\n  (void)d;\n}\n"
    if claimed_in == "header":
        (hooks / "planted.h").write_text("// Reads the dict. GIL required.\nvoid reads_a_dict(pybind11::handle d);\n")
        (hooks / "planted.cpp").write_text('#include "live/hooks/planted.h"\n' + body)
        where = "csrc/live/hooks/planted.cpp:2: gil: reads_a_dict: claimed at csrc/live/hooks/planted.h:2"
    else:
        (hooks / "planted.cpp").write_text("// Reads the dict. GIL required.\n" + body)
        where = "csrc/live/hooks/planted.cpp:2: gil: reads_a_dict: claimed at csrc/live/hooks/planted.cpp:2"
    result = run_checks(tmp_path)
    assert result.returncode == 1 and where in result.stdout, result.stdout
    # Kept, the claim passes.
    planted = hooks / "planted.cpp"
    planted.write_text(planted.read_text().replace("{\n", "{\n  PythonCrossing::assert_gil();\n", 1))
    assert run_checks(tmp_path).returncode == 0, run_checks(tmp_path).stdout


def test_the_debugger_keeps_the_attributes_the_docs_count(tmp_path):
    """Issue 54: docs/architecture.md said eight attributes where the code kept ten."""
    import msprobe_cpp
    for task in ("overflow_check", "grad_probe", "free_benchmark"):
        dbg = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(tmp_path / task))
        kept = set(vars(dbg)) - {"__doc__"}
        assert kept == {"_session", "_patches", "_models", "_loss_scale", "_peer", "_on_overflow", "_overflow",
                        "_extra_apis", "_task", "_engine_looks", "_stepping"}, sorted(kept)
        dbg._release()
        msprobe_cpp.PrecisionDebugger._instance = None
    docs = (ROOT / "docs" / "architecture.md").read_text()
    assert "`PrecisionDebugger` keeps eleven attributes" in docs
