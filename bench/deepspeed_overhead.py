"""What the guard costs a clean DeepSpeed run: 2 gloo ranks on DeepSpeed's CPU accelerator train
tests/python/ds_worker.py's MLP (ZeRO stage, dtype, 2 micro-batches a step, clipping, default
buckets) without the tool ("bare") and under overflow_check at L1, in interleaved rounds; prints
the median seconds per step (slowest rank) of each and their ratio, for every stage and dtype.

    OPENBLAS_NUM_THREADS=1 build-torch2/venv/bin/python bench/deepspeed_overhead.py [--steps 30] [--rounds 3]

The package is MSPROBE_CPP_PACKAGE_ROOT's (like the tests), else python/ of this checkout. The
model is tiny: a step is a few milliseconds of DeepSpeed's own Python, so the ratio is the
per-call cost's upper end, not what a real model pays.
"""
import argparse
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
from dist_runs import run_ranks  # noqa: E402
from testenv import TESTS  # noqa: E402

WORLD = 2
TIMEOUT_S = 600.0


def seconds_per_step(stage: int, dtype: str, bare: bool, steps: int) -> float:
    args = ["--stage", str(stage), "--dtype", dtype, "--steps", str(steps)] + (["--bare"] if bare else [])
    with tempfile.TemporaryDirectory() as out:
        ranks = run_ranks(pathlib.Path(out), WORLD, args, timeout=TIMEOUT_S, worker=TESTS / "ds_worker.py")
        if ranks.returncodes != [0] * WORLD or not all(r["finished"] for r in ranks.results):
            raise SystemExit(f"stage {stage} {dtype} failed\n{ranks.context()}")
        return max(r["seconds_per_step"] for r in ranks.results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    args = ap.parse_args()
    print(f"{'stage':>5} {'dtype':>5} {'bare ms/step':>13} {'guard ms/step':>14} {'ratio':>6}")
    for stage in [int(s) for s in args.stages.split(",")]:
        for dtype in args.dtypes.split(","):
            bare, guard = [], []
            for _ in range(args.rounds):
                bare.append(seconds_per_step(stage, dtype, True, args.steps))
                guard.append(seconds_per_step(stage, dtype, False, args.steps))
            b, g = statistics.median(bare), statistics.median(guard)
            print(f"{stage:>5} {dtype:>5} {b * 1e3:>13.2f} {g * 1e3:>14.2f} {g / b:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
