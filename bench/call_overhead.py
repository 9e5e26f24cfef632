"""What one hooked call costs, against the same call uninstrumented, in one process.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/call_overhead.py

Three figures (task statistics, level L1, every call collected). Each timing is one step of a
debugger (start(), the calls, then stop() and step() outside the timed window), so the records of
a step stay a step's worth, and the writer's cost is not in the figure:
- forward-only: `torch.add(a, b)` on 4-element tensors without requires_grad, microseconds added
  per call (target <= 1.0);
- forward + backward: 300 chained `torch.mul(y, 1.0)` on a 4-element tensor with requires_grad,
  then backward, microseconds added per call (target <= 2.0);
- scan rate: `x.mul_(1.0)` on 8M float32 elements (in place: nothing is allocated, and each call
  makes a new version, so no statistic is reused): the time the hook adds, as the bytes its
  statistics read (the input before, the output after) per second, over `torch.sum`'s read rate
  on the same buffer (target >= 0.8); and the statistics kernel alone (`_C._tensor_statistics`)
  against `torch.sum` on the same 8M-element buffer, without a hooked call around it.
Each figure is the best of --repeats timings in each of --rounds rounds (plain, then hooked), to
keep a noisy machine's worst moments out.

On torch 2.x it also prints what the Python wrapper that compile_seam.py replaced would cost
(api_hooks._compile_aware around the unhooked torch.add): the lever's effect, measured apart.
"""
from __future__ import annotations

import argparse
import math
import shutil
import pathlib
import os
import sys
import tempfile
import time
from typing import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The package as built in place, or (MSPROBE_CPP_PACKAGE_ROOT) the one tools/test.sh builds for torch 2.x.
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

import torch  # noqa: E402

import msprobe_cpp  # noqa: E402


def best(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def forward_only(n: int) -> Callable[[], None]:
    a, b = torch.randn(4), torch.randn(4)

    def run() -> None:
        for _ in range(n):
            torch.add(a, b)
    return run


def forward_backward(n: int) -> Callable[[], None]:
    x = torch.randn(4, requires_grad=True)

    def run() -> None:
        y = x
        for _ in range(n):
            y = torch.mul(y, 1.0)
        y.sum().backward()
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000, help="calls per forward-only timing")
    ap.add_argument("--rounds", type=int, default=3, help="plain-then-hooked rounds")
    args = ap.parse_args()
    torch.set_num_threads(1)

    big = torch.randn(8 * 1024 * 1024)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="call_overhead_"))
    chain = 300

    from msprobe_cpp import api_hooks
    probe = api_hooks.compiling_probe()
    wrapped_add = api_hooks._compile_aware(torch.add, torch.add, probe) if probe is not None else None
    wrapper_time = math.inf
    plain_fwd = plain_fb = plain_scan = sum_time = kernel_time = math.inf
    hooked_fwd = hooked_fb = hooked_scan = math.inf
    # Rounds of plain-then-hooked blocks, best of each kept: a slow spell of a shared machine then
    # falls on both sides rather than on one.
    for _ in range(args.rounds):
        plain_fwd = min(plain_fwd, best(forward_only(args.calls), args.repeats) / args.calls)
        plain_fb = min(plain_fb, best(forward_backward(chain), args.repeats) / chain)
        if wrapped_add is not None:
            a, b = torch.randn(4), torch.randn(4)

            def through_wrapper() -> None:
                for _ in range(args.calls):
                    wrapped_add(a, b)
            wrapper_time = min(wrapper_time, best(through_wrapper, args.repeats) / args.calls)
        plain_scan = min(plain_scan, best(lambda: big.mul_(1.0), args.repeats))
        sum_time = min(sum_time, best(lambda: torch.sum(big), args.repeats))
        kernel_time = min(kernel_time, best(lambda: msprobe_cpp._C._tensor_statistics(big), args.repeats))

        dbg = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=tmp / "dump", level="L1")

        def best_step(fn: Callable[[], None]) -> float:
            times = []
            for _ in range(args.repeats):
                dbg.start()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                dbg.stop()
                dbg.step()
            return min(times)

        hooked_fwd = min(hooked_fwd, best_step(forward_only(args.calls)) / args.calls)
        hooked_fb = min(hooked_fb, best_step(forward_backward(chain)) / chain)
        hooked_scan = min(hooked_scan, best_step(lambda: big.mul_(1.0)))
        dbg._release()
        shutil.rmtree(tmp, ignore_errors=True)

    bytes_read = 2 * big.numel() * big.element_size()  # input and output
    scan_rate = bytes_read / max(hooked_scan - plain_scan, 1e-9)
    sum_rate = big.numel() * big.element_size() / sum_time
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread; best of {args.repeats} in each of "
          f"{args.rounds} rounds")
    print(f"forward-only tiny call:       {1e6 * plain_fwd:7.2f} -> {1e6 * hooked_fwd:7.2f} us, "
          f"+{1e6 * (hooked_fwd - plain_fwd):.2f} us per call (target <= 1.0)")
    print(f"forward+backward tiny call:   {1e6 * plain_fb:7.2f} -> {1e6 * hooked_fb:7.2f} us, "
          f"+{1e6 * (hooked_fb - plain_fb):.2f} us per call (target <= 2.0)")
    print(f"statistics scan (mul_, 8M f32): +{1e3 * (hooked_scan - plain_scan):.2f} ms = {scan_rate / 1e9:.1f} GB/s; "
          f"torch.sum reads {sum_rate / 1e9:.1f} GB/s: {scan_rate / sum_rate:.2f}x (target >= 0.8)")
    if wrapped_add is not None:
        print(f"torch 2.x Python wrapper (not used where compile_seam applies): "
              f"+{1e6 * (wrapper_time - plain_fwd):.2f} us per call")
    kernel_rate = big.numel() * big.element_size() / kernel_time
    print(f"statistics kernel alone (8M f32): {kernel_rate / 1e9:.1f} GB/s: {kernel_rate / sum_rate:.2f}x torch.sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
