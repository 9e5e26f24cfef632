"""Where an overflow_check L1 step's added time goes, by what the debugger's window holds (issue 35):
the step uninstrumented; instrumented with the model started; without a model given to start();
and with the optimizer's step outside the window (stop() before opt.step()). Interleaved rounds,
medians. Also a profiling target: `SECS=8 ... --loop full` runs that configuration only, for
`perf record`.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/step_split.py --model convnet
    OPENBLAS_NUM_THREADS=1 perf record -g -- /usr/bin/python3 bench/step_split.py --model gpt --loop full
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

import torch  # noqa: E402

import msprobe_cpp  # noqa: E402
from models import compute_loss, make_model  # noqa: E402

MODES = ("none", "full", "nomodel", "optout")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="convnet", choices=("gpt", "convnet", "mlp"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--loop", choices=MODES, help="run this configuration for $SECS seconds (profiling)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = make_model(args.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.model == "gpt":
        x, y = torch.randint(0, 64, (8, 32)), torch.randint(0, 64, (8, 32))
    elif args.model == "convnet":
        x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    else:
        x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tempfile.mkdtemp() + "/d", level="L1")

    def step(mode: str) -> float:
        t0 = time.perf_counter()
        if mode != "none":
            dbg.start(None if mode == "nomodel" else model)
        opt.zero_grad(set_to_none=True)
        compute_loss(model, x, y).backward()
        if mode == "optout":
            dbg.stop()
        opt.step()
        if mode in ("full", "nomodel"):
            dbg.stop()
        if mode != "none":
            dbg.step()
        return time.perf_counter() - t0

    if args.loop:
        end = time.time() + float(os.environ.get("SECS", "8"))
        while time.time() < end:
            step(args.loop)
        return 0
    times = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for m in MODES:
            for _ in range(3):
                step(m)
            times[m] += [step(m) for _ in range(15)]
    base = statistics.median(times["none"])
    for m in MODES:
        med = statistics.median(times[m])
        print(f"{m:8s} {med * 1e3:7.3f} ms  {med / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
