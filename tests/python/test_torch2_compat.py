"""PyTorch 2.x paths that this machine's torch 1.13 lacks, proved through their seams: under
torch.compile the API wrappers hand the call to the original (so compiled regions are traced as
written, neither recorded nor broken), and a compiled model is said to be left alone."""
import json
import types

import pytest
import torch

import msprobe_cpp
from testenv import FIXTURES, ROOT
from dumps import load as read_dump_file


class FakeCompiler:
    """torch.compiler as PyTorch 2.x has it, answering what the test says: is_compiling(), which
    the Python wrapper asks, and the `_is_compiling_flag` behind it, which the C hook reads where
    the hook is traced as the original (compile_seam.py, torch 2.5 and later)."""

    def __init__(self, monkeypatch) -> None:
        self.compiler = getattr(torch, "compiler", None) or types.SimpleNamespace()
        self.state = {"compiling": False}
        monkeypatch.setattr(torch, "compiler", self.compiler, raising=False)
        monkeypatch.setattr(self.compiler, "is_compiling", lambda: self.state["compiling"], raising=False)
        monkeypatch.setattr(self.compiler, "_is_compiling_flag", False, raising=False)

    def __setitem__(self, key: str, value: bool) -> None:
        self.state[key] = value
        self.compiler._is_compiling_flag = value


@pytest.fixture
def fake_compiler(monkeypatch):
    return FakeCompiler(monkeypatch)


def test_calls_traced_by_torch_compile_go_to_the_original(tmp_path, fake_compiler):
    original = torch.tanh
    x = torch.linspace(-1, 1, 5)
    expected_exp = x.exp()
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="L1", step=[0])
    dbg.start()
    eager = torch.tanh(x)
    fake_compiler["compiling"] = True
    traced = torch.tanh(x)      # what the tracer sees: the original, unrecorded
    traced_method = x.exp()
    fake_compiler["compiling"] = False
    dbg.stop()
    dbg.step()
    assert torch.equal(eager, traced) and torch.equal(traced_method, expected_exp)
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    assert list(data) == ["Torch.tanh.0.forward"]
    assert torch.tanh is original  # removed after the last step, as always


def test_a_compiled_model_is_said_to_be_left_alone(tmp_path, capfd):
    class Compiled(torch.nn.Module):  # torch.compile's OptimizedModule keeps the model here
        def __init__(self):
            super().__init__()
            self._orig_mod = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self._orig_mod(x)

    model = Compiled()
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="mix", step=[0, 1])
    for _ in range(2):
        dbg.start(model)
        model(torch.ones(1, 2))
        dbg.stop()
        dbg.step()
    err = capfd.readouterr().err
    assert err.count("torch.compile'd model") == 1, err


def test_module_keyword_arguments_are_recorded_where_torch_passes_them(tmp_path):
    """msprobe on 2.x registers its forward hooks with_kwargs=True: a module called with keywords
    has them in its record. PyTorch 1.13 hands forward pre-hooks no keywords (its reason)."""
    import json
    import torch.nn as nn

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *, scale: float = 1.0, bias=None) -> torch.Tensor:
            return self.fc(x) * scale + (0 if bias is None else bias)

    holder = nn.Sequential()
    holder.add_module("m", Scaled())
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="mix", step=[0])
    dbg.start(holder)
    holder.m(torch.ones(2, 4), scale=0.5, bias=torch.zeros(4))
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    rec = read_dump_file(tmp_path / "step0" / "rank")["data"]["Module.m.Scaled.forward.0"]
    if int(torch.__version__.split(".")[0]) < 2:
        assert rec["input_kwargs"] == {}
        return
    assert rec["input_kwargs"]["scale"] == {"type": "float", "value": 0.5}
    assert rec["input_kwargs"]["bias"]["type"] == "torch.Tensor" and rec["input_kwargs"]["bias"]["Max"] == 0.0


def test_the_wrap_list_is_msprobes():
    """rules/support_wrap_ops.yaml is what tools/list_wrap_ops.py makes of msprobe 1.1.1's
    wrap_ops.json: its five default sections name for name, and the casts of overflow_check."""
    import subprocess
    import sys
    tool = ROOT / "tools" / "list_wrap_ops.py"
    out = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    from msprobe_cpp import _C
    ops = _C.load_wrap_ops(str(ROOT / "rules" / "support_wrap_ops.yaml"))
    theirs = json.loads((FIXTURES / "wrap_ops.json").read_text())
    assert {k: ops[k] for k in ("functional", "tensor", "torch", "distributed")} == \
        {k: theirs[k] for k in ("functional", "tensor", "torch", "distributed")}
    assert ops["vf"] == theirs["_VF"]
    assert ops["overflow_casts"] == ["bfloat16", "double", "float", "half", "to", "type"]
