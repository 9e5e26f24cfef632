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
