"""Loss scalers: a step whose gradients overflowed at a high loss scale is the scaler's to skip,
not a stop. Proved on the CPU with a small dynamic loss scaler written here (PyTorch 1.13's
GradScaler needs CUDA), and with torch's GradScaler where CUDA is available."""
import math
import re
from typing import List

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dumps import steps_on_disk
from models import BIG_INPUT_LR, DynamicLossScaler, SqrtParamNet, big_input_batches, big_input_mlp


def train_scaled(model, scaler, dbg, steps: int, loss_fn=None) -> List[float]:
    opt = torch.optim.SGD(model.parameters(), lr=BIG_INPUT_LR)
    losses = []
    for i, (x, y) in enumerate(big_input_batches(steps)):
        dbg.start(model, loss_scaler=scaler)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y) if loss_fn else F.cross_entropy(model(x), y)
        scaler.scale_loss(loss).backward()
        scaler.step(opt, i)
        dbg.stop()
        dbg.step()
        losses.append(loss.item())
    return losses


def skip_lines(err: str) -> List[int]:
    return [int(m) for m in re.findall(r"msprobe_cpp: step (\d+): gradients overflowed at scale \S+; "
                                       r"the loss scaler skipped the step", err)]


@pytest.mark.parametrize("dump_skipped", [False, True])
def test_skipped_steps_are_reported_not_stopped(tmp_path, capfd, dump_skipped):
    model = big_input_mlp()
    scaler = DynamicLossScaler(2.0 ** 126)
    seen = []
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump", overflow_nums=-1,
                                        dump_skipped_steps=dump_skipped, on_overflow=seen.append)
    losses = train_scaled(model, scaler, dbg, 24)
    assert seen == []  # a skipped step is the scaler's business, not an overflow
    skipped = scaler.skipped
    assert len(skipped) >= 5 and skipped == list(range(len(skipped))), skipped
    assert len(skipped) < 24 and scaler.scale < 2.0 ** 126
    assert all(math.isfinite(l) for l in losses)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert skip_lines(capfd.readouterr().err) == skipped
    assert steps_on_disk(tmp_path) == (sorted(f"step{i}" for i in skipped) if dump_skipped else [])
    assert dbg.overflow is None


def test_a_scale_below_min_loss_scale_stops(tmp_path, capfd):
    """sqrt of a zero parameter: the gradient is inf at any scale; the scaler halves it in vain."""
    torch.manual_seed(0)
    model = SqrtParamNet()
    scaler = DynamicLossScaler(8.0)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump")
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train_scaled(model, scaler, dbg, 8, loss_fn=lambda m, x, y: m(x[:, :4] * 1e-6).pow(2).sum())
    e = info.value
    assert e.step == 3 and scaler.skipped == [0, 1, 2, 3]
    assert (e.call, e.origin) == ("Torch.sqrt.0.backward", "op")
    assert "below min_loss_scale 1.0" in str(e) and "the gradients overflow even unscaled" in e.note
    assert skip_lines(capfd.readouterr().err) == [0, 1, 2]
    assert steps_on_disk(tmp_path) == ["step3"]


def test_a_scaler_that_misses_the_overflow_is_stopped(tmp_path):
    torch.manual_seed(0)
    model = big_input_mlp()
    scaler = DynamicLossScaler(2.0 ** 126, halve=False)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump")
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train_scaled(model, scaler, dbg, 4)
    e = info.value
    assert e.step == 0 and e.origin == "op" and e.call.endswith(".backward")
    assert "the loss scaler missed these non-finite gradients" in e.note
    assert e.gradients  # the parameters it reached
    assert steps_on_disk(tmp_path) == ["step0"]


def test_forward_anomalies_are_judged_as_usual_in_a_scaled_step(tmp_path):
    model = big_input_mlp()
    scaler = DynamicLossScaler(4.0)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump")
    x, _ = big_input_batches(1)[0]
    x[0, 0] = float("inf")
    dbg.start(model, loss_scaler=scaler)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        model(x)
    assert info.value.origin == "input" and info.value.step == 0


def _grad_scaler_class():
    return getattr(getattr(torch, "amp", None), "GradScaler", None) or torch.cuda.amp.GradScaler


class CpuGradScaler(_grad_scaler_class()):
    """torch's GradScaler, its scale() and bookkeeping redone on the CPU: what the debugger finds
    by itself is the call to the GradScaler class's own scale()."""

    def __init__(self, scale: float) -> None:
        super().__init__(enabled=False)
        self.cpu_scale = scale
        self.skipped: List[int] = []

    def is_enabled(self) -> bool:
        return True

    def get_scale(self) -> float:
        return self.cpu_scale

    def scale(self, outputs):  # type: ignore[override]
        return super().scale(outputs) * self.cpu_scale


def test_a_torch_grad_scaler_is_found_by_itself(tmp_path, capfd):
    cls = _grad_scaler_class()
    original = cls.scale
    model = big_input_mlp()
    scaler = CpuGradScaler(2.0 ** 126)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump")
    assert cls.scale is original  # nothing is patched before start()
    opt = torch.optim.SGD(model.parameters(), lr=BIG_INPUT_LR)
    for i, (x, y) in enumerate(big_input_batches(20)):
        dbg.start(model)  # no loss_scaler=: found through scale()
        assert cls.scale is not original
        opt.zero_grad(set_to_none=True)
        scaler.scale(F.cross_entropy(model(x), y)).backward()
        grads = [p.grad for p in model.parameters()]
        if all(bool(torch.isfinite(g).all()) for g in grads):
            for g in grads:
                g.div_(scaler.cpu_scale)
            opt.step()
        else:
            scaler.skipped.append(i)
            scaler.cpu_scale *= 0.5
        dbg.stop()
        dbg.step()
    assert len(scaler.skipped) >= 5
    assert skip_lines(capfd.readouterr().err) == scaler.skipped
    dbg._release()
    assert cls.scale is original


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's GradScaler runs on CUDA here")
def test_the_real_grad_scaler_on_cuda(tmp_path, capfd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
    if _grad_scaler_class() is torch.cuda.amp.GradScaler:  # PyTorch < 2.3
        scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 40)
    else:
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 40)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump")
    scales, losses = [], []
    for i, (x, y) in enumerate(big_input_batches(40)):
        x, y = (x * 1e-4).cuda(), y.cuda()
        dbg.start(model)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        dbg.stop()
        dbg.step()
        scales.append(scaler.get_scale())
        losses.append(loss.item())
    skipped = [i for i in range(1, len(scales)) if scales[i] < scales[i - 1]]
    assert scales[-1] < 2.0 ** 40 and math.isfinite(losses[-1])
    assert len(skip_lines(capfd.readouterr().err)) >= len(skipped) >= 1
    assert steps_on_disk(tmp_path) == []


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_loss_scaler_under_another_task_is_only_read(tmp_path, task):
    # start(loss_scaler=...) is accepted under every task; only overflow_check judges the scale.
    scaler = DynamicLossScaler(1024.0)
    model = nn.Linear(2, 2)
    dbg = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(tmp_path / "dump"), level="L1", step=[0, 1])
    for _ in range(2):
        dbg.start(model, loss_scaler=scaler)
        model(torch.ones(1, 2)).sum().backward()
        scaler.scale /= 2  # as after a skipped step: no stop, no line, no crash
        dbg.stop()
        dbg.step()
    assert steps_on_disk(tmp_path) == ["step0", "step1"]
