"""Per-step cost of the training monitor (issue 55): msprobe_cpp's `TrainerMon` and msprobe
26.2.0's own (`from msprobe.pytorch import TrainerMon`), against the same training with no
monitor, on the same models, seed and batches. Run in the torch 2.13 venv, where both import:

    PYTHONPATH=$PWD/build-torch213/pkg MSPROBE_CPP_PACKAGE_ROOT=$PWD/build-torch213/pkg \\
        OPENBLAS_NUM_THREADS=1 build-torch213/venv/bin/python bench/monitor_overhead.py [--rounds 3]
    ... bench/monitor_overhead.py --models tinygpt,hf_llama_tiny --rounds 5 --steps 20
    ... bench/monitor_overhead.py --profile hf_llama_tiny      # cProfile of our timed steps, top 15
                                                               # by cumulative and by own time
    ... bench/monitor_overhead.py --configs ours --monitor-config '{"xy_distribution": true}'
                                                               # one family's cost (file checks off)

Models: TinyGPT (examples/tinygpt.py via tests/python/models.py: 4 blocks, d=64, seq 32, batch
8); the real-model zoo's tiny HF llama and gpt2 (tests/python/real_models.py: hidden 32, 2
layers, batch 2, sequences of 16); a medium llama (bench/real_model_overhead.py's issue-47 llama:
hidden 512, 4 layers, 8 heads, intermediate 1376, 11.7 M parameters; here with the zoo's batch
of 2 x 16 tokens, so the step is mostly its parameters' work) and a medium gpt2 (hidden 256, 4
layers, 8 heads, 3.2 M parameters, 2 x 128 tokens: mostly activations' work); torchvision's
resnet18 (32x32 images, batch 2) where torchvision is installed (the 2.13 venv has none: it is
then skipped, with a note). Every model trains with torch.optim.Adam (lr 1e-3), dropout on
(torch.manual_seed(2) before the first step), one thread (torch.set_num_threads(1)).

Configurations: `bare` (no monitor), `ours` (msprobe_cpp.TrainerMon), `msprobe` (26.2.0's), both
made as `TrainerMon(config, params_have_main_grad=False)` and `.set_monitor(model, optimizer,
grad_acc_steps=1)` on one config:

    {"xy_distribution": true, "wg_distribution": true, "mv_distribution": true,
     "ops": ["min", "max", "norm"]}

No "targets": every module's input and output (forward and backward) and every parameter's
gradient and Adam moments, every step (`actv`, `actv_grad`, `grad_unreduced`, `grad_reduced`,
`exp_avg`, `exp_avg_sq` CSVs, one file per family a step).

How it is measured:
- One fresh process per model, configuration and round (a monitor cannot be taken out of a
  process). Rounds are interleaved: round r runs every model's three configurations in an order
  rotated per round and model, so the machine's drift falls on all alike.
- A process takes --warmup untimed steps then --steps timed ones (--medium-warmup and
  --medium-steps for the medium models and resnet18); a step is zero_grad, forward, backward and
  optimizer.step() (which the monitors wrap), timed with perf_counter; `loss.item()` is read
  after the timed window. Whatever a monitor does on its own thread is not in the wall time, so
  the process's CPU time a step (all threads) is recorded beside it, and our `drain()` (waiting
  for the written steps to reach the disk) is called after the last step and timed apart.
- Reported per model: the median step of each configuration over every timed step of every
  round, its ratio to bare's median, and the monitors' added times' quotient
  (ours - bare) / (msprobe - bare). Targets: ours <= 1.25x bare on the tiny models and TinyGPT,
  <= 1.10x on the medium ones, and ours' added time <= 0.2 of msprobe's.
- Checked in every monitored process: the CSVs it wrote, per family (one a step; exp_avg and
  exp_avg_sq from the second step on: Adam has no state before), and the rows of its last actv
  file (ours and msprobe must watch the same modules); a run that wrote fewer files, or a loss
  that differs from bare's (a monitor must not change a value), is flagged below the table.

Prints progress to stderr, and to stdout the command line, a markdown table ready for
bench/README.md, and the checks. Exit status 1 when a run failed or a check did not hold.
"""
from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import glob
import importlib.util
import json
import os
import pathlib
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

MODELS = ("tinygpt", "hf_llama_tiny", "hf_gpt2_tiny", "hf_llama_medium", "hf_gpt2_medium", "resnet18")
MEDIUM = ("hf_llama_medium", "hf_gpt2_medium", "resnet18")  # --medium-warmup/--medium-steps
REQUIRES = {"tinygpt": "torch", "resnet18": "torchvision"}  # the rest: transformers
CONFIGS = ("bare", "ours", "msprobe")
MONITOR_CONFIG = {"xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
                  "ops": ["min", "max", "norm"]}
FAMILIES = ("actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq")
TARGET_TINY, TARGET_MEDIUM, TARGET_SHARE = 1.25, 1.10, 0.20
POOL = 4  # distinct batches, cycled
MEDIUM_GPT2 = {"n_embd": 256, "n_layer": 4, "n_head": 8, "seq": 128}


# --- the models (built in the worker) -------------------------------------------------------------

def _causal_lm_batch(seq: int) -> Callable[[Any], Any]:
    import real_models
    import torch

    def make(g: Any) -> Any:
        ids = torch.randint(1, real_models.VOCAB, (real_models.BATCH, seq), generator=g)
        return real_models.Batch(kwargs={"input_ids": ids, "labels": ids.clone()})
    return make


def _gpt2_medium() -> Any:
    import real_models
    hf = real_models._hf()
    return hf.GPT2LMHeadModel(hf.GPT2Config(
        n_layer=MEDIUM_GPT2["n_layer"], n_embd=MEDIUM_GPT2["n_embd"], n_head=MEDIUM_GPT2["n_head"],
        vocab_size=real_models.VOCAB, n_positions=MEDIUM_GPT2["seq"],
        bos_token_id=real_models.VOCAB - 1, eos_token_id=real_models.VOCAB - 1))


def build(name: str) -> Tuple[Any, List[Any], Callable[[Any, Any], Any]]:
    """(model in train mode, POOL batches, loss_of(model, batch)), seeded: equal in every process."""
    import torch
    if name == "tinygpt":
        from models import compute_loss, make_batches, make_model
        model = make_model("gpt")  # seeds torch (0)
        model.train()
        return model, make_batches(model, POOL, seed=1, batch=8), lambda m, b: compute_loss(m, *b)
    import real_models
    zoo = {"hf_llama_tiny": "hf_llama_sdpa", "hf_gpt2_tiny": "hf_gpt2", "resnet18": "resnet18"}
    if name in zoo:
        model, make_batch, _ = real_models.build(zoo[name])
    else:
        torch.manual_seed(real_models.MODEL_SEED)
        if name == "hf_llama_medium":
            import real_model_overhead  # its issue-47 llama: hidden 512, 4 layers
            model, make_batch = real_model_overhead._llama_large(), real_models.causal_lm_batch
        elif name == "hf_gpt2_medium":
            model, make_batch = _gpt2_medium(), _causal_lm_batch(MEDIUM_GPT2["seq"])
        else:
            raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
        model.train()
    return model, real_models.batches(make_batch, POOL), real_models.loss_of


# --- one process: one model under one configuration ------------------------------------------------

def count_files(out: str) -> Dict[str, Any]:
    runs = [d for d in glob.glob(os.path.join(out, "*-rank*-*")) if os.path.isdir(d)]
    per_family = {f: 0 for f in FAMILIES}
    last_actv: Optional[str] = None
    for run in runs:
        for path in glob.glob(os.path.join(run, "*.csv")):
            family = os.path.basename(path).rsplit("_", 1)[0]
            per_family[family] = per_family.get(family, 0) + 1
            if family == "actv" and (last_actv is None or _step_of(path) > _step_of(last_actv)):
                last_actv = path
    rows = None
    if last_actv is not None:
        with open(last_actv, encoding="utf-8") as f:
            rows = sum(1 for _ in f) - 1
    return {"run_folders": len(runs), "csvs": per_family, "actv_rows": rows}


def _step_of(path: str) -> int:
    return int(os.path.basename(path).rsplit("_", 1)[1].split("-")[0])


def worker(model_name: str, config: str, config_path: str, warmup: int, steps: int,
           profile: bool = False, top: int = 15) -> Dict[str, Any]:
    import torch
    torch.set_num_threads(1)
    model, data, loss_of = build(model_name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    result: Dict[str, Any] = {"model": model_name, "config": config, "torch": torch.__version__,
                              "parameters": sum(p.numel() for p in model.parameters()),
                              "modules": sum(1 for _ in model.named_modules())}
    monitor = None
    if config != "bare":
        if config == "msprobe":
            from msprobe.pytorch import TrainerMon
        else:
            from msprobe_cpp import TrainerMon
        t0 = time.perf_counter()
        monitor = TrainerMon(config_path, params_have_main_grad=False)
        monitor.set_monitor(model, opt, grad_acc_steps=1)
        result["set_monitor_ms"] = 1e3 * (time.perf_counter() - t0)
    torch.manual_seed(2)  # dropout's draws (real_models.DROPOUT_SEED)
    times: List[float] = []
    cpu: List[float] = []
    losses: List[float] = []
    prof = cProfile.Profile() if profile else None
    gc.collect()
    for i in range(warmup + steps):
        batch = data[i % len(data)]
        if prof is not None and i == warmup:
            prof.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        if i >= warmup:
            times.append(t1 - t0)
            cpu.append(c1 - c0)
        losses.append(loss.item())
    if prof is not None:
        prof.disable()
        print(f"cProfile of the {steps} timed steps of {model_name} under {config} "
              f"(median step {1e3 * statistics.median(times):.2f} ms under the profiler)")
        stats = pstats.Stats(prof, stream=sys.stdout)
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)
    if config == "ours":
        t0 = time.perf_counter()
        monitor.drain()
        result["drain_ms"] = 1e3 * (time.perf_counter() - t0)
    result.update({"times": times, "cpu_times": cpu, "losses": losses, "steps_run": warmup + steps})
    if monitor is not None:
        result.update(count_files(os.environ["MONITOR_OUTPUT_DIR"]))
    return result


# --- the parent: rounds of fresh processes, then the table -----------------------------------------

def available(name: str) -> bool:
    return importlib.util.find_spec(REQUIRES.get(name, "transformers")) is not None


def median_ms(xs: List[float]) -> float:
    return 1e3 * statistics.median(xs)


def expected_csvs(n: int) -> Dict[str, int]:
    return {f: (n - 1 if f.startswith("exp_avg") else n) for f in FAMILIES}


def run_one(model: str, config: str, r: int, args: argparse.Namespace, tmp: pathlib.Path,
            config_path: pathlib.Path) -> Dict[str, Any]:
    medium = model in MEDIUM
    warmup, steps = (args.medium_warmup, args.medium_steps) if medium else (args.warmup, args.steps)
    out = tmp / f"{model}-{config}-r{r}"
    result_path = tmp / f"{model}-{config}-r{r}.json"
    log_path = tmp / f"{model}-{config}-r{r}.log"
    env = dict(os.environ, MONITOR_OUTPUT_DIR=str(out))
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", model, config,
           "--config-path", str(config_path), "--result", str(result_path),
           "--warmup", str(warmup), "--steps", str(steps)]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - t0
    if rc != 0 or not result_path.exists():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-6:]
        return {"error": f"exit {rc}: " + " | ".join(tail), "wall_s": wall}
    result = json.loads(result_path.read_text())
    result["wall_s"] = wall
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="bare is always run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps, tiny models")
    ap.add_argument("--steps", type=int, default=10, help="timed steps a round, tiny models")
    ap.add_argument("--medium-warmup", type=int, default=2)
    ap.add_argument("--medium-steps", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=900, help="seconds for one process")
    ap.add_argument("--json", help="also write every run's numbers here")
    ap.add_argument("--monitor-config", help="the monitor's config as JSON, instead of the issue's "
                    "(to see what each family costs; the files checked are then the config's)")
    ap.add_argument("--profile", metavar="MODEL", help="cProfile our timed steps of MODEL in this process")
    ap.add_argument("--profile-config", default="ours", choices=CONFIGS)
    ap.add_argument("--top", type=int, default=15, help="--profile's rows, by cumulative and by own time")
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    ap.add_argument("--config-path", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        result = worker(args.worker[0], args.worker[1], args.config_path, args.warmup, args.steps)
        pathlib.Path(args.result).write_text(json.dumps(result))
        return 0

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="monitor_overhead_"))
    config_path = tmp / "monitor_config.json"
    config_path.write_text(args.monitor_config or json.dumps(MONITOR_CONFIG))

    if args.profile:
        os.environ["MONITOR_OUTPUT_DIR"] = str(tmp / "profile")
        medium = args.profile in MEDIUM
        worker(args.profile, args.profile_config, str(config_path),
               args.medium_warmup if medium else args.warmup, args.medium_steps if medium else args.steps,
               profile=True, top=args.top)
        return 0

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}: expected one of {', '.join(MODELS)}")
    configs = ["bare"] + [c for c in args.configs.split(",") if c and c != "bare"]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c!r}: expected one of {', '.join(CONFIGS)}")
    notes: List[str] = []
    skipped = [m for m in models if not available(m)]
    for m in skipped:
        notes.append(f"{m}: skipped, `{REQUIRES.get(m, 'transformers')}` is not installed in "
                     f"{os.path.relpath(sys.prefix)}")
    models = [m for m in models if m not in skipped]

    load_before = os.getloadavg()
    started = time.perf_counter()
    results: Dict[Tuple[str, str], List[Dict[str, Any]]] = {(m, c): [] for m in models for c in configs}
    for r in range(args.rounds):
        for i, model in enumerate(models):
            k = (r + i) % len(configs)
            for config in configs[k:] + configs[:k]:
                res = run_one(model, config, r, args, tmp, config_path)
                results[(model, config)].append(res)
                if "error" in res:
                    print(f"round {r + 1}/{args.rounds} {model:>16} {config:>7}: FAILED {res['error']}",
                          file=sys.stderr, flush=True)
                else:
                    print(f"round {r + 1}/{args.rounds} {model:>16} {config:>7}: median "
                          f"{median_ms(res['times']):8.2f} ms over {len(res['times'])} steps "
                          f"(process {res['wall_s']:.1f} s)", file=sys.stderr, flush=True)
    total_s = time.perf_counter() - started

    ok = True
    rows: List[str] = []
    details: List[str] = []
    summary: Dict[str, Any] = {}
    for model in models:
        good = {c: [x for x in results[(model, c)] if "error" not in x] for c in configs}
        for c in configs:
            for x in results[(model, c)]:
                if "error" in x:
                    ok = False
                    notes.append(f"{model} under {c}: failed: {x['error']}")
        if not good["bare"]:
            continue
        base = good["bare"][0]
        target = TARGET_MEDIUM if model in MEDIUM else TARGET_TINY
        med = {c: median_ms([t for x in good[c] for t in x["times"]]) for c in configs if good[c]}
        cpu = {c: median_ms([t for x in good[c] for t in x["cpu_times"]]) for c in configs if good[c]}
        n_steps = len(base["times"])
        label = f"{model} ({base['parameters'] / 1e6:.2f} M params, {base['modules']} modules)"
        cells = [label, f"{base['steps_run'] - n_steps}+{n_steps} x {len(good['bare'])}", f"{med['bare']:.1f}"]
        entry: Dict[str, Any] = {"bare_ms": med["bare"], "cpu_ms": cpu}
        for c in ("ours", "msprobe"):
            if c not in configs:
                continue
            if c not in med:
                cells.append("failed")
                continue
            ratio = med[c] / med["bare"]
            per_round = [statistics.median(x["times"]) / statistics.median(b["times"])
                         for x, b in zip(good[c], good["bare"])]
            entry[c] = {"ms": med[c], "ratio": ratio, "per_round": per_round}
            mark = ""
            if c == "ours":
                mark = " ✓" if ratio <= target else f" ✗ (target {target:.2f})"
            cells.append(f"{med[c]:.1f} ({ratio:.2f}x){mark}")
            details.append(f"{model} {c}: per-round ratios {min(per_round):.2f}-{max(per_round):.2f}; "
                           f"CPU a step (all threads) {cpu[c]:.1f} ms against bare's {cpu['bare']:.1f} ms"
                           + (f"; set_monitor {statistics.median(x['set_monitor_ms'] for x in good[c]):.0f} ms"
                              if good[c] else "")
                           + (f"; drain after the last step {statistics.median(x['drain_ms'] for x in good[c]):.1f} ms"
                              if c == "ours" else ""))
            # the checks: files written, rows, losses
            for x in good[c]:
                want = expected_csvs(x["steps_run"])
                if x["csvs"] != want or x["run_folders"] != 1:
                    ok = False
                    notes.append(f"{model} under {c}: wrote {x['csvs']} in {x['run_folders']} run folder(s), "
                                 f"expected {want} in one")
                if x["losses"] != base["losses"]:
                    first = next(i for i, (a, b) in enumerate(zip(x["losses"], base["losses"])) if a != b)
                    notes.append(f"{model} under {c}: losses differ from bare's from step {first} on "
                                 f"({x['losses'][first]!r} against {base['losses'][first]!r})")
                    if c == "ours":
                        ok = False
        if "ours" in med and "msprobe" in med:
            share = (med["ours"] - med["bare"]) / (med["msprobe"] - med["bare"])
            entry["share"] = share
            cells.append(f"{share:.3f}" + (" ✓" if share <= TARGET_SHARE else " ✗"))
            rows_ours = {x["actv_rows"] for x in good["ours"]}
            rows_ms = {x["actv_rows"] for x in good["msprobe"]}
            if rows_ours != rows_ms:
                ok = False
                notes.append(f"{model}: actv rows a step, ours {sorted(rows_ours)} against msprobe's {sorted(rows_ms)}")
        elif "ours" in configs and "msprobe" in configs:
            cells.append("-")
        csv_cells = []
        for c in ("ours", "msprobe"):
            if good.get(c):
                x = good[c][0]
                csv_cells.append(f"{sum(x['csvs'].values())} ({x['actv_rows']} rows)")
        if csv_cells:
            cells.append(" / ".join(csv_cells))
        rows.append("| " + " | ".join(cells) + " |")
        summary[model] = entry

    cmd = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in ("PYTHONPATH", "MSPROBE_CPP_PACKAGE_ROOT",
                                                                     "OPENBLAS_NUM_THREADS") if k in os.environ)
    exe = os.path.relpath(sys.executable) if not os.path.relpath(sys.executable).startswith("..") else sys.executable
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    print(f"\nCommand: {cmd} {exe} bench/monitor_overhead.py {argv}".rstrip())
    import torch
    print(f"{datetime.date.today()}, torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
          f"{load_before[0]:.2f} before and {os.getloadavg()[0]:.2f} after, {total_s / 60:.1f} min in all; "
          f"config {json.dumps(MONITOR_CONFIG)}, Adam\n")
    header = ["model", "steps (warm-up+timed x rounds)", "bare ms"]
    if "ours" in configs:
        header.append("ours ms (x bare)")
    if "msprobe" in configs:
        header.append("msprobe 26.2.0 ms (x bare)")
    if "ours" in configs and "msprobe" in configs:
        header.append(f"added: ours / msprobe (target {TARGET_SHARE})")
    if "ours" in configs or "msprobe" in configs:
        header.append("CSVs a run (actv rows a step): " + " / ".join(c for c in ("ours", "msprobe") if c in configs))
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print(row)
    print(f"\nTargets: ours <= {TARGET_TINY}x bare on TinyGPT and the tiny models, <= {TARGET_MEDIUM}x on the "
          f"medium ones (and resnet18); ours' added time <= {TARGET_SHARE} of msprobe's.")
    print("\nDetails:")
    for d in details:
        print(f"- {d}")
    if notes:
        print("\nNotes and failed checks:")
        counts: Dict[str, int] = {}
        for n in notes:  # one line per distinct note, with the rounds it came from
            counts[n] = counts.get(n, 0) + 1
        for n, k in counts.items():
            print(f"- {n}" + (f" ({k} runs)" if k > 1 else ""))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"summary": summary, "notes": notes,
                                                       "runs": {f"{m}/{c}": v for (m, c), v in results.items()}},
                                                      indent=1))
    if ok:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"\nThe runs' logs and files are kept in {tmp}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
