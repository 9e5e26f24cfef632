"""A started model can be saved, pickled and copied (issue 33): torch.save/torch.load, pickle, and
copy.deepcopy (an EMA made after start()) give a plain model, without any of our hooks, and the
original stays hooked. At every level and under both tasks."""
import copy
import io
import pickle

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from dumps import load as read_dump_file

HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
              "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
              "_backward_pre_hooks")
CASES = [(task, level) for task in ("statistics", "overflow_check") for level in ("L1", "mix", "L0")]


def hooks_of(model: nn.Module) -> int:
    return sum(len(getattr(m, key, None) or {}) for m in model.modules() for key in HOOK_DICTS)


def load(data: bytes) -> nn.Module:
    try:
        return torch.load(io.BytesIO(data), weights_only=False)
    except TypeError:  # torch 1.13: no weights_only, and a whole module loads
        return torch.load(io.BytesIO(data))


def saved(model: nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.save(model, buf)
    return buf.getvalue()


COPIES = {
    "torch.save": lambda m: load(saved(m)),
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "deepcopy": copy.deepcopy,
}


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@pytest.mark.parametrize("task, level", CASES)
@pytest.mark.parametrize("how", list(COPIES))
def test_a_started_model_saved_or_copied_is_plain_and_the_original_stays_hooked(tmp_path, task, level, how):
    model = make_model()
    plain_hooks = hooks_of(model)
    debugger = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(tmp_path / "dump"), level=level)
    x = torch.randn(3, 4)
    debugger.start(model)
    model(x).sum().backward()
    hooked = hooks_of(model)
    other = COPIES[how](model)  # mid-step, as a checkpoint or an EMA is made
    assert hooks_of(other) == plain_hooks
    assert hooks_of(model) == hooked
    for a, b in zip(other.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    other(x)  # the copy, run inside the started step, records no module of its own
    debugger.stop()
    debugger.step()
    debugger.start(model)
    model(x).sum()
    debugger.stop()
    debugger._release()
    assert hooks_of(model) == plain_hooks
    if task == "statistics":
        names = list(read_dump_file(tmp_path / "dump" / "step0" / "rank")["data"])
        modules = [n for n in names if n.startswith("Module.") and n.endswith(".forward.0")]
        if level != "L1":
            assert sorted(modules) == ["Module.0.Linear.forward.0", "Module.1.ReLU.forward.0",
                                       "Module.2.Linear.forward.0"], names
        second = read_dump_file(tmp_path / "dump" / "step1" / "rank")["data"]
        assert second  # the original is still recorded in the next step


def test_the_saved_file_loads_after_the_debugger_is_gone(tmp_path):
    model = make_model()
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), level="mix")
    debugger.start(model)
    path = tmp_path / "model.pt"
    torch.save(model, path)
    debugger.stop()
    debugger._release()
    data = path.read_bytes()
    loaded = load(data)
    assert hooks_of(loaded) == 0
    assert torch.equal(loaded(torch.ones(1, 4)), model(torch.ones(1, 4)))
    assert "__getstate__" not in nn.Module.__dict__ or nn.Module.__getstate__.__module__.startswith("torch")
