"""Trains one model for a while under one configuration (or none), for a profiler to sample:
`py-spy record --native` or `perf record -g` with `python -X perf` (issue 47). Nothing is timed
against a baseline here; bench/real_model_overhead.py and bench/hook_overhead.py do that.

    OPENBLAS_NUM_THREADS=1 /tmp/pyspy-venv/bin/py-spy record --native -r 250 -f raw -o gpt2.txt -- \\
        build-torch2/venv/bin/python bench/profile_step.py --model hf_gpt2 --config overflow-L1
    ... --config none   (the same steps without the tool)

Models: the real-model zoo's (tests/python/real_models.py) and `tinygpt` (bench/hook_overhead.py).
It prints the median step time, so a profile's run can be checked against the bench's.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

import hook_overhead as ho  # puts tests/python and the package on sys.path

import torch

import real_models


def measured(step, debugger, n):
    """The steps a profile summary reads (bench/profile_summary.py --within measured)."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        step(i, debugger)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="hf_gpt2", help="a zoo model's name, or tinygpt")
    ap.add_argument("--config", default="overflow-L1", help=f"none, or one of {', '.join(ho.CONFIGS)}")
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.model == "tinygpt":
        model = ho.build_model("gpt")
        opt = ho.make_optimizer(model)
        data = ho.make_batches(model, 8, seed=0, batch=8, device="cpu")

        def step(i, debugger):
            x, y = data[i % len(data)]
            return ho.train_step(model, opt, x, y, debugger)
    else:
        model, _, make_optimizer = real_models.build(args.model)
        opt = make_optimizer(model)
        data = real_models.batches(real_models.MODELS[args.model].make_batch, 8)

        def step(i, debugger):
            if debugger is not None:
                debugger.start(model)
            opt.zero_grad()
            loss = real_models.loss_of(model, data[i % len(data)])
            loss.backward()
            opt.step()
            if debugger is not None:
                debugger.stop()
                debugger.step()
            return loss
    debugger = None
    if args.config != "none":
        from msprobe_cpp import PrecisionDebugger
        cfg = ho.write_config(pathlib.Path(tempfile.mkdtemp(prefix="profile_step_")), args.config, args.steps, {})
        print("config:", json.loads(cfg.read_text()))
        debugger = PrecisionDebugger(config_path=str(cfg))
    for i in range(10):  # hooks installed, first-call costs paid: not in the profile's steps
        step(i, debugger)
    times = measured(step, debugger, args.steps)
    print(f"{args.model} {args.config}: median step {1e3 * statistics.median(times):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
