"""Throughput of `msprobe-cpp check` on a large msprobe-style dump.json.

Generates a dump of --calls records (default 120000, about 110 MB) written with Python's json
module as msprobe writes it, runs `check` on it --repeat times, and prints MB/s and peak RSS
(ru_maxrss of the child) against the file size.

    /usr/bin/python3 bench/check_throughput.py [--calls N] [--gb G] [--repeat R] [--bin build/bin/msprobe-cpp]

With --gb 4 it shows that check streams: peak RSS stays flat while the file grows.

--from-model NAME dumps NAME of the real-model zoo (tests/python/real_models.py) instead, task
statistics for --steps steps at --level, with the python that runs this script, and times check
on that folder (every step's dump.json; the size is their sum). The Hugging Face models need the
torch 2 venv:

    build-torch2/venv/bin/python bench/check_throughput.py --from-model hf_llama_sdpa --level mix
"""
import argparse
import json
import math
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tensor(rng: random.Random, anomalous: bool = False) -> dict:
    mx = rng.uniform(0.1, 10.0)
    mn = -rng.uniform(0.1, 10.0)
    entry = {"type": "torch.Tensor", "dtype": rng.choice(["torch.float32", "torch.float16", "torch.bfloat16"]),
             "shape": [rng.choice([8, 16, 32]), rng.choice([64, 128, 256, 512])],
             "Max": mx, "Min": mn, "Mean": rng.uniform(mn, mx), "Norm": rng.uniform(1.0, 500.0),
             "requires_grad": rng.random() < 0.5}
    if anomalous:
        entry["Max"], entry["Mean"], entry["Norm"] = math.inf, math.nan, math.inf
    return entry


ANOMALOUS = [0.001]  # the share of records with an anomalous output (--anomalous)
LAYOUT = ["plain"]  # --layout


def nested(rng: random.Random, depth: int) -> object:
    """A deeply nested argument, as a module that takes a structure of tensors gets one: lists of
    lists and dicts down to `depth`, tensors and scalars at each level."""
    if depth == 0:
        return tensor(rng)
    inner = [nested(rng, depth - 1) for _ in range(2)]
    if rng.random() < 0.3:
        return {f"k{i}": v for i, v in enumerate(inner)}
    return inner + [{"type": "int", "value": rng.randrange(100)}]


def arguments(rng: random.Random) -> list:
    if LAYOUT[0] == "lists":  # torch.cat and the _foreach_ ops: one argument, a long list of tensors
        return [[tensor(rng) for _ in range(rng.randrange(16, 65))]]
    if LAYOUT[0] == "nested":
        return [nested(rng, rng.randrange(4, 7))]
    return [tensor(rng) for _ in range(rng.choice([1, 2, 3]))]


def record(rng: random.Random, name: str, n: int, backward: bool) -> tuple:
    anomalous = rng.random() < ANOMALOUS[0]
    if backward:
        return f"{name}.{n}.backward", {"input": [tensor(rng)],
                                          "output": [tensor(rng, anomalous), tensor(rng)]}
    args = arguments(rng)
    if rng.random() < 0.3:
        args.append({"type": "float", "value": rng.uniform(-2, 2)})
    kwargs = {}
    if rng.random() < 0.3:
        kwargs = {"dim": {"type": "int", "value": -1}, "weight": tensor(rng), "bias": None}
    return f"{name}.{n}.forward", {"input_args": args, "input_kwargs": kwargs,
                                   "output": [tensor(rng, anomalous)]}


def generate(path: pathlib.Path, calls: int, min_bytes: int = 0, seed: int = 0) -> int:
    """Writes the dump one record at a time, so a dump of many GB costs no memory; beyond the first
    5000 calls the record bodies are drawn again from those already made, with fresh names.
    Returns the number of calls written."""
    rng = random.Random(seed)
    apis = ["Functional.linear", "Torch.matmul", "Tensor.__mul__", "Functional.gelu", "Functional.softmax",
            "Torch.add", "Functional.layer_norm", "Tensor.masked_fill", "Functional.dropout", "Torch.cat"]
    counters = {a: 0 for a in apis}
    bodies = {"forward": [], "backward": []}
    written = 0
    with open(path, "w") as f:
        f.write('{\n "task": "statistics",\n "level": "L1",\n "dump_data_dir": null,\n "data": {')

        def emit(key: str, body: str) -> None:
            nonlocal written
            f.write((",\n  " if written else "\n  ") + json.dumps(key) + ": " + body)
            written += 1

        while written < calls or f.tell() < min_bytes:
            api = rng.choice(apis)
            n = counters[api]
            counters[api] += 1
            for backward in (False, True):
                if backward and rng.random() >= 0.5:
                    break
                kind = "backward" if backward else "forward"
                pool = bodies[kind]
                if len(pool) < 2500:
                    key, rec = record(rng, api, n, backward)
                    pool.append(json.dumps(rec, indent=1).replace("\n", "\n  "))
                    emit(key, pool[-1])
                else:
                    emit(f"{api}.{n}.{kind}", pool[rng.randrange(len(pool))])
        f.write("\n }\n}")
    return written


# Runs the check from a fresh, small interpreter: a child spawned straight from a big process (a
# test run that imported torch) starts with its parent's peak RSS as its own, and the figure would
# measure the parent.
_MEASURE = """
import os, sys, time
devnull = os.open(os.devnull, os.O_WRONLY)
start = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - start, os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def run_check(binary: str, path: pathlib.Path, *options: str) -> tuple:
    """(seconds, peak RSS in bytes) of one `check` run."""
    out = subprocess.run([sys.executable, "-S", "-c", _MEASURE, binary, "check", *options, str(path)],
                         check=True, capture_output=True, text=True).stdout.split()
    elapsed, code, maxrss_kib = float(out[0]), int(out[1]), int(out[2])
    if code not in (0, 1):
        raise SystemExit(f"check failed with status {code}")
    return elapsed, maxrss_kib * 1024  # ru_maxrss is in KiB on Linux


def check_model_dump(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))
    import msprobe_cpp
    import real_models
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(args.keep or tmp) / "dump"
        t0 = time.perf_counter()
        debugger = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(folder), level=args.level,
                                                 step=list(range(args.steps)))
        real_models.run(args.from_model, debugger=debugger, steps=args.steps)
        files = sorted(folder.rglob("dump.json"))
        size = sum(f.stat().st_size for f in files)
        print(f"{args.from_model} at {args.level}: {len(files)} dump.json files, {size / 1e6:.1f} MB in "
              f"{time.perf_counter() - t0:.1f} s")
        results = [run_check(args.bin, folder, "--format", args.format) for _ in range(args.repeat)]
        best = min(r[0] for r in results)
        print(f"check: best of {args.repeat}: {best:.3f} s = {size / 1e6 / best:.0f} MB/s "
              f"(all runs: {', '.join(f'{r[0]:.3f}' for r in results)} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=120000)
    ap.add_argument("--gb", type=float, default=0.0, help="write calls until the file holds this many GB")
    ap.add_argument("--keep", help="write the dump here and keep it (default: a temporary folder)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--anomalous", type=float, default=0.001,
                    help="share of records with an anomalous output (0.15: ~36 MB of findings in 600 MB)")
    ap.add_argument("--format", default="json", choices=("json", "text"))
    ap.add_argument("--layout", default="plain", choices=("plain", "lists", "nested"),
                    help="the calls' arguments: 1-3 tensors; a list of 16-64 tensors (torch.cat, "
                         "_foreach_); a structure of lists and dicts 4-6 deep")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "msprobe-cpp"))
    ap.add_argument("--from-model", help="a real-model zoo name: check its own dump, not a generated one")
    ap.add_argument("--level", default="mix", help="--from-model: the dump's level")
    ap.add_argument("--steps", type=int, default=20, help="--from-model: steps dumped")
    ap.add_argument("--generate-to", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.from_model:
        check_model_dump(args)
        return
    ANOMALOUS[0] = args.anomalous
    LAYOUT[0] = args.layout
    if args.generate_to:
        print(generate(pathlib.Path(args.generate_to), args.calls, int(args.gb * 1e9)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(args.keep or tmp) / "dump.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        calls = subprocess.run([sys.executable, __file__, "--calls", str(args.calls), "--gb", str(args.gb),
                                "--anomalous", str(args.anomalous), "--layout", args.layout,
                                "--generate-to", str(path)],
                               check=True, capture_output=True, text=True).stdout
        size = path.stat().st_size
        print(f"generated {calls.strip()} calls, {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
        results = [run_check(args.bin, path, "--format", args.format) for _ in range(args.repeat)]
        best = min(r[0] for r in results)
        rss = max(r[1] for r in results)
        print(f"check: best of {args.repeat}: {best:.3f} s = {size / 1e6 / best:.0f} MB/s "
              f"(all runs: {', '.join(f'{r[0]:.3f}' for r in results)} s)")
        print(f"peak RSS {rss / 1e6:.1f} MB = {rss / size:.2f}x the file size")


if __name__ == "__main__":
    main()
