"""Per-step cost of msprobe's other in-process tasks (issue 46): grad_probe at L0, L1 and L2, and
free_benchmark's check in improve_precision and add_noise, as the ratio of a training step to the
same step without any tool, for msprobe_cpp and, where it is installed (the torch 2 venv),
msprobe 1.1.1 on the same workload.

Workloads: TinyGPT (tests/python/models.py, as bench/hook_overhead.py trains it) and the real-model
zoo (tests/python/real_models.py): the HF models in the torch 2 venv, the torchvision ones on
torch 1.13. One thread.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/task_overhead.py
    OPENBLAS_NUM_THREADS=1 MSPROBE_CPP_PACKAGE_ROOT=build-torch2/pkg build-torch2/venv/bin/python bench/task_overhead.py
    ... bench/task_overhead.py --models tinygpt,hf_gpt2 --configs grad-L1 --tools ours --steps 20

Each (model, tool, configuration) runs in a process of its own: msprobe's debugger is one per
process, and its optimizer hook (grad_probe) stays for the process's life. In that process a
model trains `--steps` steps without any tool, then a copy with the same weights trains the same
steps under the tool; the ratio is the tool's median step over the bare median step. For
msprobe_cpp the losses of the two must be bit-identical (the tool must not change training); a
difference is reported. Both tools run inside torch.distributed (gloo, one rank): msprobe's
free_benchmark writes its rows only there.

Targets (issue 46): grad_probe L1 <= 1.10 on every zoo model and at most a tenth of msprobe's
added time; free_benchmark check at most half of msprobe's added time.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

CONFIGS = {
    "grad-L0": {"task": "grad_probe", "grad_probe": {"grad_level": "L0"}},
    "grad-L1": {"task": "grad_probe", "grad_probe": {"grad_level": "L1"}},
    "grad-L2": {"task": "grad_probe", "grad_probe": {"grad_level": "L2"}},
    "fb-improve": {"task": "free_benchmark", "free_benchmark": {"pert_mode": "improve_precision"}},
    "fb-noise": {"task": "free_benchmark", "free_benchmark": {"pert_mode": "add_noise"}},
}
ZOO = ("hf_llama_sdpa", "hf_gpt2", "hf_bert_mlm", "resnet18", "efficientnet_b0")
TARGET_RATIO = {"grad-L1": 1.10}


def worker(args: argparse.Namespace) -> None:
    """One (model, tool, configuration): prints one JSON line of step times and losses."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + os.getpid() % 20000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    step, model_a, model_b = make_workload(args.model)
    n = args.warmup + args.steps
    bare = [step(model_a, i, None) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dict(CONFIGS[args.config], dump_path=str(pathlib.Path(tmp) / "dump"), rank=[], step=[], level="L1")
        path = pathlib.Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg))
        if args.tool == "msprobe":
            from msprobe.pytorch import PrecisionDebugger
        else:
            from msprobe_cpp import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=str(path))
        if cfg["task"] == "grad_probe":
            debugger.monitor(model_b[0])
            debugger_for_steps = None
        else:
            debugger_for_steps = debugger
        tool = [step(model_b, i, debugger_for_steps) for i in range(n)]
        if args.tool == "ours" and cfg["task"] == "grad_probe":
            debugger._task.drain()  # the write thread's last files, before the folder goes
        rows = 0
        if args.keep_rows and (pathlib.Path(cfg["dump_path"]) / "free_benchmark.csv").exists():
            import shutil
            shutil.copy(pathlib.Path(cfg["dump_path"]) / "free_benchmark.csv", args.keep_rows)
        csv = pathlib.Path(cfg["dump_path"]) / "free_benchmark.csv"
        if csv.exists():
            rows = len(csv.read_text().splitlines()) - 1
    print(json.dumps({"bare": [t for t, _ in bare[args.warmup:]], "tool": [t for t, _ in tool[args.warmup:]],
                      "same_losses": [l for _, l in bare] == [l for _, l in tool], "rows": rows}))
    dist.destroy_process_group()


def make_workload(name: str) -> Any:
    """(step(model_and_optimizer, i, debugger) -> (seconds, loss), two copies of the model)."""
    import torch
    if name == "tinygpt":
        from models import make_batches, make_model, make_optimizer, train_step
        copies = []
        for _ in range(2):
            m = make_model("gpt")
            copies.append((m, make_optimizer(m)))
        data = make_batches(copies[0][0], 16, seed=0)

        def step(mo: Any, i: int, debugger: Any) -> Any:
            x, y = data[i % len(data)]
            t0 = time.perf_counter()
            loss = train_step(mo[0], mo[1], x, y, debugger)
            return time.perf_counter() - t0, loss.item()
        return step, copies[0], copies[1]
    import real_models
    data = real_models.batches(real_models.MODELS[name].make_batch, 8)
    copies = []
    for _ in range(2):
        model, _, make_optimizer = real_models.build(name)
        copies.append((model, make_optimizer(model), torch.Generator()))
    torch.manual_seed(real_models.DROPOUT_SEED)
    states = [torch.get_rng_state(), torch.get_rng_state()]

    def zoo_step(mo: Any, i: int, debugger: Any) -> Any:
        which = 0 if mo is copies[0] else 1
        torch.set_rng_state(states[which])  # each copy draws its own dropout sequence
        t0 = time.perf_counter()
        if debugger is not None:
            debugger.start(mo[0])
        mo[1].zero_grad()
        loss = real_models.loss_of(mo[0], data[i % len(data)])
        loss.backward()
        mo[1].step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        elapsed = time.perf_counter() - t0
        states[which] = torch.get_rng_state()
        return elapsed, loss.item()
    return zoo_step, copies[0], copies[1]


def measure(model: str, tool: str, config: str, args: argparse.Namespace) -> Dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", "--model", model, "--tool", tool, "--config", config,
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {args.timeout} s"}
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["exit " + str(done.returncode)])[-1][:200]}
    r = json.loads(lines[-1])
    bare, tool_ms = statistics.median(r["bare"]) * 1e3, statistics.median(r["tool"]) * 1e3
    return {"bare_ms": bare, "tool_ms": tool_ms, "ratio": tool_ms / bare, "added_ms": tool_ms - bare,
            "same_losses": r["same_losses"], "rows": r["rows"]}


def available(model: str) -> bool:
    import importlib.util
    if model == "tinygpt":
        return True
    import real_models
    return importlib.util.find_spec(real_models.MODELS[model].requires) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--tool", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--models", help="comma-separated, of tinygpt and " + ", ".join(ZOO) + " (default: all available)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, of " + ", ".join(CONFIGS))
    ap.add_argument("--tools", default="ours,msprobe", help="ours, msprobe (where installed)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps of each run")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep-rows", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    import importlib.util
    import torch
    models = args.models.split(",") if args.models else ["tinygpt"] + [m for m in ZOO if available(m)]
    configs = args.configs.split(",")
    tools = [t for t in args.tools.split(",") if t != "msprobe" or importlib.util.find_spec("msprobe")]
    import hook_overhead as ho
    mm = ho.matmul_ms()
    print(f"torch {torch.__version__}, BLAS {ho.blas_info()} (256x256 float32 matmul {mm:.2f} ms); "
          f"{args.steps} timed steps; tools {', '.join(tools)}", flush=True)
    if mm > 1.0:  # as hook_overhead.py: the reference BLAS hides the tools' cost in a slow step
        print("REFUSED: this torch runs on the reference BLAS. apt-get install libopenblas0-pthread, "
              "and run with OPENBLAS_NUM_THREADS=1.")
        return 2
    results: Dict[str, Any] = {}
    hdr = f"{'model':<16}{'config':<12}{'tool':<9}{'bare ms':>9}{'tool ms':>9}{'ratio':>8}{'added ms':>10}{'rows':>6}  losses"
    print(hdr + "\n" + "-" * len(hdr), flush=True)
    failed = False
    for model in models:
        for config in configs:
            for tool in tools:
                r = measure(model, tool, config, args)
                results.setdefault(model, {}).setdefault(config, {})[tool] = r
                if "error" in r:
                    print(f"{model:<16}{config:<12}{tool:<9}  FAILED: {r['error']}", flush=True)
                    failed |= tool == "ours"
                    continue
                same = "identical" if r["same_losses"] else "DIFFER"
                failed |= tool == "ours" and not r["same_losses"]
                print(f"{model:<16}{config:<12}{tool:<9}{r['bare_ms']:>9.2f}{r['tool_ms']:>9.2f}{r['ratio']:>8.2f}"
                      f"{r['added_ms']:>10.2f}{r['rows']:>6}  {same}", flush=True)
            pair = results[model][config]
            if "ours" in pair and "msprobe" in pair and "added_ms" in pair["ours"] and "added_ms" in pair["msprobe"]:
                share = pair["ours"]["added_ms"] / pair["msprobe"]["added_ms"] if pair["msprobe"]["added_ms"] > 0 else None
                if share is not None:
                    print(f"{'':<16}{config:<12}ours / msprobe added time: {share:.3f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "steps": args.steps, "results": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
