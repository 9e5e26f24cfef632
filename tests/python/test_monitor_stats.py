"""The training monitor's statistics of one tensor (issue 55, live/monitor/monitor_stats.h),
through the test extension: the values msprobe 26.2.0's TrainerMon puts in its CSVs, computed as
its ops compute them (module_metric.py; docs/monitor-reference.md §4). Against msprobe's own
metric functions where 26.2.0 is installed (the torch 2.13 venv), and against those formulas
written out here on every torch."""
import math

import pytest
import torch

import msprobe_cpp  # noqa: F401  torch and the engine first
import msprobe_cpp_units as units
from msprobe_runs import msprobe_version
from testenv import devices

OPS = ["min", "max", "norm", "zeros", "nans", "id", "mean", "shape", "dtype"]


def tensors(device):
    torch.manual_seed(0)
    return {
        "float32": torch.randn(16, 8, device=device),
        "with zeros and nan": torch.tensor([0.0, 1e-9, -2.0, float("nan"), 3.0], device=device),
        "with inf": torch.tensor([1.0, float("inf"), -5.0], device=device),
        "bfloat16": torch.randn(4, 4, device=device).to(torch.bfloat16),
        "float16": (torch.randn(7, device=device) * 100).half(),
        "int64": torch.arange(-3, 9, device=device),
        # Integer tensors are read in one pass on CPU too (ids, positions: a model's every step).
        "int32": torch.tensor([[-7, 0], [12, 3]], dtype=torch.int32, device=device),
        "int16": torch.tensor([-300, 2, 299], dtype=torch.int16, device=device),
        "int8": torch.tensor([-128, 5, 127, 0], dtype=torch.int8, device=device),
        "uint8": torch.arange(0, 250, 7, dtype=torch.uint8, device=device),
        "0-d int64": torch.tensor(41, device=device),
        "int64 ids": torch.randint(0, 50_000, (2, 1000), device=device),
        "0-d": torch.tensor(2.5, device=device),
        "empty": torch.zeros(0, 3, device=device),
    }


def formulas(x: torch.Tensor, eps: float = 1e-8):
    """msprobe 26.2.0's ops, as docs/monitor-reference.md §4 states them, each item() taken."""
    def guarded(f):
        try:
            return f()
        except RuntimeError:
            return float("nan")
    with torch.no_grad():
        return [
            guarded(lambda: torch.min(x).item()),
            guarded(lambda: torch.max(x).item()),
            torch.norm(x.to(torch.float64), p=2).item(),
            float("nan") if x.numel() == 0 else (torch.sum(torch.abs(x) < eps) / x.numel()).item(),
            torch.isnan(x).sum().item(),
            x.item() if x.dim() == 0 else None,
            torch.mean(x.to(torch.float64)).item(),
            str(list(x.shape)),
            str(x.dtype),
        ]


def same(ours, theirs):
    assert type(ours) is type(theirs) or (ours is None and theirs is None), (ours, theirs)
    if isinstance(theirs, float) and math.isnan(theirs):
        assert math.isnan(ours)
    else:
        assert ours == theirs


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_each_op_is_msprobes_formula(device):
    for name, x in tensors(device).items():
        ours = units.monitor_values(x, OPS)
        for op, a, b in zip(OPS, ours, formulas(x)):
            try:
                same(a, b)
            except AssertionError as e:
                raise AssertionError(f"{name}, {op}: ours {a!r}, msprobe's {b!r}") from e


def test_an_integer_tensors_min_and_max_are_exact_integers():
    """Beyond 2^53 a float64 would round them: they are read as the integers they are."""
    x = torch.tensor([2 ** 62 + 1, -(2 ** 62) - 3, 7])
    assert units.monitor_values(x, ["min", "max"])[:2] == [-(2 ** 62) - 3, 2 ** 62 + 1]


def test_eps_is_the_zeros_threshold():
    x = torch.tensor([0.0, 1e-6, 1e-3, 1.0])
    assert units.monitor_values(x, ["zeros"], 1e-8)[0] == 0.25
    assert units.monitor_values(x, ["zeros"], 1e-2)[0] == 0.75


@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
def test_each_op_is_msprobes_own():
    from msprobe.pytorch.monitor.module_metric import get_metrics
    for name, x in tensors("cpu").items():
        theirs = get_metrics(OPS, {"t": x}, 1e-8)["t"]
        for op, ours in zip(OPS, units.monitor_values(x, OPS)):
            value = theirs[op]
            if torch.is_tensor(value):
                value = value.item()
            elif op == "shape":
                value = str(list(value))
            elif op == "dtype":
                value = str(value)
            try:
                same(ours, value)
            except AssertionError as e:
                raise AssertionError(f"{name}, {op}: ours {ours!r}, msprobe's {value!r}") from e


def large_tensors(device):
    """Past the small tensors' limit (2048 elements): norm and mean asked, so read in one pass on
    CPU (monitor_stats.cpp), its float64 sums in another order than torch's."""
    torch.manual_seed(1)
    base = torch.randn(100_003, device=device) * 3 + 0.5
    with_nan, with_inf, mixed_inf = base.clone(), base.clone(), base.clone()
    with_nan[77_777] = float("nan")
    with_inf[5] = float("inf")
    mixed_inf[5], mixed_inf[99_999] = float("inf"), float("-inf")
    sparse = base * (torch.rand(100_003, device=device) < 0.1)
    return {"float32": base, "float16": base.half(), "bfloat16": base.bfloat16(),
            "float64": base.double(), "with nan": with_nan, "with inf": with_inf,
            "inf and -inf": mixed_inf, "mostly zeros": sparse,
            "2-d, transposed (not contiguous)": base[:100_000].view(400, 250).t()}


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("exact_sums", [True, False])
def test_a_large_tensors_ops_are_msprobes_formula(device, exact_sums):
    """min, max, nans and zeros exactly. norm and mean: with exact_sums (alert rules on, whose
    messages print them unrounded) torch's own float64 reductions, msprobe's bits; without, a
    dense CPU tensor's one-read float64 sums (cpu_wide_sums), to 1e-13 of them (their order
    differs), below any CSV's rounding of up to 12 digits."""
    ops = ["min", "max", "norm", "zeros", "nans", "mean"]
    for name, x in large_tensors(device).items():
        ours = units.monitor_values(x, ops, exact_sums=exact_sums)
        theirs = [v for op, v in zip(OPS, formulas(x)) if op in ops]
        for op, a, b in zip(ops, ours, theirs):
            if op in ("norm", "mean") and math.isfinite(b) and not exact_sums:
                assert a == pytest.approx(b, rel=1e-13, abs=1e-13), (name, op, a, b)
            else:
                try:
                    same(a, b)
                except AssertionError as e:
                    raise AssertionError(f"{name}, {op}: ours {a!r}, msprobe's {b!r}") from e
