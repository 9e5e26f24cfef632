"""The fused finite-and-range check for device tensors (issue 47, csrc/live/stats/fused_range.h): for
a batch of tensors, whether each holds NaN/inf and its largest magnitude, from two multi-tensor
passes per device and dtype and one host copy, not four reductions a tensor. On the CPU the same
ATen ops run (the slow path of _foreach_norm); on CUDA its multi_tensor_apply kernels
(tools/gpu_check.sh measures both against the per-tensor reductions)."""
import math

import pytest
import torch

from msprobe_cpp import _C
from testenv import devices

NAN, INF = float("nan"), float("inf")


def expected(t: torch.Tensor):
    finite = bool(torch.isfinite(t).all()) if t.numel() else True
    if not t.numel():
        return True, 0.0
    if torch.isnan(t).any():
        return False, NAN
    return finite, float(t.double().abs().max())


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def cases(device: str):
    g = torch.Generator().manual_seed(0)
    plain = torch.randn(64, 33, generator=g)
    with_nan = torch.randn(100, generator=g)
    with_nan[17] = NAN
    with_inf = torch.randn(7, 9, generator=g)
    with_inf[3, 2] = -INF
    both = torch.randn(50, generator=g)
    both[[1, 40]] = torch.tensor([INF, NAN])
    huge = torch.full((1000,), 3e38)  # its 1-norm overflows float32: finite all the same
    half = torch.tensor([1.0, -65504.0, 3.0], dtype=torch.float16)  # float16's max: headroom 100 %
    half_inf = torch.tensor([1.0, INF], dtype=torch.float16)
    bf16 = torch.randn(300, generator=g).to(torch.bfloat16)
    f64 = torch.randn(12, generator=g, dtype=torch.float64) * 1e300
    transposed = torch.randn(16, 8, generator=g).t()
    transposed[0, 5] = NAN
    empty = torch.empty(0, 4)
    made = [plain, with_nan, with_inf, both, huge, half, half_inf, bf16, f64, transposed, empty]
    return [t.to(device) for t in made]


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_each_tensors_finiteness_and_largest_magnitude(device):
    tensors = cases(device)
    before = _C._host_syncs()
    found = _C._fused_finite_and_range(tensors)
    syncs = _C._host_syncs() - before
    assert len(found) == len(tensors)
    for t, (finite, peak) in zip(tensors, found):
        want_finite, want_peak = expected(t.cpu())
        assert finite == want_finite, (t.dtype, t.shape, finite)
        assert same(peak, want_peak) or (want_finite and peak == pytest.approx(want_peak, rel=1e-6)), (t.dtype, peak, want_peak)
    # One copy per device and dtype (float32, float16, bfloat16, float64), and one more look at
    # each tensor whose 1-norm overflowed on finite data or whose NaN the max skipped.
    # On the CPU only `huge` needs that look (the inf-norm keeps NaN); CUDA's max may skip NaN.
    assert syncs == 5 if device == "cpu" else 5 <= syncs <= 9, syncs


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_a_batch_of_many_small_tensors_costs_one_host_copy(device):
    g = torch.Generator().manual_seed(1)
    tensors = [torch.randn(64, generator=g).to(device) for _ in range(600)]
    tensors[431][7] = NAN
    before = _C._host_syncs()
    found = _C._fused_finite_and_range(tensors)
    assert _C._host_syncs() - before == 1
    assert [i for i, (finite, _) in enumerate(found) if not finite] == [431]
    assert found[0][1] == pytest.approx(float(tensors[0].abs().max()))


def test_it_leaves_the_tensors_and_their_versions_alone():
    t = torch.randn(10, requires_grad=True)
    y = t * 2
    version = y._version
    _C._fused_finite_and_range([y])
    assert y._version == version and y.grad_fn is not None
