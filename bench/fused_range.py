"""The fused finite-and-range check (csrc/live/stats/fused_range.h) against the per-tensor
statistics it could replace for a batch of hooked calls' tensors on a device (issue 47):

- `per-tensor, one sync each`: `_C._tensor_statistics` on each tensor (what a call costs without
  batched sync: four reductions, a stack, a host copy; on the CPU forced through that device path);
- `per-tensor, one sync a batch`: the same four reductions for every tensor, stacked, one host copy
  for the batch (what overflow_check.sync's batches do now, pending_stats.cpp);
- `fused`: `_C._fused_finite_and_range` on the batch (two multi-tensor passes, one host copy).

    python bench/fused_range.py --device cuda            # tools/gpu_check.sh runs this
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/fused_range.py --device cpu

Prints microseconds per tensor, median of --repeat runs, for batches of small (the launch-bound
case of a tiny model) and larger tensors.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

import torch  # noqa: E402

from msprobe_cpp import _C  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def per_tensor_each(tensors):
    for t in tensors:
        _C._tensor_statistics(t)


def per_tensor_batched(tensors):
    rows = [torch.stack([t.max().float(), t.min().float(), t.sum(dtype=torch.float32),
                         torch.linalg.vector_norm(t, dtype=torch.float32)]) for t in tensors]
    torch.stack(rows).cpu()


def fused(tensors):
    _C._fused_finite_and_range(tensors)


def timed(fn, tensors, device, repeat):
    fn(tensors)  # warm-up: kernels loaded, allocator primed
    runs = []
    for _ in range(repeat):
        sync(device)
        t0 = time.perf_counter()
        fn(tensors)
        sync(device)
        runs.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(runs) / len(tensors)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--count", type=int, default=600, help="tensors a batch (a tiny HF model's step: ~600 records)")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    # On the CPU, `each` goes through the reductions other devices use, not the CPU's own scan.
    _C._force_generic_statistics(args.device == "cpu")
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""))
    print(f"{'tensor':>18}{'dtype':>10}{'each (us)':>12}{'batched (us)':>14}{'fused (us)':>12}{'batched/fused':>15}")
    for numel in (64, 4096, 1 << 16, 1 << 20):
        for dtype in (torch.float32, torch.bfloat16):
            count = args.count if numel <= 1 << 16 else 32
            g = torch.Generator().manual_seed(0)
            tensors = [torch.randn(numel, generator=g).to(device=args.device, dtype=dtype) for _ in range(count)]
            each = timed(per_tensor_each, tensors, args.device, args.repeat)
            batched = timed(per_tensor_batched, tensors, args.device, args.repeat)
            one = timed(fused, tensors, args.device, args.repeat)
            print(f"{f'{count} x {numel}':>18}{str(dtype).split('.')[-1]:>10}{each:>12.2f}{batched:>14.2f}"
                  f"{one:>12.2f}{batched / one:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
