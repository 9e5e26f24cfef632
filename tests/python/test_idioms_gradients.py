"""Gradients left by a step that a loss scaler skipped, or that the program caught a stop in, and
a dump that cannot be written: the live guard on everyday training loops (see test_idioms.py)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dumps import LEVELS, dumped_steps, guard
from models import (BIG_INPUT_LR, DynamicLossScaler, TabularNet, big_input_batches, big_input_mlp, tabular_batches,
                    train_tabular)


# --- gradients left by a skipped step ---------------------------------------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_a_loss_scaled_run_zeroing_gradients_in_place_trains_on_after_its_skips(tmp_path, capfd, level):
    model = big_input_mlp()
    scaler = DynamicLossScaler(2.0 ** 126)
    dbg = guard(tmp_path, level, overflow_nums=-1)
    opt = torch.optim.SGD(model.parameters(), lr=BIG_INPUT_LR)
    losses = []
    for i, (x, y) in enumerate(big_input_batches(20)):
        dbg.start(model, loss_scaler=scaler)
        opt.zero_grad(set_to_none=False)  # the skipped steps' inf gradients are zeroed in place
        loss = F.cross_entropy(model(x), y)
        scaler.scale_loss(loss).backward()
        scaler.step(opt, i)
        dbg.stop()
        dbg.step()
        losses.append(loss.item())
    skipped = scaler.skipped
    assert len(skipped) >= 3 and skipped == list(range(len(skipped))), skipped
    assert len(skipped) < 20
    assert all(math.isfinite(l) for l in losses)
    assert dumped_steps(tmp_path) == []  # neither the skips nor the steps after them
    assert "overflow at step" not in capfd.readouterr().err


class SqrtOfWeight(nn.Module):
    """sqrt of a parameter that reaches 0: its gradient is not finite there (a backward op origin).
    The second, weightless term makes it NaN rather than a lone -inf, which could pass for a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x * torch.sqrt(self.w)) + 0.0 * torch.sqrt(self.w).sum()


@pytest.mark.parametrize("level", LEVELS)
def test_gradients_of_a_caught_stop_are_zeroed_in_place_without_a_second_stop(tmp_path, level):
    torch.manual_seed(0)
    model = SqrtOfWeight()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dbg = guard(tmp_path, level, overflow_nums=-1)
    g = torch.Generator().manual_seed(0)
    stops = []
    for i in range(4):
        x, y = torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g)
        if i == 1:
            with torch.no_grad():
                model.w[2] = 0.0
        if i == 2:
            with torch.no_grad():
                model.w[2] = 1.0  # the user repaired the weight; its gradient still holds inf
        dbg.start(model)
        opt.zero_grad(set_to_none=False)
        try:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        except msprobe_cpp.OverflowError as e:
            stops.append((i, e.call.split(".")[1], e.origin))
            continue  # skip the batch; the gradients keep their NaN until the next zero_grad
        dbg.stop()
        dbg.step()
    assert stops == [(1, "sqrt", "op")]
    assert model.w.grad.isfinite().all()  # zeroed in place at step 2, then finite again
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert dumped_steps(tmp_path) == [1]


@pytest.mark.parametrize("level", LEVELS)
def test_accumulating_onto_a_skipped_steps_gradients_is_an_anomaly(tmp_path, level):
    """Without zero_grad the next backward adds onto the inf gradients: no recorded call of the step
    made them, so the stop comes before the optimizer writes them (issue 32: the optimizer-step
    check), with origin input, as any foreign NaN/inf."""
    torch.manual_seed(0)
    model = SqrtOfWeight()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dbg = guard(tmp_path, level, overflow_nums=-1)
    g = torch.Generator().manual_seed(0)
    stops = []
    for i in range(3):
        x, y = torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g)
        with torch.no_grad():
            model.w[2] = 0.0 if i == 0 else 1.0
        dbg.start(model)
        try:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        except msprobe_cpp.OverflowError as e:
            stops.append((i, e.origin, e.call, e.note))
            continue
        dbg.stop()
        dbg.step()
    assert [s[0] for s in stops][:2] == [0, 1], stops
    assert stops[1][1:3] == ("input", "(before SGD.step)")  # before SGD's update reads the gradient
    assert "the gradients of w hold NaN/inf that no recorded backward call of this step made: left by " \
           "an earlier step (zero them with optimizer.zero_grad())" in stops[1][3]


def test_a_dump_that_cannot_be_written_is_said_so(tmp_path, capfd):
    where = "/proc/msprobe_cpp_test_dump"
    try:
        dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=where)
    except msprobe_cpp.ConfigError:
        pytest.skip("this user may not even try /proc (the config check refuses it first)")
    torch.manual_seed(0)
    model = TabularNet(None)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train_tabular(model, dbg, tabular_batches(2, nan_at=(0,)))
    e = info.value
    assert e.dump_dir is None
    assert "dump:   not written: " + where in str(e)
    err = capfd.readouterr().err
    assert "  dump: not written: " + where in err
    assert f"dump:   {where}" not in str(e)
