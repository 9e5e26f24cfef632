"""Real mixed precision on the CPU: torch.autocast("cpu", dtype=torch.float16) and torch's own
GradScaler("cpu"), as fp16 trainers write them on PyTorch 2.x. (PyTorch 1.13's GradScaler runs on
CUDA only; its protocol is proved there with models.DynamicLossScaler, in test_loss_scaler.py.)"""
import math
import re
from typing import List, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from models import make_batches, make_model, make_optimizer

_MAJOR_MINOR = tuple(int(v) for v in re.findall(r"\d+", torch.__version__)[:2])
pytestmark = pytest.mark.skipif(
    _MAJOR_MINOR < (2, 3),
    reason="torch.amp.GradScaler('cpu') arrived in PyTorch 2.3 (1.13's GradScaler needs CUDA)")


def skip_lines(err: str) -> List[int]:
    return [int(m) for m in re.findall(r"msprobe_cpp: step (\d+): gradients overflowed at scale \S+; "
                                       r"the loss scaler skipped the step", err)]


def amp_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def amp_batches(n: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 16, generator=g) * 5, torch.randint(0, 4, (8,), generator=g)) for _ in range(n)]


def train_amp(model: nn.Module, dbg, steps: int, set_to_none: bool) -> Tuple[List[float], List[int]]:
    """The standard fp16 loop; returns the losses and the steps whose scale the scaler lowered."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24)
    losses, skipped = [], []
    for i, (x, y) in enumerate(amp_batches(steps)):
        if dbg is not None:
            dbg.start(model)  # the GradScaler is found by itself
        opt.zero_grad(set_to_none=set_to_none)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() < before:
            skipped.append(i)
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.item())
    return losses, skipped


@pytest.mark.parametrize("level", ["L1", "mix"])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_grad_scaler_skips_are_one_line_each_and_training_is_unchanged(tmp_path, capfd, level, set_to_none):
    ref_losses, ref_skipped = train_amp(amp_mlp(), None, 16, set_to_none)
    capfd.readouterr()
    seen = []
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), level=level,
                                        overflow_nums=-1, on_overflow=seen.append)
    losses, skipped = train_amp(amp_mlp(), dbg, 16, set_to_none)
    assert losses == ref_losses and skipped == ref_skipped
    assert len(skipped) >= 5 and skipped[:5] == list(range(5)) and len(skipped) < 16
    assert skip_lines(capfd.readouterr().err) == skipped
    assert seen == [] and dbg.overflow is None
    assert not (tmp_path / "dump").exists()  # neither the skips nor the steps after them


def test_a_gpt_under_fp16_autocast_is_stopped_at_the_overflowing_op(tmp_path):
    """The attention scores are float16 under autocast; one block scales them past 65504."""
    model = make_model("gpt", inject=lambda i, att: att * 1e6 if i == 2 else att)
    opt = make_optimizer(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    x, y = make_batches(model, 1)[0]
    dbg.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, model.vocab).float(), y.view(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
    e = info.value
    assert (e.step, e.origin, e.level) == (0, "op", "critical")
    assert e.call.startswith("Tensor.__mul__.") and e.module == "Module.blocks.2.attn.CausalSelfAttention.forward.0"
    out = e.tensors[-1]
    assert out["dtype"] == "torch.float16" and out["posinf"] + out["neginf"] > 0
    assert "test_amp.py" in (e.source or "")


def test_autocast_casts_are_recorded_without_changing_training(tmp_path):
    """Under autocast the casts are PyTorch's own, inside the ops: the losses are the same with
    and without the tool, at every level."""
    ref, _ = train_amp(amp_mlp(), None, 3, True)
    for level in ("L0", "mix", "L1"):
        dbg = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(tmp_path / level), level=level,
                                            step=[0, 1, 2])
        losses, _ = train_amp(amp_mlp(), dbg, 3, True)
        assert losses == ref, level
        assert all(math.isfinite(v) for v in losses)
