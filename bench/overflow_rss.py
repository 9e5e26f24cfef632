"""Memory over a long clean run under task overflow_check: nothing is dumped, so nothing should
accumulate. Trains the GPT-style benchmark model (AdamW, one thread) for --steps steps and prints
the resident set size after the warm-up and at the end.

    /usr/bin/python3 bench/overflow_rss.py [--steps 200] [--warmup 20]
"""
import argparse
import pathlib
import os
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The package as built in place, or (MSPROBE_CPP_PACKAGE_ROOT) the one tools/test.sh builds for torch 2.x.
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch  # noqa: E402

import msprobe_cpp  # noqa: E402
from models import make_batches, make_model, make_optimizer, train_step  # noqa: E402


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = make_model("gpt")
    opt = make_optimizer(model)
    with tempfile.TemporaryDirectory() as tmp:
        dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp)
        start = None
        for i, (x, y) in enumerate(make_batches(model, args.warmup + args.steps)):
            train_step(model, opt, x, y, dbg)
            if i + 1 == args.warmup:
                start = rss_mb()
        end = rss_mb()
        written = list(pathlib.Path(tmp).iterdir())
    print(f"RSS after {args.warmup} warm-up steps: {start:.1f} MB; after {args.steps} more clean steps: "
          f"{end:.1f} MB; growth {end - start:+.1f} MB (target <= 5 MB); files written: {len(written)}")


if __name__ == "__main__":
    main()
