"""The damage rule (docs/overflow-detection.md, "Stop where the damage starts"), on small models of
our own, each mechanism both ways: NaN/inf in a tensor that needs no gradient is held, and stops
only where it does damage (enters a tensor that requires grad, is written in place into an existing
tensor, reaches the started model's output), naming where it was made and where it was caught;
absorbed before that, it is told once per call site and training is untouched. Also: started
model names, nn.Parameters of modules not given to start(), and what an ignore-rule snippet says
it silences."""
import copy
import pathlib
from typing import List, Optional

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from testenv import devices
from dumps import load as read_dump_file

ABSORBED = "no stop (said once per call site)"


class Buckets(nn.Module):
    """T5's relative-position buckets in small: log(0) on purpose, cast to long, thrown away."""

    def __init__(self, poison: Optional[str] = None) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.emb = nn.Embedding(16, 4)
        self.register_buffer("acc", torch.zeros(4))
        self.poison = poison  # None, "grad", "buffer": where step POISON_STEP sends the -inf
        self.poison_now = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rel = torch.arange(4, device=x.device)
        large = torch.log(rel.float() / 2) * 3  # -inf at 0, in a tensor that needs no gradient
        buckets = torch.where(rel < 2, rel, large.to(torch.long).clamp(0, 15))
        h = self.fc(x) + self.emb(buckets)
        if self.poison_now and self.poison == "grad":
            h = h + large  # enters a tensor that requires grad: damage
        if self.poison_now and self.poison == "buffer":
            with torch.no_grad():
                self.acc.add_(large)  # written in place into a buffer: damage
        return h.pow(2).mean()


POISON_STEP = 2


def train(model: nn.Module, dbg=None, steps: int = 4, device: str = "cpu"):
    torch.manual_seed(0)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses: List[float] = []
    for i in range(steps):
        x = torch.randn(4, 4, device=device)
        if dbg is not None:
            dbg.start(model)
        model.poison_now = i == POISON_STEP
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if dbg is not None:
            dbg.stop()
            dbg.step()
    if dbg is not None and hasattr(dbg, "drain"):
        dbg.drain()  # async_dump: the steps' files on disk for the caller
    return losses, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def steps_on_disk(dump: pathlib.Path) -> List[str]:
    return sorted(p.name for p in dump.iterdir()) if dump.exists() else []


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_nan_inf_that_needs_no_gradient_and_is_cast_away_is_told_once_not_a_stop(tmp_path, capfd, device, level):
    torch.manual_seed(1)
    model = Buckets()
    init = copy.deepcopy(model.state_dict())
    losses0, state0 = train(model, device=device)
    model.load_state_dict(init)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), level=level)
    losses, state = train(model, dbg, device=device)
    assert losses == losses0
    assert all(torch.equal(state[k], state0[k]) for k in state0)
    told = [line for line in capfd.readouterr().err.splitlines() if ABSORBED in line]
    assert len(told) == 1 and "Torch.log.0.forward" in told[0] and "need no gradient" in told[0], told
    assert steps_on_disk(tmp_path / "d") == ["step0"]  # flagged once, within overflow_nums
    report = read_dump_file(tmp_path / "d" / "step0" / "rank", "overflow_report.json")
    first = report["first_anomaly"]
    assert (first["api_name"], first["origin"], first["held"], first["absorbed"], first["caught"]) == (
        "Torch.log.0.forward", "op", True, True, None)


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("poison, how", [("grad", "entered a tensor that requires grad"),
                                         ("buffer", "was written in place into an existing tensor")])
def test_held_nan_inf_stops_where_it_does_damage_naming_where_it_was_made(tmp_path, device, poison, how):
    torch.manual_seed(1)
    model = Buckets(poison)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), level="L1")
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train(model, dbg, device=device)
    e = info.value
    assert e.step == POISON_STEP
    # The op that made it (this step's log), and the call where it did damage.
    assert (e.call, e.origin) == ("Torch.log.0.forward", "op"), str(e)
    want = "Tensor.__add__.1.forward" if poison == "grad" else "Tensor.add_.0.forward"
    assert e.caught == want and e.caught_how == how, str(e)
    assert f"caught: at {want}, where the NaN/inf {how}" in str(e)
    assert "module: the started model Buckets's own forward" in str(e)
    report = read_dump_file(pathlib.Path(e.dump_dir), "overflow_report.json")
    assert report["first_anomaly"]["caught"] == {"call": want, "how": how}
    if poison == "buffer":
        assert not model.acc.isfinite().all()  # the write happened: the stop comes right after it


def test_a_log_whose_input_requires_grad_stops_where_it_is_made_though_where_drops_it(tmp_path):
    """torch.where(m, torch.log(x), 0): the dropped branch's -inf still gives NaN gradients, so a
    tensor that requires grad stops at the op that made it, as before."""
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    dbg.start()
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        torch.where(x > 0, torch.log(x), torch.zeros_like(x))
    assert (info.value.call, info.value.origin, info.value.caught) == ("Torch.log.0.forward", "op", None)


def test_nan_data_cleaned_outside_the_model_is_caught_at_the_first_layer(tmp_path):
    """Data normalised before the model (no gradient): the NaN is held, the stop comes where it
    enters the model's computation, origin input, naming the call that first saw it."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    x[1, 2] = float("nan")
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    dbg.start(model)
    z = (x - 1.0) / 2.0  # held: no gradient yet
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        model(z)
    e = info.value
    assert (e.call, e.origin, e.caught) == ("Tensor.__sub__.0.forward", "input", "Functional.linear.0.forward"), str(e)


def test_a_nan_metric_under_no_grad_is_told_not_a_stop(tmp_path, capfd):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    for _ in range(2):
        dbg.start(model)
        loss = model(torch.randn(3, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            hits = torch.zeros(2)
            rate = hits.sum() / hits.numel() * 0.0 / hits.sum()  # 0/0: a metric of nothing
        assert rate.isnan()
        dbg.stop()
        dbg.step()
    told = [line for line in capfd.readouterr().err.splitlines() if ABSORBED in line]
    assert len(told) == 1 and "Tensor.__truediv__" in told[0], told


def test_held_nan_that_reaches_the_started_models_output_stops_there_in_eval(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    x = torch.randn(3, 4)
    x[0, 0] = float("nan")
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    dbg.start(model)
    with torch.no_grad(), pytest.raises(msprobe_cpp.OverflowError) as info:
        model(x)
    e = info.value
    assert (e.call, e.origin) == ("Functional.linear.0.forward", "input"), str(e)
    assert e.caught == "Module.Sequential.forward.0" and e.caught_how == "reached the output of the started model Sequential"


def test_a_loss_made_in_the_started_models_own_forward_stops_at_l0(tmp_path):
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x, y):
            logits = self.fc(x)
            return {"loss": nn.functional.cross_entropy(logits, y, ignore_index=-100), "logits": logits}

    torch.manual_seed(0)
    model = WithLoss()
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), level="L0")
    dbg.start(model)
    model(torch.randn(2, 4), torch.tensor([0, 1]))  # clean: no stop
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        model(torch.randn(2, 4), torch.tensor([-100, -100]))  # every label ignored: 0/0
    e = info.value
    assert e.origin == "op" and e.call.startswith("Module.WithLoss.forward."), str(e)
    assert "made by the code of the started model WithLoss's own forward" in str(e)
    assert "intended?" not in str(e)  # no rule applies to a call that is not recorded


def test_an_nn_parameter_of_a_module_not_given_to_start_is_origin_input(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    ema = copy.deepcopy(model)
    with torch.no_grad():
        ema.weight[0, 0] = float("nan")
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    dbg.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        ema(torch.randn(3, 4))
    e = info.value
    assert (e.call, e.origin, e.parameter) == ("Functional.linear.0.forward", "input", None), str(e)
    assert "an nn.Parameter of a module not given to start()" in e.note


def test_a_module_snippet_says_what_else_it_silences(tmp_path):
    class Scale(nn.Module):
        def forward(self, x):
            return x * 1e39  # float32 overflow, made by this module's own code

    model = nn.Sequential(nn.Linear(4, 4), Scale())
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), level="L0")
    dbg.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        model(torch.ones(2, 4))
    e = info.value
    assert e.call == "Module.1.Scale.forward.0" and e.origin == "op", str(e)
    assert 'api_name: "module.1"' in str(e)
    assert "it silences every module call named Module.1.*" in str(e)


def test_an_api_snippet_says_it_silences_every_call_of_the_api(tmp_path):
    x = torch.zeros(3, requires_grad=True)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    dbg.start()
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        torch.log(x)
    assert "it silences every Torch.log call in the model whose output[0] holds NaN/inf" in str(info.value)


def test_mappings_are_recorded_as_msprobe_records_them(tmp_path):
    """A dict, a dataclass (Hugging Face's ModelOutput is one; every field, None ones too) and a
    namedtuple: JSON objects of their fields, their tensors saved as <call>.output.0.<field>.pt."""
    import collections
    import dataclasses

    Pair = collections.namedtuple("Pair", ["a", "b"])

    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        loss: Optional[torch.Tensor] = None

    class Mappings(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = nn.Identity()

        def forward(self, x):
            return {"x": x, "n": None}, Out(logits=x * 2), Pair(a=x, b=3)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = Mappings()

        def forward(self, x):
            return self.m(x)

    dbg = msprobe_cpp.PrecisionDebugger(task="tensor", dump_path=str(tmp_path / "d"), level="L0")
    net = Net()
    dbg.start(net)
    net(torch.ones(2))
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    rank = tmp_path / "d" / "step0" / "rank"
    out = read_dump_file(rank)["data"]["Module.m.Mappings.forward.0"]["output"]
    assert [sorted(o) for o in out] == [["n", "x"], ["logits", "loss"], ["a", "b"]]
    assert out[0]["n"] is None and out[1]["loss"] is None and out[2]["b"] == {"type": "int", "value": 3}
    assert out[1]["logits"]["type"] == "torch.Tensor" and out[1]["logits"]["Max"] == 2.0
    assert out[1]["logits"]["data_name"] == "Module.m.Mappings.forward.0.output.1.logits.pt"
    assert (rank / "dump_tensor_data" / "Module.m.Mappings.forward.0.output.1.logits.pt").is_file()


def test_the_source_line_of_a_stop_inside_torchvision_is_torchvisions(tmp_path):
    """Only torch's own folder is skipped when looking for the user's line: torch's folder is a
    prefix of torchvision's, and torchvision's code is what the user runs."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=4)
    with torch.no_grad():
        model.layer1[0].conv2.weight[0, 0, 0, 0] = float("nan")
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"))
    dbg.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        model(torch.randn(1, 3, 32, 32))
    e = info.value
    assert (e.origin, e.parameter) == ("parameter", "layer1.0.conv2.weight"), str(e)
    assert "torchvision/models/resnet.py" in e.source, e.source
