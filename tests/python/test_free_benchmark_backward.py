"""free_benchmark with fuzz_stage backward: a selected call's inputs that need a gradient are
copied at its forward; when its output's gradient arrives, the call is run again on the copies,
as is and perturbed, and the two gradients of each input compared (msprobe 1.1.1's GradSaver,
whose second pass decides its rows). The program's gradients and training are left as they are."""
import csv
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from gloo import free_port
from testenv import PACKAGE_ROOT, devices

MODES = ["improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu"]


def config(tmp_path: pathlib.Path, mode: str, **section) -> pathlib.Path:
    path = tmp_path / f"config_{mode}.json"
    fb = {"pert_mode": mode, "fuzz_device": "cpu" if mode == "to_cpu" else "npu", "fuzz_stage": "backward"}
    fb.update(section)
    path.write_text(json.dumps({"task": "free_benchmark", "dump_path": str(tmp_path / f"dump_{mode}"),
                                "level": "L1", "free_benchmark": fb}))
    return path


def rows(tmp_path: pathlib.Path, mode: str):
    path = tmp_path / f"dump_{mode}" / "free_benchmark.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def steps(model: nn.Module, debugger, n: int, device: str):
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    losses, grads = [], []
    for _ in range(n):
        x = torch.randn(8, 6, generator=g).to(device)
        if debugger is not None:
            debugger.start(model)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    return losses, grads, {k: v.clone() for k, v in model.state_dict().items()}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.drop(h)
        h = h * torch.sigmoid(h)
        return torch.exp(self.fc2(h) * 0.1)


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("mode", MODES)
def test_backward_checks_leave_gradients_and_training_as_they_are(tmp_path, device, mode):
    torch.manual_seed(0)
    bare = steps(Net().to(device), None, 3, device)
    torch.manual_seed(0)
    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(config(tmp_path, mode)))
    checked = steps(Net().to(device), debugger, 3, device)
    assert checked[0] == bare[0]  # losses, bit for bit
    for a, b in zip(checked[1], bare[1]):  # the gradients the optimizer saw
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert all(torch.equal(checked[2][k], bare[2][k]) for k in bare[2])
    debugger._release()


def exp_case(debugger, dtype=torch.float32):
    debugger.start()
    x = torch.tensor([[0.5, 1.0], [2.0, 3.0]], dtype=dtype, requires_grad=True)
    torch.exp(x).sum().backward()
    a = torch.tensor([[0.5, 1, 2], [2, 3, 4]], dtype=dtype, requires_grad=True)
    w = torch.tensor([[0.5, -1], [2, 0.25], [1, 1]], dtype=dtype, requires_grad=True)
    torch.matmul(a, w).sum().backward()
    debugger.stop()
    debugger.step()
    return x.grad, a.grad, w.grad


def test_change_value_flags_each_input_whose_gradient_it_moves(tmp_path):
    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(config(tmp_path, "change_value")))
    grads = exp_case(debugger)
    debugger._release()
    found = {(r["api_name"], r["output_index"]): r for r in rows(tmp_path, "change_value")}
    # exp's input gradient is exp(x): swapping x[0][0] and x[-1][-1] moves it by e^2.5.
    exp_row = found[("Torch.exp.0.backward", "0")]
    assert exp_row["stage"] == "backward" and exp_row["step"] == "0" and exp_row["dtype"] == "torch.float32"
    assert exp_row["shape"] == "torch.Size([2, 2])"
    assert math.isclose(float(exp_row["max_rel"]), math.exp(2.5) - 1, rel_tol=1e-5)
    # matmul: the swap in its first input moves w's gradient (input 1), not a's (which is 1 @ w.T).
    assert ("Torch.matmul.0.backward", "1") in found
    assert ("Torch.matmul.0.backward", "0") not in found
    # The program's own gradients are exp(x) and the usual matmul ones.
    x = torch.tensor([[0.5, 1.0], [2.0, 3.0]])
    assert torch.equal(grads[0], torch.exp(x))


def test_scope_names_the_backward_call(tmp_path):
    path = config(tmp_path, "change_value", scope=["Torch.matmul.0.backward"])
    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    exp_case(debugger)
    debugger._release()
    assert {r["api_name"] for r in rows(tmp_path, "change_value")} == {"Torch.matmul.0.backward"}
    # A forward name selects nothing at this stage, as in msprobe.
    path = config(tmp_path, "no_change", scope=["Torch.exp.0.forward"])
    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    exp_case(debugger)
    debugger._release()
    assert rows(tmp_path, "no_change") == []


def test_float32_calls_are_consistent_under_add_noise_and_improve_precision(tmp_path):
    for mode in ("add_noise", "improve_precision", "no_change"):
        debugger = msprobe_cpp.PrecisionDebugger(config_path=str(config(tmp_path, mode)))
        exp_case(debugger)
        debugger._release()
        assert rows(tmp_path, mode) == [], mode


def test_a_call_without_inputs_that_need_a_gradient_is_not_kept(tmp_path):
    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(config(tmp_path, "change_value")))
    debugger.start()
    with torch.no_grad():
        torch.exp(torch.tensor([[0.5, 1.0], [2.0, 3.0]]))
    torch.exp(torch.tensor([[0.5, 1.0], [2.0, 3.0]]))  # no input needs a gradient
    debugger.stop()
    debugger.step()
    debugger._release()
    assert rows(tmp_path, "change_value") == []


MSPROBE_CASE = r"""
import json, os, sys, torch, torch.distributed as dist
tool, out, mode = sys.argv[1:4]
os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = sys.argv[4]
dist.init_process_group("gloo", rank=0, world_size=1)
cfg = {"task": "free_benchmark", "dump_path": out, "rank": [], "step": [], "level": "L1",
       "free_benchmark": {"pert_mode": mode, "fuzz_device": "cpu" if mode == "to_cpu" else "npu",
                          "fuzz_stage": "backward"}}
open(out + ".json", "w").write(json.dumps(cfg))
if tool == "msprobe":
    from msprobe.pytorch import PrecisionDebugger
else:
    from msprobe_cpp import PrecisionDebugger
d = PrecisionDebugger(config_path=out + ".json")
for step in range(2):
    d.start()
    x = torch.tensor([[0.5, 1], [2, 3]], dtype=torch.float16, requires_grad=True)
    torch.exp(x).sum().backward()
    a = torch.tensor([[0.5, 1, 2], [2, 3, 4]], dtype=torch.float16, requires_grad=True)
    w = torch.tensor([[0.5, -1], [2, 0.25], [1, 1]], dtype=torch.float16, requires_grad=True)
    torch.matmul(a, w).sum().backward()
    d.stop(); d.step()
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="msprobe 1.1.1 needs torch 2")
@pytest.mark.parametrize("mode", MODES)
def test_backward_rows_equal_msprobes(tmp_path, mode):
    pytest.importorskip("msprobe")
    script = tmp_path / "case.py"
    script.write_text(MSPROBE_CASE)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
    files = {}
    for i, tool in enumerate(("msprobe", "ours")):
        out = tmp_path / tool
        for _ in range(3):  # a free port can be taken before the case binds it (another worker's run)
            done = subprocess.run([sys.executable, str(script), tool, str(out), mode, str(free_port())], env=env,
                                  capture_output=True, text=True, timeout=120)
            if "EADDRINUSE" not in done.stderr:
                break
        assert done.returncode == 0, done.stderr[-3000:]
        csv_path = out / "free_benchmark.csv"
        files[tool] = csv_path.read_bytes() if csv_path.exists() else b""
    assert files["ours"] == files["msprobe"]
    if mode == "change_value":  # the case has rows: a comparison of nothing would prove nothing
        assert files["ours"].count(b"\r\n") == 5
