"""The statistics path of non-CPU devices, run on the CPU ("cpu-generic") and on CUDA where it exists:
Max/Min in the tensor's dtype, sums in float32 (float64 for float64), overflow-safe, NaN/inf as on
the CPU's own path, and no copy of the tensor's size."""
import json
import math
import subprocess
import sys
from typing import Dict

import pytest
import torch

import msprobe_cpp
from testenv import devices
from dumps import load as read_dump_file

GENERIC = [d for d in devices() if d != "cpu"]


def stats_of(tmp_path, t: torch.Tensor) -> Dict:
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="L1", step=[0])
    dbg.start()
    torch.clone(t)
    dbg.stop()
    dbg.step()
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    return data["Torch.clone.0.forward"]["input_args"][0]


def reference(t: torch.Tensor) -> Dict[str, float]:
    x = t.detach().cpu().double()
    return {"Max": x.max().item(), "Min": x.min().item(), "Mean": x.mean().item(), "Norm": x.norm().item()}


@pytest.mark.parametrize("device", GENERIC, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_against_a_float64_reference(tmp_path, device, dtype):
    g = torch.Generator().manual_seed(3)
    t = ((torch.randn(3000, generator=g) + 0.25) * 7).to(dtype).to(device)
    entry = stats_of(tmp_path, t)
    ref = reference(t)
    assert entry["dtype"] == str(dtype)
    assert (entry["Max"], entry["Min"]) == (ref["Max"], ref["Min"])  # exact: the dtype's own values
    # float32 accumulation: a few float32 roundings of the total; float64 keeps float64.
    rel = 1e-12 if dtype == torch.float64 else 1e-5
    assert entry["Norm"] == pytest.approx(ref["Norm"], rel=rel)
    assert entry["Mean"] == pytest.approx(ref["Mean"], rel=rel, abs=rel * ref["Norm"] / math.sqrt(t.numel()))


@pytest.mark.parametrize("device", GENERIC, indirect=True)
@pytest.mark.parametrize("dtype, value", [(torch.float32, 1e38), (torch.float32, -3.3e38),
                                          (torch.float16, 6e4), (torch.bfloat16, 3e38)])
def test_finite_data_never_gets_an_infinite_mean_or_norm(tmp_path, device, dtype, value):
    t = torch.full((5000,), value, dtype=dtype, device=device)
    t[::2] *= 0.5
    entry = stats_of(tmp_path, t)
    ref = reference(t)
    assert math.isfinite(entry["Mean"]) and math.isfinite(entry["Norm"]), entry
    assert entry["Mean"] == pytest.approx(ref["Mean"], rel=1e-5)
    assert entry["Norm"] == pytest.approx(ref["Norm"], rel=1e-5)


@pytest.mark.parametrize("device", GENERIC, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_nan_and_inf_are_seen(tmp_path, device, dtype):
    t = torch.arange(1000.0).to(dtype).to(device)
    t[10] = float("inf")
    entry = stats_of(tmp_path / "inf", t)
    assert (entry["Max"], entry["Mean"], entry["Norm"]) == (math.inf, math.inf, math.inf)
    assert entry["Max_except_inf_nan"] == reference(t[t.isfinite()])["Max"]
    t[20] = float("nan")
    entry = stats_of(tmp_path / "nan", t)
    assert all(math.isnan(entry[k]) for k in ("Max", "Min", "Mean", "Norm")), entry
    t = torch.tensor([float("inf"), -float("inf")] * 600, dtype=dtype, device=device)
    entry = stats_of(tmp_path / "both", t)
    assert (entry["Max"], entry["Min"]) == (math.inf, -math.inf) and math.isnan(entry["Mean"])


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("n", [5, 8, 1003, 40000])
def test_anomalous_tensors_are_counted_by_kind(tmp_path, device, dtype, n):
    """The counts the live guard compares (and the stop message prints), with the finite extremes,
    on the CPU's own scan (every length around its vector width) and on the device path."""
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g) * 100).to(dtype)
    r = torch.rand(n, generator=g)
    x[r < 0.1] = float("nan")
    x[(r >= 0.1) & (r < 0.15)] = float("inf")
    x[(r >= 0.15) & (r < 0.3)] = float("-inf")
    x[0] = float("nan")
    x = x.to(device).requires_grad_()  # so that the NaN/inf does damage at once
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), sync="call")
    dbg.start()
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        torch.neg(x)  # a foreign tensor: origin input, its counts in the message
    t = info.value.tensors[0]
    xc = x.detach().cpu()
    assert (t["nan"], t["posinf"], t["neginf"]) == (int(xc.isnan().sum()), int(xc.isposinf().sum()),
                                                   int(xc.isneginf().sum()))
    rec = read_dump_file(tmp_path / "d" / "step0" / "rank")["data"]
    entry = rec["Torch.neg.0.forward"]["input_args"][0]
    finite = xc[xc.isfinite()].double()
    assert entry["Max_except_inf_nan"] == finite.max().item()
    assert entry["Min_except_inf_nan"] == finite.min().item()


@pytest.mark.parametrize("device", GENERIC, indirect=True)
def test_large_and_non_contiguous_tensors_are_reduced_in_chunks(tmp_path, device):
    # Over the 1 M-element chunk, as a flat tensor and as a transposed view; half precision so
    # that the CPU's reductions would otherwise convert the whole tensor.
    g = torch.Generator().manual_seed(5)
    base = torch.randn(2300, 2100, generator=g).half().to(device)
    for name, t in (("flat", base), ("transposed", base.t()), ("one_row", base.reshape(1, -1).expand(2, -1).t())):
        entry = stats_of(tmp_path / name, t)
        ref = reference(t)
        assert (entry["Max"], entry["Min"]) == (ref["Max"], ref["Min"]), name
        # Millions of float32 additions in the CPU's sequential reduction: a looser bound.
        assert entry["Norm"] == pytest.approx(ref["Norm"], rel=2e-4), name
        assert entry["Mean"] == pytest.approx(ref["Mean"], abs=2e-4 * ref["Norm"] / math.sqrt(t.numel())), name


RSS_PROBE = """
import json, math, resource, sys
import torch
import msprobe_cpp
torch.set_num_threads(1)       # the intra-op pool's own buffers come and go with its threads
t = torch.randn(100_000_000)   # 400 MB of float32
t[12345] = 3e38                # its float32 sum of squares overflows: the scaled pass runs too
msprobe_cpp._C._force_generic_statistics(True)
dbg = msprobe_cpp.PrecisionDebugger(dump_path=sys.argv[1], level="L1", step=[0])
dbg.start()                    # hooks in place and warmed up before the mark is read
torch.ones(3).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t.sum()                        # a call that allocates nothing of the tensor's size itself
dbg.stop()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dbg.drain()                    # the writer thread's step on disk (async_dump), for the read below
entry = json.load(open(sys.argv[1] + "/step0/rank/dump.json"))["data"]["Tensor.sum.1.forward"]["input_args"][0]
print((after - before) * 1024, entry["Max"], entry["Norm"])
"""


def test_a_400_mb_tensor_costs_no_copy_of_its_size(tmp_path):
    """RSS growth while the generic path judges a 400 MB float32 tensor (it made a float64 copy:
    800 MB), in a fresh interpreter: peak RSS is a high-water mark, and this process's may
    already be higher than anything the probe does."""
    out = subprocess.run([sys.executable, "-c", RSS_PROBE, str(tmp_path)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    growth, mx, norm = (float(v) for v in out.stdout.split())
    print(f"RSS growth judging a 400 MB float32 tensor on the generic path: {growth / 1e6:.1f} MB")
    assert mx == pytest.approx(3e38, rel=1e-6) and math.isfinite(norm)
    assert growth < 16e6, f"{growth / 1e6:.1f} MB"
