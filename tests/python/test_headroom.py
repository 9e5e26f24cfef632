"""Headroom warnings (overflow_check.headroom): a float16/bfloat16 call site whose largest magnitude
reaches a share of its dtype's range is said once, before it overflows; a stop at a site with a
history shows its last steps and whether they grew steadily or jumped."""
import re
from typing import Callable, List, Optional

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from dumps import guard, report


class Scaled(nn.Module):
    """An activation kept in `dtype` whose scale drifts with the step, as a diverging run's does."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)
        self.dtype = dtype
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x))
        h = (h / h.abs().max()).to(self.dtype)  # largest magnitude 1: the scale alone moves it
        h = h * self.scale  # the site that grows
        return self.head(h.float() / max(self.scale, 1.0))


def run(tmp_path, scales: Callable[[int], float], steps: int, dtype: torch.dtype = torch.float16,
        **kw) -> "tuple[Optional[msprobe_cpp.OverflowError], msprobe_cpp.PrecisionDebugger]":
    torch.manual_seed(0)
    model = Scaled(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    dbg = guard(tmp_path, "L1", **kw)
    x = torch.ones(16, 8)
    for step in range(steps):
        model.scale = scales(step)
        dbg.start(model)
        try:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        except msprobe_cpp.OverflowError as e:
            return e, dbg
        finally:
            dbg.stop()
            dbg.step()
    return None, dbg


def warnings(err: str) -> List[str]:
    return [line for line in err.splitlines() if "of float16's range" in line or "of bfloat16's range" in line]


def growing(step: int) -> float:
    return 6550.0 * 1.5 ** step  # ~10% of float16's range at step 0, x1.5 a step: inf at step 6


def test_steady_growth_is_said_once_before_it_overflows(tmp_path, capfd):
    e, dbg = run(tmp_path, growing, steps=10)
    assert e is not None and e.call.startswith("Tensor.__mul__.") and e.step == 6
    said = warnings(capfd.readouterr().err)
    assert len(said) == 1
    m = re.match(r"msprobe_cpp: step (\d+): Tensor\.__mul__ \(.*test_headroom\.py:\d+: h = h \* self\.scale.*\) "
                 r"reached (\d+)% of float16's range \(max [\d.]+\); it overflows if it doubles$", said[0])
    assert m, said[0]
    assert int(m.group(1)) == 4 and int(m.group(1)) < e.step and int(m.group(2)) >= 50
    # The stop shows the site's last steps, oldest first, as steady growth.
    history = [line for line in str(e).splitlines() if line.startswith("  history: ")]
    assert len(history) == 1
    assert history[0].startswith("  history: step 0 10%, step 1 15%, step 2 22%, step 3 34%, step 4 51%, step 5 76%")
    assert "of float16's range: grew steadily: x1.50 a step, a doubling every 1.7 steps" in history[0]
    first = report(tmp_path, 6)["first_anomaly"]["history"]
    assert [p["step"] for p in first["steps"]] == [0, 1, 2, 3, 4, 5] and first["dtype"] == "torch.float16"
    assert first["trend"].startswith("grew steadily")
    [site] = dbg.headroom
    assert site["site"].startswith("Tensor.__mul__ (") and site["dtype"] == "torch.float16"
    assert [p["step"] for p in site["history"]] == [0, 1, 2, 3, 4, 5]
    assert site["history"][4]["fraction"] == pytest.approx(0.506, abs=0.01)


def test_a_one_step_jump_is_a_jump(tmp_path, capfd):
    e, _ = run(tmp_path, lambda step: 3300.0 if step < 4 else 3e6, steps=6)
    assert e is not None and e.step == 4
    history = [line for line in str(e).splitlines() if line.startswith("  history: ")][0]
    assert history.startswith("  history: step 0 5%, step 1 5%, step 2 5%, step 3 5% of float16's range: ")
    assert history.endswith("jumped in one step: from 5% of float16's range at step 3 to overflow (what changed in that step: its data, the learning rate, or the update before it)")
    assert warnings(capfd.readouterr().err) == []  # never near the range before the jump


def test_headroom_0_says_nothing(tmp_path, capfd):
    e, dbg = run(tmp_path, growing, steps=10, headroom=0)
    assert e is not None and e.step == 6
    assert warnings(capfd.readouterr().err) == [] and dbg.headroom == []
    assert "history:" not in str(e) and "history" not in report(tmp_path, 6)["first_anomaly"]


def test_float32_training_says_nothing(tmp_path, capfd):
    e, dbg = run(tmp_path, growing, steps=10, dtype=torch.float32)
    assert e is None
    assert warnings(capfd.readouterr().err) == [] and dbg.headroom == []


def test_bfloat16_has_its_own_range(tmp_path, capfd):
    e, dbg = run(tmp_path, lambda step: 1.75e38 if step == 2 else 1.0, steps=4, dtype=torch.bfloat16)
    assert e is None  # 1.75e38 is over half of bfloat16's largest value, not an overflow
    said = warnings(capfd.readouterr().err)
    assert len(said) == 1 and "step 2: " in said[0] and "of bfloat16's range" in said[0]
    assert dbg.headroom[0]["dtype"] == "torch.bfloat16"
