"""Issue 44: a stop made in a notebook cell names the cell and its code. Jupyter's kernel compiles
each cell from a string under a file name like <tmp>/ipykernel_27142/693198277.py that is on no
disk: its lines are in Python's linecache, and IPython's compiler maps the file to the cell's
execution count. (A real kernel through nbclient is the next step: its packages are not pinned
yet.)"""
import linecache
import sys
import types

import pytest
import torch
import torch.nn as nn

import msprobe_cpp

CELL = "/tmp/ipykernel_0/693198277.py"  # no such file
CODE = """\
model = nn.Linear(4, 4)
x = torch.randn(2, 4, requires_grad=True)
y = torch.log(x - x)
"""


def run_cell(tmp_path) -> msprobe_cpp.OverflowError:
    linecache.cache[CELL] = (len(CODE), None, CODE.splitlines(True), CELL)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    debugger.start()
    try:
        exec(compile(CODE, CELL, "exec"), {"nn": nn, "torch": torch})
    except msprobe_cpp.OverflowError as e:
        return e
    finally:
        debugger._release()
        linecache.cache.pop(CELL, None)
    raise AssertionError("no stop")


def test_a_cells_source_line_shows_its_code(tmp_path):
    e = run_cell(tmp_path)
    assert e.source == f"{CELL}:3: y = torch.log(x - x)", e.source


def test_under_ipython_the_source_line_names_the_cell(tmp_path, monkeypatch):
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(_filename_map={CELL: 7}))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    e = run_cell(tmp_path)
    assert e.source == "In [7], line 3: y = torch.log(x - x)", e.source


def test_a_model_the_program_no_longer_references_is_let_go_and_the_next_gets_no_prefix(tmp_path):
    """Issue 44: re-running a notebook cell that builds a new model and starts it kept every earlier
    model alive, and named the new one's modules `model3.`."""
    import gc
    import json
    import weakref
    debugger = msprobe_cpp.PrecisionDebugger(level="mix", dump_path=str(tmp_path / "dump"))

    def run_the_cell() -> "weakref.ref[nn.Module]":
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        debugger.start(model)
        model(torch.randn(2, 4))
        debugger.stop()
        debugger.step()
        return weakref.ref(model)

    runs = [run_the_cell() for _ in range(3)]
    gc.collect()
    debugger._release()
    assert [r() for r in runs] == [None, None, None]
    for step in range(3):
        data = json.loads((tmp_path / "dump" / f"step{step}" / "rank" / "dump.json").read_text())["data"]
        assert "Module.0.Linear.forward.0" in data, sorted(data)
        assert not any(name.startswith("Module.model") for name in data), sorted(data)


def test_in_a_real_jupyter_kernel(tmp_path):
    """The same through nbclient and ipykernel (test-only, pinned in requirements-torch2.txt): the
    stop's source names the cell, and re-running a cell that builds and starts a new model keeps
    no earlier one alive."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    from testenv import PACKAGE_ROOT
    cells = [
        f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
        "import gc, weakref, torch, torch.nn as nn, msprobe_cpp\n"
        f"debugger = msprobe_cpp.PrecisionDebugger(task='overflow_check', level='mix', dump_path={str(tmp_path / 'dump')!r})\n"
        "refs = []",
        "model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n"
        "debugger.start(model)\n"
        "model(torch.randn(2, 4)); debugger.stop(); debugger.step(); refs.append(weakref.ref(model))",
        "model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n"
        "debugger.start(model)\n"
        "model(torch.randn(2, 4)); debugger.stop(); debugger.step(); refs.append(weakref.ref(model))",
        "del model; gc.collect(); print('alive', sum(r() is not None for r in refs))",
        "x = torch.randn(2, 4, requires_grad=True)\n"
        "keep = nn.Linear(4, 4); debugger.start(keep)\n"
        "try:\n"
        "    y = torch.log(x - x)\n"
        "except msprobe_cpp.OverflowError as e:\n"
        "    print('source', e.source)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = ["".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
               for cell in notebook.cells]
    assert printed[3] == "alive 0\n", printed
    assert printed[4] == "source In [5], line 4: y = torch.log(x - x)\n", printed
