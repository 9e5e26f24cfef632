"""TrainerMon's wg_distribution and mv_distribution under DeepSpeed ZeRO-1, 2 and 3 (CPU
accelerator, 2 gloo ranks). DeepSpeed steps flat fp32 copies of the parameters: the optimizer's
state is keyed by a group's flat tensor and the reduced gradients are DeepSpeed's own partitions,
`p.grad` being None. The monitor once wrote no grad_reduced and no exp_avg* rows at all here
("optimizer state can not accessed"); it now reads each parameter's slice of them, as msprobe
26.2.0's DeepSpeedZeroOptimizer*Mon classes do (python/msprobe_cpp/monitor_optimizers.py).

Both ranks train on the same batches, so the averaged gradient is each rank's own, and the plain
run (torch's AdamW, no DeepSpeed, on rank 0) is the reference: per parameter, the ranks' slices
together hold the plain run's tensor. A slice's row is checked against the whole: the smallest of
the ranks' minimums is the plain minimum, the largest maximum the maximum, and the ranks' norms
summed in squares the norm. ZeRO-1 and 2 cut the flat group in two, the first weight across the
cut: a rank outside a parameter's partition writes no grad_reduced row for it and a row of nan
moments, as msprobe does.

This file is also the ranks' worker:
    RANK=<r> WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python test_monitor_zero.py OUT CONFIG
"""
import csv
import importlib
import json
import math
import os
import pathlib
import sys
import traceback

import pytest

torch = pytest.importorskip("torch")
STAGES = (1, 2, 3)
STEPS = 3
WORLD = 2
# bf16 runs: which wrapper DeepSpeed puts around AdamW (ZeRO stage, gradient accumulation dtype).
BF16_RUNS = {"BF16_Optimizer": (1, "fp32"), "FP16_UnfusedOptimizer": (0, "bf16")}


def train(config: str, out: pathlib.Path, stage: int, bf16_accumulation: str = "") -> list:
    """3 steps of a small MLP from seed 0 on seed 1's batches; stage None: plain torch."""
    import msprobe_cpp
    os.environ["MONITOR_OUTPUT_DIR"] = str(out)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    model = net
    if stage is not None:
        import deepspeed
        cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
               "zero_optimization": {"stage": stage}, "steps_per_print": 10 ** 9}
        if bf16_accumulation:
            cfg.update(bf16={"enabled": True}, data_types={"grad_accum_dtype": bf16_accumulation})
        model, opt, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=cfg)
    monitor = msprobe_cpp.TrainerMon(config, params_have_main_grad=False)
    monitor.set_monitor(model, opt)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(4, 16, generator=g), torch.randint(0, 4, (4,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x.bfloat16() if bf16_accumulation else x).float(), y)
        if stage is not None:
            model.backward(loss)
            model.step()
        else:
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(loss.item())
    monitor.drain()
    return [type(opt).__name__, losses]


def worker(out: pathlib.Path, config: str) -> None:
    rank = int(os.environ["RANK"])
    result = {}
    try:
        import deepspeed
        # Without DeepSpeed's shared-memory inference all-reduce, which its CPU accelerator compiles
        # at its first start in a venv (35 s of the suite's CPU) and training never calls (ds_worker.py).
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
        deepspeed.init_distributed(dist_backend="gloo")
        if rank == 0:
            result["plain"] = train(config, out / "plain", None)
        for stage in STAGES:
            result[f"zero{stage}"] = train(config, out / f"zero{stage}", stage)
        for wrapper, (stage, accumulation) in BF16_RUNS.items():
            result[wrapper] = train(config, out / wrapper, stage, accumulation)
    except BaseException:  # noqa: B902 - the rank's error is the test's to show
        result["error"] = traceback.format_exc()
    (out / f"result_rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])  # DeepSpeed's sign of a launched rank
    worker(pathlib.Path(sys.argv[1]), sys.argv[2])
    sys.exit(0)


# ----------------------------------------------------------------------------------------------
# The tests.

pytest.importorskip("deepspeed")

from dist_runs import run_ranks  # noqa: E402
from gloo import needs_gloo  # noqa: E402

pytestmark = [pytest.mark.slow, needs_gloo]
THIS = pathlib.Path(__file__).resolve()
OPS = ["min", "max", "norm"]
FILES = [f"grad_reduced_{s}-{s}.csv" for s in range(STEPS)] + \
    [f"{p}_{s}-{s}.csv" for s in range(1, STEPS) for p in ("exp_avg", "exp_avg_sq")]


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("zero")
    config = out / "monitor.json"
    config.write_text(json.dumps({"targets": {}, "wg_distribution": True, "mv_distribution": True,
                                  "ops": OPS, "format": "csv"}))
    run = run_ranks(out, WORLD, [str(config)], timeout=240.0, worker=THIS, env={"DS_ACCELERATOR": "cpu"},
                    preload=("deepspeed", "deepspeed.runtime.engine"))
    assert run.returncodes == [0] * WORLD, run.context()
    for r, result in enumerate(run.results):
        assert "error" not in result, f"rank {r}:\n{result['error']}"
    return out, run.results


def rows(root: pathlib.Path, name: str, rank: int) -> dict:
    """{parameter: [min, max, norm]} of one rank's file (DeepSpeed's `module.` taken off)."""
    folders = [d for d in root.iterdir() if d.is_dir() and f"-rank{rank}-" in d.name]
    assert len(folders) <= 1, sorted(root.iterdir())
    if not folders or not (folders[0] / name).exists():
        return {}
    path = folders[0] / name
    with open(path, newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    assert table[0][:6] == ["vpp_stage", "name", "step", *OPS], path
    return {row[1].removeprefix("module."): [float(v) for v in row[3:6]] for row in table[1:]}


def close(a: float, b: float, rel: float = 2e-5) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=2e-6)  # msprobe's 6 digits, summed in squares


def combined(out: pathlib.Path, run: str, name: str) -> dict:
    """{parameter: (min, max, norm)} of the whole tensor, from the ranks' slices (nan rows: none)."""
    ranks = [rows(out / run, name, r) for r in range(WORLD)]
    whole = {}
    for param in sorted(set().union(*ranks)):
        pieces = [rk[param] for rk in ranks if param in rk and not math.isnan(rk[param][0])]
        assert pieces, f"{run} {name} {param}: no rank wrote it"
        whole[param] = (min(p[0] for p in pieces), max(p[1] for p in pieces),
                        math.sqrt(sum(p[2] ** 2 for p in pieces)))
    return whole


def whole(out: pathlib.Path, run: str, name: str) -> dict:
    """{parameter: (min, max, norm)} where every rank that writes a row writes the whole tensor's."""
    ranks = [rows(out / run, name, r) for r in range(WORLD)]
    out_rows = {}
    for param in sorted(set().union(*ranks)):
        seen = {tuple(rk[param]) for rk in ranks if param in rk}
        assert len(seen) == 1, (run, name, param, seen)
        out_rows[param] = seen.pop()
    return out_rows


@pytest.mark.parametrize("stage", STAGES)
def test_zero_rows_are_each_ranks_slice_of_the_plain_runs_tensors(zero_runs, stage):
    out, results = zero_runs
    for r in range(WORLD):
        assert results[r][f"zero{stage}"][1] == results[0]["plain"][1], f"rank {r}: ZeRO-{stage} trains as AdamW"
    for name in FILES:
        plain = combined(out, "plain", name)
        assert sorted(plain) == ["0.bias", "0.weight", "2.bias", "2.weight"], name
        zero = combined(out, f"zero{stage}", name)
        assert sorted(zero) == sorted(plain), (stage, name)
        for param, values in plain.items():
            assert all(close(a, b) for a, b in zip(zero[param], values)), (stage, name, param, zero[param], values)


@pytest.mark.parametrize("stage", (1, 2))
def test_zero_1_and_2_split_the_first_weight_and_leave_the_rest_to_rank_1(zero_runs, stage):
    """The flat group (676 elements) is cut at 338: 0.weight's 512 lie across it, the rest on rank
    1. Rank 0 writes no gradient row and nan moments for what is not in its partition."""
    out, _ = zero_runs
    grads = [rows(out / f"zero{stage}", "grad_reduced_1-1.csv", r) for r in range(WORLD)]
    assert sorted(grads[0]) == ["0.weight"] and sorted(grads[1]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    moments = rows(out / f"zero{stage}", "exp_avg_1-1.csv", 0)
    assert sorted(moments) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert all(math.isnan(v) for p in ("0.bias", "2.weight", "2.bias") for v in moments[p])
    assert not any(math.isnan(v) for v in moments["0.weight"])


@pytest.mark.parametrize("wrapper", sorted(BF16_RUNS))
def test_bf16_wrappers_moments_are_read_from_their_fp32_copies(zero_runs, wrapper):
    """Under bf16 DeepSpeed's wrappers step fp32 copies: BF16_Optimizer flat partitions (ZeRO-1
    with fp32 accumulation), FP16_UnfusedOptimizer one copy a parameter (ZeRO off). After AdamW's
    first step (betas 0.9, 0.999) the first moment is a tenth of the gradient it stepped with."""
    out, results = zero_runs
    assert [results[r][wrapper][0] for r in range(WORLD)] == [wrapper] * WORLD
    grads = whole(out, wrapper, "grad_reduced_0-0.csv")  # each rank's are whole tensors
    first = (combined if wrapper == "BF16_Optimizer" else whole)(out, wrapper, "exp_avg_1-1.csv")
    assert sorted(first) == sorted(grads) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for param, values in grads.items():
        assert all(close(a, 0.1 * b, rel=1e-4) for a, b in zip(first[param], values)), (param, first[param], values)
    assert combined(out, wrapper, "exp_avg_sq_2-2.csv")
