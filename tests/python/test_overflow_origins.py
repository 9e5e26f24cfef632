"""Live overflow detection, second round: each unexplained NaN/inf stops at its origin (an op, the
batch, a parameter), backward anomalies stop only when they reach a parameter gradient, and the
guard keeps guarding after a caught stop."""
import math
from typing import List

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dumps import debugger, report, steps_on_disk, load as read_dump_file
from models import SqrtParamNet, fp16_overflow_at, make_batches, make_model, make_optimizer, run_steps, train_step


def nan_batch(x: torch.Tensor, count: int = 5) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[:count] = float("nan")
    return x


def test_nan_in_the_batch_stops_at_the_first_call_that_consumes_it(tmp_path):
    model = make_model("convnet")
    opt = make_optimizer(model)
    dbg = debugger(tmp_path)
    losses = []
    for i, (x, y) in enumerate(make_batches(model, 4)):
        dbg.start(model)
        if i == 2:
            with pytest.raises(msprobe_cpp.OverflowError) as info:
                model(nan_batch(x))  # out of model(x): the forward is where it is caught
            break
        losses.append(train_step(model, opt, x, y).item())
        dbg.stop()
        dbg.step()
    e = info.value
    assert all(math.isfinite(l) for l in losses) and len(losses) == 2
    assert (e.step, e.origin, e.parameter) == (2, "input", None)
    assert e.call == "Functional.conv2d.0.forward"
    assert e.input_args_anomaly_indices == [0]
    batch = e.tensors[0]
    assert (batch["position"], batch["dtype"], batch["shape"]) == ("input_args[0]", "torch.float32", [8, 3, 16, 16])
    assert (batch["nan"], batch["posinf"], batch["neginf"]) == (5, 0, 0)
    assert "origin: input" in str(e) and "input_args[0]: torch.float32 [8, 3, 16, 16]: 5 NaN" in str(e)
    assert e.module == "Module.conv1.Conv2d.forward.0"
    assert steps_on_disk(tmp_path) == ["step2"]
    first = report(tmp_path, 2)["first_anomaly"]
    assert (first["api_name"], first["origin"]) == (e.call, "input")
    assert first["tensors"][0]["nan"] == 5


def test_nan_parameter_stops_at_the_first_call_that_uses_it(tmp_path):
    model = make_model("mlp")
    opt = make_optimizer(model, "sgd")
    dbg = debugger(tmp_path)
    batches = make_batches(model, 4)
    for i, (x, y) in enumerate(batches[:2]):
        train_step(model, opt, x, y, dbg)
    with torch.no_grad():
        model.fc2.weight[3, 4] = float("nan")  # a bad update, a bad checkpoint
    x, y = batches[2]
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train_step(model, opt, x, y, dbg)
    e = info.value
    assert (e.step, e.origin, e.parameter) == (2, "parameter", "fc2.weight")
    assert e.call == "Functional.linear.1.forward"
    assert e.input_args_anomaly_indices == [1]
    assert e.tensors[0]["position"] == "input_args[1]" and e.tensors[0]["nan"] == 1
    assert "parameter fc2.weight was last written before this step began" in str(e)
    first = report(tmp_path, 2)["first_anomaly"]
    assert (first["origin"], first["parameter"]) == ("parameter", "fc2.weight")


@pytest.mark.parametrize("handler_calls_step", [False, True])
def test_a_caught_stop_keeps_guarding(tmp_path, handler_calls_step):
    model = make_model("mlp")
    opt = make_optimizer(model)
    seen: List[msprobe_cpp.Overflow] = []
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "dump", overflow_nums=-1,
                                        on_overflow=seen.append)
    stops, losses, overflow_after = [], [], []
    for i, (x, y) in enumerate(make_batches(model, 8)):
        if i in (3, 5):
            x = nan_batch(x)
        dbg.start(model)
        try:
            loss = train_step(model, opt, x, y)
        except msprobe_cpp.OverflowError as e:
            stops.append(e.step)
            overflow_after.append(dbg.overflow)
            if handler_calls_step:
                dbg.stop()
                dbg.step()
            continue  # skip the batch
        losses.append(loss.item())
        dbg.stop()
        dbg.step()
        overflow_after.append(dbg.overflow)
    assert stops == [3, 5]
    assert steps_on_disk(tmp_path) == ["step3", "step5"]  # no step number skipped or reused
    assert len(losses) == 6 and all(math.isfinite(l) for l in losses)
    assert [o.step for o in seen] == [3, 5] and all(o.origin == "input" for o in seen)
    assert [o is not None for o in overflow_after] == [False, False, False, True, False, True, False, False]
    assert overflow_after[3].call == "Functional.linear.0.forward"


def test_action_continue_calls_on_overflow_and_sets_debugger_overflow(tmp_path):
    model = make_model("mlp")
    opt = make_optimizer(model)
    seen = []
    dbg = debugger(tmp_path, action="continue")
    dbg._on_overflow = seen.append
    flags = []
    for i, (x, y) in enumerate(make_batches(model, 3)):
        dbg.start(model)
        loss = model(nan_batch(x) if i == 1 else x)
        flags.append(dbg.overflow is not None)  # set at the flagged call, in the step
        F.cross_entropy(loss, y).backward()
        opt.zero_grad()  # skip the step by hand
        dbg.stop()
        dbg.step()
    assert flags == [False, True, False]
    assert [o.step for o in seen] == [1] and seen[0].origin == "input"


class SqrtReluNet(nn.Module):
    """sqrt(relu(h)): its gradient is inf where relu is 0, and ReLU's backward zeroes those."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.sqrt(F.relu(self.fc1(x))))


def test_backward_overflow_masked_on_the_way_is_dumped_not_stopped(tmp_path):
    torch.manual_seed(0)
    model = SqrtReluNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dbg = debugger(tmp_path)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)
        losses.append(train_step(model, opt, x, y, dbg).item())
        assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(math.isfinite(l) for l in losses)
    assert steps_on_disk(tmp_path) == ["step0"]  # overflow_nums 1
    first = report(tmp_path, 0)["first_anomaly"]
    assert first["api_name"] == "Torch.sqrt.0.backward" and first["origin"] == "op"
    assert first["masked"] is True and first["note"] == "masked: reached no parameter gradient"
    assert first["gradients"] == []


def test_backward_overflow_reaching_a_parameter_raises_out_of_backward(tmp_path):
    torch.manual_seed(0)
    model = SqrtParamNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = debugger(tmp_path)
    dbg.start(model)
    loss = model(torch.randn(3, 4)).pow(2).sum()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        loss.backward()
        opt.step()  # never reached
    e = info.value
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert (e.call, e.origin, e.level) == ("Torch.sqrt.0.backward", "op", "critical")
    assert e.gradients == ["gain"]
    assert "non-finite gradients: gain" in str(e)
    assert e.source.endswith("return self.fc(x) * torch.sqrt(self.gain)")
    first = report(tmp_path, 0)["first_anomaly"]
    assert first["gradients"] == ["gain"] and first["masked"] is False


@pytest.mark.parametrize("mask_mode", ["masked_fill", "cat", "buffer"])
def test_causal_gpt_masks_stay_silent(tmp_path, mask_mode):
    dbg = debugger(tmp_path)
    losses = run_steps(make_model("gpt", mask_mode=mask_mode), 20, dbg)
    assert losses == run_steps(make_model("gpt", mask_mode=mask_mode), 20, None)
    assert not (tmp_path / "dump").exists()


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_the_report_alone_tells_the_story(tmp_path, level):
    model = make_model("gpt")
    on_step = fp16_overflow_at([1], block=2, model=model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run_steps(model, 3, debugger(tmp_path, level=level), on_step)
    e = info.value
    step = tmp_path / "dump" / "step1" / "rank"
    first = read_dump_file(step, "overflow_report.json")["first_anomaly"]
    assert first["api_name"] == e.call and first["origin"] == "op" and first["step"] == 1
    assert first["module"].startswith("Module.blocks.2.attn.CausalSelfAttention.forward.")
    assert first["source"].endswith("return (scores.half() * 1e5).float()")
    out = first["tensors"][0]
    assert out["position"] == "output[0]" and out["dtype"] == "torch.float16" and out["shape"] == [8, 4, 32, 32]
    assert out["nan"] == 0 and out["posinf"] > 0 and out["posinf"] + out["neginf"] == e.tensors[0]["posinf"] + e.tensors[0]["neginf"]
    # construct.json names each call's enclosing module, at L1 too (from the module stack).
    construct = read_dump_file(step, "construct.json")
    assert construct[e.call] == first["module"]
    assert construct["Functional.embedding.0.forward"] == "Module.tok_emb.Embedding.forward.0"
    assert construct["Torch.arange.0.forward"] is None  # outside every module


def test_the_summary_keeps_leads_apart_from_expected_findings(tmp_path, capfd):
    """A x1e6 multiply (finite, a numerical mutation) right before an fp16 cast that overflows:
    the multiply is the lead to the culprit, listed as one, not as an expected finding."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scores = self.fc(x)
            weights = F.softmax(scores.masked_fill(torch.eye(4, dtype=torch.bool)[:3], float("-inf")), -1)
            return (scores * 1e6).half().float() + weights

    torch.manual_seed(0)
    model = Net()
    x = torch.randn(3, 4) * 10
    dbg = debugger(tmp_path)
    dbg.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        model(x)
    assert info.value.call == "Tensor.half.0.forward"
    err = capfd.readouterr().err.splitlines()
    leads = [l for l in err if l.startswith("  leads (")]
    expected = [l for l in err if l.startswith("  expected (")]
    assert len(leads) == 1 and leads[0].endswith(": Tensor.__mul__.0.forward")
    assert len(expected) == 1 and "Tensor.masked_fill.0.forward" in expected[0]
    assert "Tensor.__mul__" not in expected[0]


def test_a_backward_stop_by_level_leaves_backward_with_its_type(tmp_path):
    """No origin stops (stop_on []), stop_level medium: the first backward call downstream of
    sqrt's inf gradient (ReLU's, which masks it) stops the run from inside the backward pass."""
    torch.manual_seed(0)
    model = SqrtReluNet()
    dbg = debugger(tmp_path, stop_on=[], stop_level="medium")
    dbg.start(model)
    loss = F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 4, (16,)))
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        loss.backward()
    e = info.value
    assert (e.call, e.level, e.origin) == ("Functional.relu.0.backward", "medium", None)
    assert e.input_args_anomaly_indices == [0] and e.tensors[0]["position"] == "input[0]"
    assert steps_on_disk(tmp_path) == ["step0"]
