"""The CPU's own statistics scan (float32 summed in float32 blocks of 1024, blocks added in float64):
exact Max/Min, Mean and Norm within float32 rounding of a float64 reference at every size around
its vector steps and blocks, finite sums for finite data whose squares overflow float32, and NaN/inf
seen wherever they sit. (The generic path of other devices: test_device_stats.py.)"""
import math
from typing import Tuple

import pytest
import torch

from msprobe_cpp import _C

# Around the 16-element step and the 1024-element block, and many blocks.
SIZES = [1, 7, 15, 16, 17, 255, 1023, 1024, 1025, 2047, 3000, 65536 + 9, (1 << 20) + 5]


def scan(t: torch.Tensor) -> Tuple[float, float, float, float]:
    return _C._tensor_statistics(t)


def reference(t: torch.Tensor) -> Tuple[float, float, float, float]:
    x = t.double()
    return x.max().item(), x.min().item(), x.mean().item(), x.norm().item()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_against_a_float64_reference(n, offset):
    g = torch.Generator().manual_seed(n)
    t = torch.randn(n, generator=g) * 3 + offset  # an offset: every block's sum is large
    mx, mn, mean, norm = scan(t)
    rmx, rmn, rmean, rnorm = reference(t)
    assert (mx, mn) == (rmx, rmn)
    assert norm == pytest.approx(rnorm, rel=2e-6)
    # A float32 rounding of each block's sum, relative to the values' magnitude.
    assert mean == pytest.approx(rmean, rel=2e-6, abs=2e-6 * max(abs(rmx), abs(rmn)))


@pytest.mark.parametrize("n", [1024, 5000, (1 << 16) + 3])
@pytest.mark.parametrize("value", [3e19, 1e30, -3.3e38])
def test_squares_beyond_float32_keep_finite_sums(n, value):
    t = torch.randn(n, generator=torch.Generator().manual_seed(1))
    t[n // 2] = value  # one block's float32 squares overflow: that block is summed in float64
    mx, mn, mean, norm = scan(t)
    rmx, rmn, rmean, rnorm = reference(t)
    assert (mx, mn) == (rmx, rmn)
    assert math.isfinite(norm) and norm == pytest.approx(rnorm, rel=1e-6)
    assert mean == pytest.approx(rmean, rel=1e-5)


@pytest.mark.parametrize("n", [16, 1024, 3000])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_seen_anywhere(n, where, bad):
    t = torch.randn(n, generator=torch.Generator().manual_seed(2))
    t[{"first": 0, "middle": n // 2, "last": n - 1}[where]] = bad
    mx, mn, mean, norm = scan(t)
    if math.isnan(bad):
        assert all(math.isnan(v) for v in (mx, mn, mean, norm))
    else:
        assert (mx if bad > 0 else mn) == bad
        assert mean == bad and norm == math.inf


def test_inf_and_minus_inf_together_are_not_nan():
    t = torch.randn(4096)
    t[10], t[3000] = math.inf, -math.inf
    mx, mn, mean, norm = scan(t)
    assert (mx, mn, norm) == (math.inf, -math.inf, math.inf)
    assert math.isnan(mean)  # inf - inf, as torch.mean gives


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_go_through_the_same_scan(dtype):
    t = (torch.randn(5000, generator=torch.Generator().manual_seed(4)) * 5 + 2).to(dtype)
    mx, mn, mean, norm = scan(t)
    rmx, rmn, rmean, rnorm = reference(t)
    assert (mx, mn) == (rmx, rmn)
    assert norm == pytest.approx(rnorm, rel=2e-6)
    assert mean == pytest.approx(rmean, rel=2e-6)


def layouts(base: torch.Tensor):
    """Views of `base` (4-d) in every layout the scan tells apart: dense blocks in another order,
    rows whose last dimension is contiguous, and strides it copies first."""
    return {
        "contiguous": base,
        "transposed": base.transpose(1, 3),             # dense, permuted
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "last_dim_sliced": base[..., 3:40],             # rows of 37
        "batch_narrowed_rows": base[1:, :, 2:5, :],     # rows of the whole last dimension
        "short_rows": base[..., :5],                    # rows too short: copied
        "every_other": base[..., ::2],                  # last stride 2: copied
        "expanded": base[:, :1].expand(-1, 3, -1, -1),  # stride 0: copied
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("fill", ["finite", "nan", "inf", "inf_and_minus_inf", "huge"])
def test_every_layout_gets_the_statistics_of_its_contiguous_copy(dtype, fill):
    g = torch.Generator().manual_seed(7)
    base = torch.randn(3, 4, 6, 48, generator=g) * 4 + 1
    if dtype == torch.int32 and fill != "finite":
        pytest.skip("integers hold no NaN/inf")
    if fill == "huge":  # squares beyond float32 in one row
        base[2, 3, 4, 10] = 3e30 if dtype in (torch.float32, torch.float64) else 6e4
    elif fill != "finite":
        base[2, 3, 4, 10] = {"nan": math.nan, "inf": math.inf, "inf_and_minus_inf": math.inf}[fill]
        if fill == "inf_and_minus_inf":
            base[1, 0, 3, 20] = -math.inf
    base = base.to(dtype)
    for name, t in layouts(base).items():
        got, want = scan(t), scan(t.contiguous())
        for g_, w in zip(got, want):
            if math.isnan(w):
                assert math.isnan(g_), (name, got, want)
            elif math.isinf(w):
                assert g_ == w, (name, got, want)
            else:
                assert g_ == pytest.approx(w, rel=1e-6, abs=1e-6), (name, got, want)
        assert got[:2] == want[:2] or math.isnan(want[0]), (name, got, want)  # Max and Min exact


def test_masks_in_every_layout_are_recorded_as_their_any_and_all(tmp_path):
    import msprobe_cpp
    from dumps import load as read_dump_file
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 4, 6, 48, generator=g)
    cases = {name: t for name, t in layouts(x).items()}
    cases["all_true"] = torch.ones(2, 40, dtype=torch.bool).t()
    cases["all_false"] = torch.zeros(2, 40, dtype=torch.bool).t()
    debugger = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(tmp_path), level="L1", step=[0])
    debugger.start()
    masks = [t if t.dtype == torch.bool else torch.gt(t, 0.5) for t in cases.values()]
    views = [m.t() if m.dim() == 2 else m.transpose(0, 2) for m in masks]
    for v in views:
        torch.logical_not(v)  # recorded: its input is the mask as a view
    debugger.stop()
    debugger.step()
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    calls = [data[k] for k in data if k.startswith("Torch.logical_not.")]
    assert len(calls) == len(views)
    for call, v in zip(calls, views):
        entry = call["input_args"][0]
        assert (entry["Max"], entry["Min"]) == (bool(v.any()), bool(v.all()))
        out = call["output"][0]
        assert (out["Max"], out["Min"]) == (bool((~v).any()), bool((~v).all()))
