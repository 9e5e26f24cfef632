"""What the dump's writer thread costs in memory and saves in time (issue 56): TinyGPT (AdamW,
one thread) under task statistics, with `async_dump` on (the default: records handed to the
writer thread at stop()) and off (written in stop()), each in a fresh process, rounds
interleaved. Per run: the median step, the peak resident set (VmHWM) and its growth over the
timed steps, and one step's dump.json, the size of what a step hands over once formatted.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/async_dump_memory.py [--levels L1,mix] [--rounds 3]
    (torch 2: MSPROBE_CPP_PACKAGE_ROOT=$PWD/build-torch2/pkg build-torch2/venv/bin/python ...)

The writer holds at most 4 waiting steps beside the one it writes (docs/config.md#async_dump):
the bound on what pending steps hold is 5 steps' records, whatever the disk's speed.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))
sys.path.insert(0, str(ROOT / "tests" / "python"))


def status_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(level: str, mode: str, warmup: int, steps: int) -> dict:
    import torch
    import msprobe_cpp
    from models import make_batches, make_model, make_optimizer, train_step
    torch.set_num_threads(1)
    model = make_model("gpt")
    opt = make_optimizer(model)
    with tempfile.TemporaryDirectory() as tmp:
        dbg = None
        if mode != "bare":
            dbg = msprobe_cpp.PrecisionDebugger(task="statistics", level=level, dump_path=tmp,
                                                async_dump=(mode == "async"))
        times, hwm_warm = [], 0.0
        for i, (x, y) in enumerate(make_batches(model, warmup + steps)):
            t0 = time.perf_counter()
            train_step(model, opt, x, y, dbg)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
            if i + 1 == warmup:
                hwm_warm = status_mb("VmHWM")
        t0 = time.perf_counter()
        if dbg is not None:
            dbg.drain()
        drain_ms = 1e3 * (time.perf_counter() - t0)
        dumps = sorted(pathlib.Path(tmp).glob("step*/rank/dump.json"))
        return {"median_ms": 1e3 * statistics.median(times), "hwm_mb": status_mb("VmHWM"),
                "hwm_growth_mb": status_mb("VmHWM") - hwm_warm, "drain_ms": drain_ms,
                "steps_written": len(dumps), "dump_kb": dumps[-1].stat().st_size / 1024 if dumps else 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="L1,mix")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.warmup, args.steps)))
        return 0
    import torch
    modes = ("bare", "sync", "async")
    results = {(lv, m): [] for lv in args.levels.split(",") for m in modes}
    for r in range(args.rounds):
        for lv in args.levels.split(","):
            for m in modes[r % 3:] + modes[:r % 3]:
                out = subprocess.run([sys.executable, __file__, "--worker", lv, m, "--warmup", str(args.warmup),
                                      "--steps", str(args.steps)], capture_output=True, text=True, check=True)
                results[(lv, m)].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1} {lv} {m}: {results[(lv, m)][-1]}", file=sys.stderr, flush=True)
    print(f"Command: {' '.join(sys.argv)}; torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{args.warmup}+{args.steps} steps x {args.rounds} rounds\n")
    print("| level | mode | median step ms (x bare) | peak RSS MB | peak growth over the timed steps MB "
          "| drain after the last step ms | dump.json a step KB |")
    print("|---|---|---|---|---|---|---|")
    for lv in args.levels.split(","):
        bare = statistics.median(x["median_ms"] for x in results[(lv, "bare")])
        for m in modes:
            xs = results[(lv, m)]
            med = statistics.median(x["median_ms"] for x in xs)
            print(f"| {lv} | {m} | {med:.2f} ({med / bare:.2f}x) | {max(x['hwm_mb'] for x in xs):.1f} | "
                  f"{max(x['hwm_growth_mb'] for x in xs):.1f} | {statistics.median(x['drain_ms'] for x in xs):.1f} | "
                  f"{statistics.median(x['dump_kb'] for x in xs):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
