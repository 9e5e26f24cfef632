"""The last gate (issue 32): just before an optimizer writes the gradients into the parameters,
they are looked at once more, so NaN/inf that no hooked call made (DDP's all-reduce, a compiled
backward, a C++ autograd function) stops before it does damage. Here in one process, with a
gradient made where no hook sees it (the hooks turned off inside a custom autograd function's
backward, as in a C++ one)."""
import collections.abc
import copy
import sys

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from msprobe_cpp import _C
from testenv import devices


class UnseenNaNGradient(torch.autograd.Function):
    """Identity forward; backward gives NaN where `poison` is set, made with the hooks off."""

    @staticmethod
    def forward(ctx, x, poison):
        ctx.poison = poison
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.poison:
            return grad, None
        return _C.call_unhooked(lambda: grad * float("nan")), None


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.poison = False

    def forward(self, x):
        return UnseenNaNGradient.apply(self.fc(x), self.poison)


def train(model, device, steps, debugger=None, poison_at=-1, optimizer="sgd"):
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=0.01))
    g = torch.Generator().manual_seed(1)
    losses = []
    for i in range(steps):
        x = torch.randn(5, 4, generator=g).to(device)
        model.poison = i == poison_at
        if debugger is not None:
            debugger.start(model)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    if debugger is not None and hasattr(debugger, "drain"):
        debugger.drain()  # async_dump: the steps' files on disk for the caller
    return losses, opt


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("level", ["L1", "mix", "L0"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_gradient_no_hook_saw_stops_before_the_optimizer_writes_it(tmp_path, device, level, optimizer):
    torch.manual_seed(0)
    model = Net().to(device)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), level=level)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train(model, device, 4, debugger, poison_at=2, optimizer=optimizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    debugger._release()
    e = info.value
    assert (e.step, e.call, e.origin) == (2, f"(before {'SGD' if optimizer == 'sgd' else 'AdamW'}.step)", "input"), str(e)
    assert set(e.gradients) == {"fc.weight", "fc.bias"}
    # What each holds, as a call's tensors are told (no record holds these gradients).
    assert sorted((t["position"], t["shape"], t["nan"]) for t in e.tensors) == \
        [("fc.bias.grad", [3], 3), ("fc.weight.grad", [3, 4], 12)], e.tensors
    assert "no recorded backward call of this step made" in e.note
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert {k: v for k, v in model.state_dict().items()}.keys() == before.keys()
    assert (tmp_path / "dump" / "step2" / "rank" / "overflow_report.json").exists()


def stop_of_steps(debugger, steps, step, model=None):
    """`steps` steps of step(i) between debugger.start(model) and stop(), step(): the stop they
    raise (the debugger released after it)."""
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        for i in range(steps):
            debugger.start(model)
            step(i)
            debugger.stop()
            debugger.step()
    debugger._release()
    return info.value


def test_without_a_started_model_a_gradient_is_named_by_its_place_and_the_state_is_left_as_it_was(tmp_path):
    """start() without a model: the look names a parameter by its place in the optimizer's
    groups. The looks read the optimizer's state without adding to it (a defaultdict: reading
    state[p] would add an entry for every parameter, and a frozen one would get state)."""
    torch.manual_seed(0)
    frozen, model = nn.Linear(4, 4), Net()
    frozen.requires_grad_(False)
    opt = torch.optim.AdamW([{"params": frozen.parameters()}, {"params": model.parameters()}], lr=0.01)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))

    def step(i: int) -> None:
        model.poison = i == 2
        opt.zero_grad()
        model(frozen(torch.randn(5, 4))).pow(2).mean().backward()
        assert set(opt.state) == ({model.fc.weight, model.fc.bias} if i else set())
        opt.step()
    e = stop_of_steps(debugger, 3, step)
    assert (e.step, e.call, e.origin) == (2, "(before AdamW.step)", "input"), str(e)
    assert e.gradients == ["param_groups[1].params[0]", "param_groups[1].params[1]"], str(e)
    assert "param_groups[1].params[0].grad: torch.float32 [3, 4]: 12 NaN" in str(e)
    assert set(opt.state) == {model.fc.weight, model.fc.bias}  # none for the frozen layer


class StateMap(collections.abc.MutableMapping):
    """An optimizer state that is a mapping but no dict (a library's own), per parameter too."""

    def __init__(self) -> None:
        self._d = collections.defaultdict(dict)

    def __getitem__(self, key):
        return self._d[key]

    def __setitem__(self, key, value) -> None:
        self._d[key] = value

    def __delitem__(self, key) -> None:
        del self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


def test_nan_in_a_state_that_is_no_dict_stops_before_the_step(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.state = StateMap()
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))

    def step(i: int) -> None:
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).mean().backward()
        if i == 2:
            with torch.no_grad():
                opt.state[model.fc.bias]["momentum_buffer"][1] = float("nan")
        opt.step()
    e = stop_of_steps(debugger, 3, step, model)
    assert (e.step, e.call, e.origin) == (2, "(before SGD.step)", "parameter"), str(e)
    assert (e.parameter, e.optimizer_state) == ("fc.bias", "momentum_buffer"), str(e)
    assert torch.isfinite(model.fc.bias).all()


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_a_clean_run_is_untouched_and_the_guard_is_removed_with_the_debugger(tmp_path, device):
    torch.manual_seed(0)
    model = Net().to(device)
    reference = copy.deepcopy(model)
    expected, _ = train(reference, device, 3)
    sgd_step = torch.optim.SGD.__dict__["step"]
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), step=[0, 1, 2])
    losses, _ = train(model, device, 3, debugger)  # the last step releases the debugger
    assert losses == expected
    for a, b in zip(model.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.optim.SGD.__dict__["step"] is sgd_step  # torch 1.13: the class's own step is back
    hooks = getattr(sys.modules["torch.optim.optimizer"], "_global_optimizer_pre_hooks", {})
    assert not hooks  # torch 2.x: the global pre-hook is gone
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())


def test_a_step_the_step_list_leaves_out_is_not_judged(tmp_path):
    torch.manual_seed(0)
    model = Net()
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), step=[0, 1, 3])
    train(model, "cpu", 3, debugger, poison_at=2)  # step 2 is not watched: as without the tool
    debugger._release()
    assert not torch.isfinite(model.fc.weight).all()


@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"), reason="torch.amp.GradScaler('cpu') is torch 2.x's")
@pytest.mark.parametrize("fused", [False, True])
def test_a_step_a_fused_optimizer_skips_for_its_scaler_is_not_a_stop(tmp_path, fused):
    # A GradScaler calls a fused Adam's step even for overflowed gradients: the optimizer skips
    # the update itself on the scaler's found_inf (Hugging Face's default optimizer on torch 2.8+).
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    reference = copy.deepcopy(model)
    runs = []
    for m, debugger in ((reference, None),
                        (model, msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump")))):
        opt = torch.optim.AdamW(m.parameters(), lr=0.01, fused=fused)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 20)  # float16 gradients overflow at first
        scales = []
        g = torch.Generator().manual_seed(1)
        for _ in range(4):
            x = torch.randn(5, 4, generator=g)
            if debugger is not None:
                debugger.start(m)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = m(x).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            if debugger is not None:
                debugger.stop()
                debugger.step()
        runs.append(scales)
    assert runs[0] == runs[1] and runs[0][0] < 2.0 ** 20  # the scaler skipped, as without the tool
    for a, b in zip(model.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(a, b)
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_gradient_look_names_each_bad_gradient_and_no_large_finite_one(device):
    # Off the CPU (and on "cpu-generic") one multi-tensor norm pass per device and dtype decides
    # a clean group; a float16 gradient of 60000s is finite though its norm overflows, so a group
    # whose norms are not all finite is looked at tensor by tensor.
    def grad(values, dtype):
        return torch.tensor(values, dtype=dtype).to(device)
    gradients = [
        ("large_fp16", grad([60000.0] * 64, torch.float16)),
        ("nan_fp32", grad([1.0, float("nan"), 2.0], torch.float32)),
        ("clean_fp32", grad([1.0, -2.0], torch.float32)),
        ("neg_inf_bf16", grad([0.5, float("-inf")], torch.bfloat16)),
        ("clean_fp64", grad([3.0] * 5, torch.float64)),
        ("inf_fp16", grad([1.0, float("inf")], torch.float16)),
        ("clean_bf16", grad([1e38, -1e38], torch.bfloat16)),
    ]
    assert _C.nonfinite_gradients(gradients) == ["nan_fp32", "neg_inf_bf16", "inf_fp16"]
    assert _C.nonfinite_gradients([g for g in gradients if g[0].startswith(("clean", "large"))]) == []
    assert _C.nonfinite_gradients([]) == []


@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"), reason="torch.amp.GradScaler('cpu') is torch 2.x's")
def test_a_step_its_grad_scaler_found_finite_is_not_looked_at_again(tmp_path, monkeypatch):
    # GradScaler.step unscales (one look at every gradient) and calls the optimizer only when it
    # found them finite: the guard's own look would be the same, twice. A step without the scaler
    # is looked at, and a direct opt.step() after an unscale_ that found inf is looked at too.
    looks = []  # how many gradients each look found bad
    real = _C.OptimizerTensors.nonfinite_gradients

    def counted(tensors):
        bad = real(tensors)
        looks.append(len(bad))
        return bad
    monkeypatch.setattr(_C.OptimizerTensors, "nonfinite_gradients", counted)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    x = torch.randn(5, 4)
    for step in range(3):
        debugger.start(model)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        if step == 1:
            loss.backward()
            opt.step()  # no scaler in this step: looked at
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        debugger.stop()
        debugger.step()
    assert looks == [0]
    debugger.start(model)
    opt.zero_grad()
    scaler.scale(model(x).pow(2).mean()).backward()
    model.weight.grad[0, 0] = float("inf")  # made where no hook is: the scaler finds it
    scaler.unscale_(opt)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        opt.step()  # the user steps anyway, past the scaler
    debugger._release()
    assert looks == [0, 1]
    assert info.value.gradients == ["weight"]
    assert torch.isfinite(model.weight).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_cpu_look_reads_every_element_of_every_block(dtype):
    # The in-place CPU read takes the largest magnitude's bits a block of 4096 at a time: a bad
    # element anywhere (the last of a block, the tail, a negative NaN) is found, and the dtype's
    # largest finite values are not taken for inf.
    n = 3 * 4096 + 17
    top = torch.finfo(dtype).max
    clean = torch.full((n,), -top, dtype=dtype)
    clean[::2] = top
    assert _C.nonfinite_gradients([("clean", clean)]) == []
    for at in (0, 4095, 4096, 2 * 4096 + 1, n - 1):
        for bad in (float("nan"), float("inf"), float("-inf"), -float("nan")):
            t = clean.clone()
            t[at] = bad
            assert _C.nonfinite_gradients([("t", t)]) == ["t"], (at, bad)
