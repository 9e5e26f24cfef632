"""What PyTorch's own module hook machinery costs a training step, with hooks that do nothing.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/full_backward_hooks.py

msprobe records a module's backward through `register_full_backward_hook`, which wraps every
hooked module's inputs and outputs in BackwardHookFunction nodes. msprobe_cpp makes those records
from C++ hooks on the module's own autograd nodes instead (L0 and mix). This prints, for each bench
model, the median step with no hooks, with a no-op forward hook on every module, and with a no-op
forward hook and a no-op full backward hook on every module, in interleaved rounds: the last two's
difference is what the replaced machinery costs before any recording is done.
"""
from __future__ import annotations

import argparse
import copy
import pathlib
import statistics
import sys
import time
from typing import Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch  # noqa: E402

from models import make_batches, make_model, make_optimizer, train_step  # noqa: E402


def hooked(base: torch.nn.Module, backward: bool) -> torch.nn.Module:
    model = copy.deepcopy(base)
    for m in model.modules():
        m.register_forward_hook(lambda mod, args, out: None)
        if backward:
            m.register_full_backward_hook(lambda mod, grad_in, grad_out: None)
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt,convnet")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per model and round")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.models.split(","):
        torch.manual_seed(0)
        base = make_model(name)
        data = make_batches(base, 16, seed=0, batch=8, device="cpu")
        models = {"no hooks": copy.deepcopy(base), "forward hooks": hooked(base, False),
                  "forward + full backward hooks": hooked(base, True)}
        runs = {k: (m, make_optimizer(m)) for k, m in models.items()}
        times: Dict[str, List[float]] = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, (model, opt) in runs.items():
                for i in range(3):
                    train_step(model, opt, *data[i])
                for i in range(args.steps):
                    t0 = time.perf_counter()
                    train_step(model, opt, *data[i % len(data)])
                    times[k].append(time.perf_counter() - t0)
        med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        added = med["forward + full backward hooks"] - med["forward hooks"]
        print(f"{name} ({sum(1 for _ in base.modules())} modules): " + ", ".join(f"{k} {v:.2f} ms" for k, v in med.items())
              + f"; full backward hooks add {added:.2f} ms = {added / med['no hooks']:.2f} of the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
