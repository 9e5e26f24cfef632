"""Per-step cost of the live dump: instrumented / uninstrumented training-step time, in one process.

Workloads: TinyGPT from examples/tinygpt.py (4 blocks, d=64, seq 32, AdamW) and a small ConvNet
(conv/batchnorm/relu/pool twice, linear), batch 8, torch.set_num_threads(1). The configurations:
task `statistics` at L1, mix and L0, with a `step` list that covers every step it runs, so each
step is dumped and the files stop() writes are part of the cost; and `overflow-L1`, task
overflow_check at L1 on a clean run (nothing is written). Targets (issue 24, OpenBLAS, one thread):
TinyGPT overflow-L1 <= 1.30, L1 <= 1.50, mix <= 1.70, L0 <= 1.15; ConvNet overflow-L1 <= 1.05,
L1 <= 1.10, mix <= 1.25, L0 <= 1.10. `--extra '{"async_dump": true}'` measures with the writer
thread (docs/config.md).

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/hook_overhead.py        # both models, all configs
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/hook_overhead.py --models gpt --configs L1 \
        --steps 50 --extra '{"statistics": {"list": ["nothing_matches"]}}'

It refuses to report on the reference BLAS (a 256x256 float32 matmul slower than 1 ms): Debian's
default libblas makes a step ten times slower and hides the hooks' per-call cost in the ratio.
Install an optimized one (`apt-get install libopenblas0-pthread`) and run with
OPENBLAS_NUM_THREADS=1.

How it is measured:
- Rounds. The --steps timed steps of each configuration are split over --rounds rounds; every round
  times one segment of the baseline and of each level, in an order rotated from round to round, so
  slow drift of the machine (other jobs, clocks) falls on all of them alike. The ratio is the
  median step of a level over the median step of the baseline, all rounds pooled; the spread of
  the per-round ratios is printed beside it.
- One debugger at a time. Constructing a PrecisionDebugger retires the previous one, so each
  instrumented segment builds its own, with `step` = exactly the steps of that segment: after its
  last step the debugger removes every hook by itself, and the next segment (the baseline's
  included) starts from an uninstrumented torch. That the wrapped torch functions are the
  originals again is checked after each segment, so an idle cost of leftover hooks cannot hide in
  the baseline.
- Warm-up. Each segment begins with --warmup untimed steps (the first start() installs the hooks;
  the baseline gets the same steps so all runs stay in lockstep); they are dumped too.
- Each configuration trains its own copy of the same initial model on the same data, so module
  hooks never sit on another configuration's model, and every copy must end with exactly the
  baseline's losses: a dump must not change a value.

- The floor column: 1 + the time to compute the statistics of the step's distinct tensor versions
  once, with no hooks, over the baseline's median step (bench/stats_floor.py: the tensors of one
  step's task-tensor dump at the configuration's level, deduplicated by content, through the hooks'
  own statistics kernel). How far a ratio is above it is what bookkeeping and repeat reads cost.

If msprobe_cpp cannot be imported, only the baseline is measured, with a note saying why.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import pathlib
import re
import shutil
import statistics
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
# The package as built in place, or (MSPROBE_CPP_PACKAGE_ROOT) the one tools/test.sh builds for torch 2.x.
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import make_batches, make_model, make_optimizer, train_step  # noqa: E402
from stats_floor import measure as measure_floor, step_tensors  # noqa: E402

# configuration -> (task, level)
CONFIGS = {"L1": ("statistics", "L1"), "mix": ("statistics", "mix"), "L0": ("statistics", "L0"),
           "overflow-L1": ("overflow_check", "L1")}
TARGETS = {("gpt", "overflow-L1"): 1.30, ("gpt", "L1"): 1.50, ("gpt", "mix"): 1.70, ("gpt", "L0"): 1.15,
           ("convnet", "overflow-L1"): 1.05, ("convnet", "L1"): 1.10, ("convnet", "mix"): 1.25,
           ("convnet", "L0"): 1.10}
# "gpt-nomask" is the same TinyGPT without its causal mask: no -inf anywhere, so its ratio beside
# "gpt"'s shows what the -inf masks (the explained path of overflow_check) cost.
# "gpt-foreach" trains it as many scripts do: a foreach optimizer (torch._foreach_* calls) and
# zero_grad(set_to_none=False) (Tensor.zero_ on every gradient): what the wrap list's choice of
# optimizer and zeroing calls costs.
MODELS = ("gpt", "gpt-nomask", "gpt-foreach", "convnet", "mlp")


def build_model(name: str) -> torch.nn.Module:
    if name == "gpt-nomask":
        return make_model("gpt", mask_mode="none")
    return make_model("gpt" if name == "gpt-foreach" else name)

# Attributes an L1 dump wraps, one per namespace; identity with the originals means no hook is left.
PROBES: List[Tuple[Any, str]] = [(torch, "tanh"), (F, "linear"), (torch.Tensor, "__mul__"), (torch.Tensor, "add_")]


@dataclass
class Run:
    name: str
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    level: Optional[str] = None  # the configuration's name; None for the baseline
    set_to_none: bool = True  # zero_grad's
    rounds: List[List[float]] = field(default_factory=list)  # step times (s), one list per round
    losses: List[float] = field(default_factory=list)
    steps_dumped: int = 0
    steps_expected: int = 0
    records: List[int] = field(default_factory=list)
    dump_bytes: List[int] = field(default_factory=list)
    error: Optional[str] = None
    leftover_hooks: bool = False
    cache_hits: int = 0  # the statistics cache's, over every instrumented step
    cache_misses: int = 0

    @property
    def times(self) -> List[float]:
        return [t for seg in self.rounds for t in seg]


def deep_merge(base: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def write_config(folder: pathlib.Path, config: str, steps: int, extra: Dict[str, Any]) -> pathlib.Path:
    """A full config.json, so that whatever --extra adds (any section) travels in the file."""
    task, level = CONFIGS[config]
    cfg: Dict[str, Any] = {
        "task": task,
        "dump_path": str(folder / "dump"),
        "rank": [],
        "step": list(range(steps)),
        "level": level,
        "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    }
    deep_merge(cfg, copy.deepcopy(extra))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg, indent=1))
    return path


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_steps(run: Run, n: int, data: List[Any], device: str, debugger: Any) -> List[float]:
    times: List[float] = []
    for _ in range(n):
        x, y = data[len(run.losses) % len(data)]
        sync(device)
        t0 = time.perf_counter()
        loss = train_step(run.model, run.opt, x, y, debugger, set_to_none=run.set_to_none)
        sync(device)
        times.append(time.perf_counter() - t0)
        run.losses.append(loss.item())  # outside the timed window and after stop()
    return times


def collect_dumps(run: Run, dump_path: pathlib.Path, steps_run: int) -> None:
    """Counts and checks what stop() wrote in a segment, then deletes it (untimed), so the temp dir
    does not grow and the next segment's debugger starts from step 0 in an empty folder."""
    run.steps_expected += steps_run
    if not dump_path.exists():
        return
    for step_dir in sorted(dump_path.glob("step*")):
        for dump in step_dir.glob("rank*/dump.json"):
            run.steps_dumped += 1
            run.dump_bytes.append(sum(f.stat().st_size for f in dump.parent.rglob("*") if f.is_file()))
            try:
                doc = json.loads(dump.read_text())
            except ValueError as e:
                run.error = run.error or f"{dump}: unreadable dump.json: {e}"
                continue
            run.records.append(len(doc.get("data", {})))
            if run.level and doc.get("level") != CONFIGS[run.level][1]:
                run.error = run.error or f"{dump}: level {doc.get('level')!r}, expected {CONFIGS[run.level][1]!r}"
    shutil.rmtree(dump_path, ignore_errors=True)


def median_ms(times: List[float]) -> float:
    return 1e3 * statistics.median(times) if times else math.nan


def blas_info() -> str:
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def matmul_ms() -> float:
    """Best of 5 256x256 float32 matmuls: the reference BLAS takes ~5 ms, OpenBLAS ~0.3 ms."""
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def import_debugger() -> Any:
    """msprobe_cpp.PrecisionDebugger, or None after printing why not."""
    try:
        import msprobe_cpp
        # python/msprobe_cpp without a built _C, or without __init__.py, can import half-way
        return msprobe_cpp.PrecisionDebugger
    except Exception as e:  # ImportError, AttributeError, or a broken build failing at load
        print(f"NOTE: msprobe_cpp is not usable ({type(e).__name__}: {e}); measuring the baseline only. "
              f"Build the extension and run with PYTHONPATH={ROOT / 'python'}.")
        return None


def configs_of(ap: argparse.ArgumentParser, text: str, allowed: Sequence[str]) -> List[str]:
    """--configs' names, each one of `allowed` (else the parser's error)."""
    configs = [c.strip() for c in text.split(",") if c.strip()]
    for c in configs:
        if c not in allowed:
            ap.error(f"--configs: unknown configuration {c!r}: expected some of {', '.join(allowed)}")
    return configs


def segment_order(configs: List[str], r: int) -> List[str]:
    """Round r's segments: the baseline first, then the configurations rotated by r, so that slow
    drift of the machine falls on all of them alike."""
    k = r % len(configs) if configs else 0
    return ["baseline"] + configs[k:] + configs[:k]


def measure_model(model_name: str, configs: List[str], args: argparse.Namespace, extra: Dict[str, Any],
                  Debugger: Any, rounds: int, seg_steps: List[int]) -> Tuple[Dict[str, Any], bool]:
    base = build_model(model_name)
    base.to(args.device)
    # A pool drawn once, indexed by each run's own step count: every run sees the same sequence.
    data = make_batches(base, 16, seed=0, batch=args.batch, device=args.device)
    originals = [getattr(owner, name) for owner, name in PROBES]

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="hook_overhead_"))
    runs: Dict[str, Run] = {}
    for name in ["baseline"] + configs:
        model = copy.deepcopy(base)
        foreach = model_name == "gpt-foreach"
        runs[name] = Run(name=name, model=model, opt=make_optimizer(model, foreach=foreach),
                         level=None if name == "baseline" else name, set_to_none=not foreach)

    print(f"\n== model {model_name}")
    for r in range(rounds):
        for name in segment_order(configs, r):
            run = runs[name]
            if run.error:
                continue
            gc.collect()  # so a collection owed by the previous segment does not land in this one
            try:
                if run.level is None:
                    run_steps(run, args.warmup, data, args.device, None)
                    times = run_steps(run, seg_steps[r], data, args.device, None)
                else:
                    clean_before = [getattr(owner, attr) for owner, attr in PROBES] == originals
                    n = args.warmup + seg_steps[r]
                    cfg = write_config(tmp / run.level, run.level, n, extra)
                    dump_path = pathlib.Path(json.loads(cfg.read_text())["dump_path"])
                    shutil.rmtree(dump_path, ignore_errors=True)
                    debugger = Debugger(config_path=str(cfg))
                    run_steps(run, args.warmup, data, args.device, debugger)
                    times = run_steps(run, seg_steps[r], data, args.device, debugger)
                    run.cache_hits += debugger._session.stats_cache_hits
                    run.cache_misses += debugger._session.stats_cache_misses
                    del debugger
                    collect_dumps(run, dump_path, n)
                    if clean_before and [getattr(owner, attr) for owner, attr in PROBES] != originals:
                        run.leftover_hooks = True
            except Exception as e:
                run.error = f"round {r + 1}: {type(e).__name__}: {e}"
                print(f"  round {r + 1}/{rounds} {name:>11}: FAILED: {run.error}", flush=True)
                continue
            run.rounds.append(times)
            print(f"  round {r + 1}/{rounds} {name:>11}: median {median_ms(times):8.2f} ms over {len(times)} steps",
                  flush=True)

    # The floor of each level: its step's distinct tensor versions' statistics once, no hooks.
    floors: Dict[str, Any] = {}
    if Debugger is not None:
        for level in sorted({CONFIGS[c][1] for c in configs}):
            model = copy.deepcopy(base)
            opt = make_optimizer(model, foreach=model_name == "gpt-foreach")
            x, y = data[0]
            tensors = step_tensors(Debugger, level, model, lambda: train_step(
                model, opt, x, y, None, set_to_none=model_name != "gpt-foreach"))
            floors[level] = measure_floor(tensors)

    baseline = runs["baseline"]
    results: Dict[str, Any] = {"baseline": {"median_ms": median_ms(baseline.times), "min_ms": 1e3 * min(baseline.times),
                                            "round_medians_ms": [median_ms(s) for s in baseline.rounds]},
                               "configs": {}}
    print()
    hdr = (f"{model_name + ' config':<20}{'median ms':>10}{'min ms':>9}{'ratio':>7}{'min/min':>8}{'per round':>13}"
           f"{'floor':>7}{'target':>8}{'dumped':>8}{'records':>8}{'KB/step':>8}  losses")
    print(hdr)
    print("-" * len(hdr))
    print(f"{'baseline':<20}{median_ms(baseline.times):>10.2f}{1e3 * min(baseline.times):>9.2f}")
    failed = False
    for level in configs:
        run = runs[level]
        entry: Dict[str, Any] = {"error": run.error, "leftover_hooks": run.leftover_hooks}
        times = run.times
        target = TARGETS.get((model_name, level))
        if times:
            ratio = median_ms(times) / median_ms(baseline.times)
            per_round = [statistics.median(c) / statistics.median(b) for c, b in zip(run.rounds, baseline.rounds)]
            n = min(len(run.losses), len(baseline.losses))
            same = run.losses[:n] == baseline.losses[:n]
            rec = f"{statistics.median(run.records):.0f}" if run.records else "-"
            kb = f"{statistics.median(run.dump_bytes) / 1024:.0f}" if run.dump_bytes else "-"
            spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
            # The fastest steps are the least disturbed by a noisy shared machine: their ratio is
            # printed beside the medians'.
            min_ratio = min(times) / min(baseline.times)
            floor = floors.get(CONFIGS[level][1])
            floor_ratio = 1.0 + floor.ms / median_ms(baseline.times) if floor else None
            print(f"{level:<20}{median_ms(times):>10.2f}{1e3 * min(times):>9.2f}{ratio:>7.2f}{min_ratio:>8.2f}{spread:>13}"
                  f"{(f'{floor_ratio:.2f}' if floor_ratio else '-'):>7}{(f'{target:.2f}' if target else '-'):>8}{f'{run.steps_dumped}/{run.steps_expected}':>8}"
                  f"{rec:>8}{kb:>8}  {'identical' if same else 'DIFFER'}")
            entry.update({"median_ms": median_ms(times), "min_ms": 1e3 * min(times), "ratio": ratio,
                          "min_ratio": min_ratio, "ratio_per_round": per_round, "target": target,
                          "floor_ratio": floor_ratio, "floor": floor.__dict__ if floor else None,
                          "steps_dumped": run.steps_dumped, "steps_expected": run.steps_expected,
                          "records_per_step": statistics.median(run.records) if run.records else None,
                          "dump_bytes_per_step": statistics.median(run.dump_bytes) if run.dump_bytes else None,
                          "losses_identical": same})
            if not same:
                failed = True
                print(f"  {level}: losses differ from the baseline's: the dump changed a value")
            expect_dumps = CONFIGS[level][0] != "overflow_check" and extra.get("task", "statistics") != "overflow_check"
            if expect_dumps and run.steps_dumped != run.steps_expected:
                failed = True
                print(f"  {level}: {run.steps_dumped} of {run.steps_expected} steps dumped")
        else:
            print(f"{level:<20}{'failed':>10}")
        if run.leftover_hooks:
            failed = True
            print(f"  {level}: torch functions still wrapped after the debugger's last step: later segments "
                  "(the baseline's too) ran with its hooks")
        if run.error:
            failed = True
            print(f"  {level}: {run.error}")
        results["configs"][level] = entry
    for level, f in floors.items():
        print(f"  floor {level}: statistics of the step's {f.distinct} distinct tensor versions ({f.megabytes:.1f} MB; "
              f"{f.entries} tensor entries) once, no hooks: {f.ms:.2f} ms = "
              f"+{f.ms / median_ms(baseline.times):.2f} of the baseline step; every entry scanned (no cache): "
              f"{f.every_entry_ms:.2f} ms, {100 * (1 - f.ms / f.every_entry_ms):.0f}% of it on versions already seen")
    for level in configs:
        run = runs[level]
        if run.cache_hits or run.cache_misses:
            print(f"  statistics cache {level}: {run.cache_hits / max(run.steps_expected, 1):.0f} hits and "
                  f"{run.cache_misses / max(run.steps_expected, 1):.0f} misses a step (tensors of >= 2048 elements)")
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return results, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated configurations measured besides the baseline ({', '.join(CONFIGS)})")
    ap.add_argument("--models", default="gpt,convnet", help=f"comma-separated models ({', '.join(MODELS)})")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per configuration, all rounds together")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the timed steps are split over")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of every segment")
    ap.add_argument("--extra", default="{}", help="JSON merged into every debugger's config.json")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--allow-reference-blas", action="store_true",
                    help="report even on the reference BLAS (the ratios then understate the overhead)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (the config files)")
    ap.add_argument("--json", type=pathlib.Path, help="also write the results to this file")
    args = ap.parse_args()

    configs = configs_of(ap, args.configs, list(CONFIGS))
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            ap.error(f"--models: unknown model {m!r}: expected some of {', '.join(MODELS)}")
    try:
        extra = json.loads(args.extra)
    except ValueError as e:
        ap.error(f"--extra: not JSON: {e}")
    if not isinstance(extra, dict):
        ap.error("--extra: expected a JSON object")
    if args.steps < 1 or args.rounds < 1 or args.warmup < 1:
        ap.error("--steps, --rounds and --warmup must be >= 1 (the first warm-up step installs the hooks)")
    rounds = min(args.rounds, args.steps)
    # Split --steps over the rounds as evenly as possible.
    seg_steps = [args.steps // rounds + (1 if r < args.steps % rounds else 0) for r in range(rounds)]

    torch.set_num_threads(args.threads)
    mm = matmul_ms()
    print(f"torch {torch.__version__}, BLAS {blas_info()} (256x256 float32 matmul {mm:.2f} ms), "
          f"{torch.get_num_threads()} thread(s), batch {args.batch}, device {args.device}; {args.steps} timed steps "
          f"per configuration in {rounds} rounds, {args.warmup} warm-up step(s) per segment")
    if args.device == "cpu" and mm > 1.0 and not args.allow_reference_blas:
        print("REFUSED: this torch runs on the reference BLAS, which hides the hooks' cost in a slow step. "
              "apt-get install libopenblas0-pthread, and run with OPENBLAS_NUM_THREADS=1.")
        return 2
    Debugger = import_debugger()
    if Debugger is None:
        configs = []

    results: Dict[str, Any] = {"torch": torch.__version__, "blas": blas_info(), "matmul_ms": mm,
                               "threads": torch.get_num_threads(), "batch": args.batch, "steps": args.steps,
                               "rounds": rounds, "warmup": args.warmup, "extra": extra, "models": {}}
    failed = False
    for m in models:
        results["models"][m], model_failed = measure_model(m, configs, args, extra, Debugger, rounds, seg_steps)
        failed = failed or model_failed
    if Debugger is None:
        print("\n(baseline only: msprobe_cpp not usable)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
