"""Per-step cost of the live dump on real models (issue 35): instrumented / uninstrumented
training-step time of models of the real-model zoo (tests/python/real_models.py: tiny random-init
configs, nothing downloaded), so that the cost users see on models written by others is on record
beside TinyGPT's (bench/hook_overhead.py).

Models: hf_llama_sdpa, hf_gpt2 and hf_bert_mlm (Hugging Face transformers, the torch 2 venv),
resnet18 and efficientnet_b0 (torchvision, torch 1.13); by default every one whose package the
running torch has. Batch 2 (sequences of 16 tokens, 32x32 images), the zoo's optimizers (AdamW,
SGD), one thread. Configurations: `overflow-L1` (task overflow_check at L1 on a clean run: nothing
is written; target <= 1.30, TinyGPT's), `mix` (task statistics at mix, every step dumped), and on
request `L1` (task statistics at L1).

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/real_model_overhead.py
    MSPROBE_CPP_PACKAGE_ROOT=build-torch2/pkg build-torch2/venv/bin/python bench/real_model_overhead.py
    ... bench/real_model_overhead.py --models hf_gpt2 --configs overflow-L1 --steps 40 --rounds 4
    ... bench/real_model_overhead.py --models hf_llama_large --configs overflow-L1,L1,mix --steps 6 --rounds 2

`hf_llama_large` (issue 47's large row: hidden 512, 4 layers, sequences of 256, about 1.4 s a step)
runs only when named.

Measured as bench/hook_overhead.py measures (its docstring; its helpers are imported from it): each
configuration trains its own copy of the same initial model on the same batches; the timed steps
are split over rounds, each timing a segment of the baseline and of every configuration in an
order rotated per round; the ratio is the median instrumented step over the median baseline
step; one debugger per segment, its `step` list covering exactly that segment, and the wrapped
torch functions must be the originals again after it; the losses of every configuration must be
bit-identical to the baseline's (exit status 1 otherwise). It refuses the reference BLAS as
hook_overhead does.

The zoo's models train with dropout (and stochastic depth) on, drawn from torch's global
generator: each run keeps its own generator state, swapped in for its segments, so interleaving
the runs does not change any run's draws.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

# Puts tests/python and the package (MSPROBE_CPP_PACKAGE_ROOT or <root>/python) on sys.path.
import hook_overhead as ho

import torch

import real_models  # (sets HF_HUB_OFFLINE before transformers is imported)

MODELS = ("hf_llama_sdpa", "hf_gpt2", "hf_bert_mlm", "resnet18", "efficientnet_b0", "hf_llama_large")
LARGE_SEQ = 256


def _llama_large() -> torch.nn.Module:
    """Issue 47's large configuration, where ops are big: hidden 512, 4 layers, sequences of 256."""
    hf = real_models._hf()
    config = hf.LlamaConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                            intermediate_size=1376, vocab_size=real_models.VOCAB, max_position_embeddings=LARGE_SEQ,
                            attention_dropout=0.1)
    return hf.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def _long_causal_lm_batch(g: torch.Generator) -> real_models.Batch:
    ids = torch.randint(1, real_models.VOCAB, (real_models.BATCH, LARGE_SEQ), generator=g)
    return real_models.Batch(kwargs={"input_ids": ids, "labels": ids.clone()})


# Not one of the test zoo's models (too slow for the suite): only here, and only on request.
real_models.MODELS["hf_llama_large"] = real_models.Spec("transformers", _llama_large, _long_causal_lm_batch,
                                                        real_models.adamw)
ON_REQUEST = ("hf_llama_large",)
TARGETS = {"overflow-L1": 1.30}
CONFIGS = ("overflow-L1", "mix", "L1")
POOL = 8  # distinct batches, cycled through by each run's own step count


@dataclass
class ZooRun(ho.Run):
    rng: Optional[torch.Tensor] = None  # this run's global-generator state between its segments


def available(name: str) -> bool:
    return importlib.util.find_spec(real_models.MODELS[name].requires) is not None


def run_steps(run: ZooRun, n: int, data: List[real_models.Batch], debugger: Any) -> List[float]:
    """n training steps as real_models.train takes them (the same zero_grad, loss and order),
    each timed with the debugger's start/stop/step."""
    torch.set_rng_state(run.rng)
    times: List[float] = []
    for _ in range(n):
        batch = data[len(run.losses) % len(data)]
        t0 = time.perf_counter()
        if debugger is not None:
            debugger.start(run.model)
        run.opt.zero_grad()
        loss = real_models.loss_of(run.model, batch)
        loss.backward()
        run.opt.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        times.append(time.perf_counter() - t0)
        run.losses.append(loss.item())  # outside the timed window and after stop()
    run.rng = torch.get_rng_state()
    return times


def measure_model(name: str, configs: List[str], args: argparse.Namespace, Debugger: Any,
                  seg_steps: List[int]) -> Dict[str, Any]:
    data = real_models.batches(real_models.MODELS[name].make_batch, POOL)
    originals = [getattr(owner, attr) for owner, attr in ho.PROBES]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="real_model_overhead_"))
    runs: Dict[str, ZooRun] = {}
    for run_name in ["baseline"] + configs:
        model, _, make_optimizer = real_models.build(name)  # seeded: every copy has the same weights
        torch.manual_seed(real_models.DROPOUT_SEED)
        runs[run_name] = ZooRun(name=run_name, model=model, opt=make_optimizer(model),
                                level=None if run_name == "baseline" else run_name, rng=torch.get_rng_state())
    params = sum(p.numel() for p in runs["baseline"].model.parameters())

    print(f"\n== model {name} ({params} parameters)")
    for r, n_timed in enumerate(seg_steps):
        for run_name in ho.segment_order(configs, r):
            run = runs[run_name]
            if run.error:
                continue
            gc.collect()  # so a collection owed by the previous segment does not land in this one
            try:
                clean_before = [getattr(owner, attr) for owner, attr in ho.PROBES] == originals
                if run.level is None:
                    run_steps(run, args.warmup, data, None)
                    times = run_steps(run, n_timed, data, None)
                else:
                    n = args.warmup + n_timed
                    cfg = ho.write_config(tmp / run.level, run.level, n, {})
                    dump_path = pathlib.Path(json.loads(cfg.read_text())["dump_path"])
                    shutil.rmtree(dump_path, ignore_errors=True)
                    debugger = Debugger(config_path=str(cfg))
                    run_steps(run, args.warmup, data, debugger)
                    times = run_steps(run, n_timed, data, debugger)
                    del debugger
                    ho.collect_dumps(run, dump_path, n)
                if clean_before and [getattr(owner, attr) for owner, attr in ho.PROBES] != originals:
                    run.leftover_hooks = True
            except Exception as e:  # msprobe_cpp.OverflowError on a false alarm included
                run.error = f"round {r + 1}: {type(e).__name__}: {e}"
                print(f"  round {r + 1}/{len(seg_steps)} {run_name:>11}: FAILED: {run.error}", flush=True)
                continue
            run.rounds.append(times)
            print(f"  round {r + 1}/{len(seg_steps)} {run_name:>11}: median {ho.median_ms(times):8.2f} ms "
                  f"over {len(times)} steps", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)

    # The floor of each level (bench/stats_floor.py): one step's distinct tensor versions'
    # statistics once, no hooks, over the baseline step.
    floors: Dict[str, Any] = {}
    if Debugger is not None:
        for level in sorted({ho.CONFIGS[c][1] for c in configs}):
            model, _, make_optimizer = real_models.build(name)
            opt = make_optimizer(model)

            def one_step() -> None:
                opt.zero_grad()
                real_models.loss_of(model, data[0]).backward()
                opt.step()
            floors[level] = ho.measure_floor(ho.step_tensors(Debugger, level, model, one_step))

    baseline = runs["baseline"]
    base_ms = ho.median_ms(baseline.times)
    result: Dict[str, Any] = {"parameters": params, "failed": False, "configs": {},
                              "baseline": {"median_ms": base_ms, "min_ms": 1e3 * min(baseline.times),
                                           "round_medians_ms": [ho.median_ms(s) for s in baseline.rounds]}}
    for level in configs:
        run = runs[level]
        floor = floors.get(ho.CONFIGS[level][1])
        entry: Dict[str, Any] = {"error": run.error, "leftover_hooks": run.leftover_hooks,
                                 "target": TARGETS.get(level),
                                 "floor": 1 + floor.ms / base_ms if floor else None}
        problems: List[str] = []
        if run.times:
            same = run.losses == baseline.losses
            per_round = [statistics.median(c) / statistics.median(b) for c, b in zip(run.rounds, baseline.rounds)]
            entry.update({"median_ms": ho.median_ms(run.times), "ratio": ho.median_ms(run.times) / base_ms,
                          "min_ratio": min(run.times) / min(baseline.times), "ratio_per_round": per_round,
                          "steps_dumped": run.steps_dumped, "steps_expected": run.steps_expected,
                          "records_per_step": statistics.median(run.records) if run.records else None,
                          "dump_bytes_per_step": statistics.median(run.dump_bytes) if run.dump_bytes else None,
                          "losses_identical": same})
            if not same:
                first = next(i for i, (a, b) in enumerate(zip(run.losses, baseline.losses)) if a != b)
                problems.append(f"losses differ from the baseline's from step {first} on "
                                f"({run.losses[first]!r} against {baseline.losses[first]!r}): the dump changed a value")
            if ho.CONFIGS[level][0] != "overflow_check" and run.steps_dumped != run.steps_expected:
                problems.append(f"{run.steps_dumped} of {run.steps_expected} steps dumped")
        if run.leftover_hooks:
            problems.append("torch functions still wrapped after the debugger's last step")
        if run.error:
            problems.append(run.error)
        entry["problems"] = problems
        result["failed"] = result["failed"] or bool(problems) or not run.times
        result["configs"][level] = entry
    return result


def print_table(results: Dict[str, Dict[str, Any]], configs: List[str]) -> None:
    """One line per model and configuration: its ratio beside the target and the per-round
    spread; what was dumped; whether the losses are the baseline's."""
    hdr = (f"{'model':<17}{'config':<13}{'base ms':>8}{'ms':>8}{'ratio':>7}{'floor':>7}{'target':>7}{'min/min':>8}"
           f"{'per round':>11}{'dumped':>8}{'records':>8}{'KB/step':>8}  losses")
    print("\n" + hdr + "\n" + "-" * len(hdr))
    for name, res in results.items():
        for level in configs:
            e = res["configs"][level]
            target = f"{e['target']:.2f}" if e["target"] else "-"
            if "ratio" not in e:
                print(f"{name:<17}{level:<13}{res['baseline']['median_ms']:>8.2f}{'failed':>8}")
            else:
                spread = f"{min(e['ratio_per_round']):.2f}-{max(e['ratio_per_round']):.2f}"
                rec = f"{e['records_per_step']:.0f}" if e["records_per_step"] else "-"
                kb = f"{e['dump_bytes_per_step'] / 1024:.0f}" if e["dump_bytes_per_step"] else "-"
                floor = f"{e['floor']:.2f}" if e.get("floor") else "-"
                print(f"{name:<17}{level:<13}{res['baseline']['median_ms']:>8.2f}{e['median_ms']:>8.2f}"
                      f"{e['ratio']:>7.2f}{floor:>7}{target:>7}{e['min_ratio']:>8.2f}{spread:>11}"
                      f"{e['steps_dumped']:>4}/{e['steps_expected']:<3}{rec:>8}{kb:>8}  "
                      f"{'identical' if e['losses_identical'] else 'DIFFER'}")
            for p in e["problems"]:
                print(f"  {name} {level}: {p}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)} (default: those this torch has)")
    ap.add_argument("--configs", default="overflow-L1,mix", help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per configuration, all rounds together")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the timed steps are split over")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of every segment")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--allow-reference-blas", action="store_true",
                    help="report even on the reference BLAS (the ratios then understate the overhead)")
    ap.add_argument("--json", type=pathlib.Path, help="also write the results to this file")
    args = ap.parse_args()

    configs = ho.configs_of(ap, args.configs, CONFIGS)
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else \
        [m for m in MODELS if available(m) and m not in ON_REQUEST]
    for m in models:
        if m not in MODELS:
            ap.error(f"--models: unknown model {m!r}: expected some of {', '.join(MODELS)}")
        if not available(m):
            ap.error(f"--models: {m} needs {real_models.MODELS[m].requires}, which this python does not have")
    if not models:
        ap.error(f"none of {', '.join(MODELS)} can be built here (no torchvision, no transformers)")
    if args.steps < 1 or args.rounds < 1 or args.warmup < 1:
        ap.error("--steps, --rounds and --warmup must be >= 1 (the first warm-up step installs the hooks)")
    rounds = min(args.rounds, args.steps)
    seg_steps = [args.steps // rounds + (1 if r < args.steps % rounds else 0) for r in range(rounds)]

    torch.set_num_threads(args.threads)
    mm = ho.matmul_ms()
    print(f"torch {torch.__version__}, BLAS {ho.blas_info()} (256x256 float32 matmul {mm:.2f} ms), "
          f"{torch.get_num_threads()} thread(s), batch {real_models.BATCH}; {args.steps} timed steps per "
          f"configuration in {rounds} rounds, {args.warmup} warm-up step(s) per segment")
    if mm > 1.0 and not args.allow_reference_blas:
        print("REFUSED: this torch runs on the reference BLAS, which hides the hooks' cost in a slow step. "
              "apt-get install libopenblas0-pthread, and run with OPENBLAS_NUM_THREADS=1.")
        return 2
    Debugger = ho.import_debugger()
    if Debugger is None:
        configs = []

    results = {m: measure_model(m, configs, args, Debugger, seg_steps) for m in models}
    print_table(results, configs)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "blas": ho.blas_info(), "matmul_ms": mm,
                                         "threads": torch.get_num_threads(), "steps": args.steps, "rounds": rounds,
                                         "warmup": args.warmup, "models": results}, indent=1))
    return 1 if any(r["failed"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
