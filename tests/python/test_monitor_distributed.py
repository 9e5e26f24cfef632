"""TrainerMon (msprobe 26.2.0's training monitor, issue 55) under real multi-rank training: 2 gloo
processes on CPU, rank_models.py's MLP, 3 steps of Adam, the config's wg_distribution,
mv_distribution and param_distribution. Under DistributedDataParallel each rank writes its own
run folder `<time>-rank<R>-<8 hex>` whose rows are its own: grad_unreduced is the rank's local
gradient, grad_reduced the gradient after DDP's all-reduce (the same on both ranks);
`module_ranks: [1]` makes rank 1 alone write. Under FSDP2 (fully_shard) each rank's values are
its local shards' (the shape column: the shard's for grad_reduced, the DTensor's whole shape for
param_* and exp_avg*, as msprobe 26.2.0 writes them). In every run the losses and the final state
are bit-identical to the same run without the monitor. Under FSDP2 grad_unreduced is each rank's
unsharded gradient as FSDP2 hands it to its reduce-scatter, as msprobe 26.2.0 writes it (the test
once was a strict xfail: the monitor watched the sharded parameters' accumulation, which FSDP2
never runs).

This file is also the ranks' worker (dist_runs.run_ranks(worker=this file)):

    RANK=<r> WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python test_monitor_distributed.py OUT \
        --wrap {ddp,fsdp2} [--monitor NAME=CONFIG.json ...]

Each rank trains once without the monitor ("bare") and once under each --monitor config (its
files under OUT/NAME), the same seeds each time, and writes OUT/result_rank<r>.json (each run's
losses as float.hex, or the error that ended the rank) and OUT/<run>_rank<r>.pt: the final local
state, and per step the rank's local gradient of the whole model (from a copy of it on the same
batch) and the gradients the optimizer stepped with (a DTensor's local shard).
"""
import argparse
import copy
import csv
import json
import os
import pathlib
import re
import sys
import traceback

import pytest

torch = pytest.importorskip("torch")
if int(torch.__version__.split(".")[0]) < 2:
    pytest.skip(f"torch {torch.__version__}: the monitor's multi-rank runs are for torch >= 2 "
                "(the torch 2 venvs: DDP, and FSDP2's fully_shard)", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # run as the worker: the helpers
from rank_models import MODELS, batch, local_state  # noqa: E402

WORLD = 2
STEPS = 3
TIMEOUT_S = 90.0
FAMILIES = {"wg_distribution": True, "mv_distribution": True, "param_distribution": True}
DDP_CONFIG = {**FAMILIES, "ops": ["min", "max", "norm"]}
FSDP2_CONFIG = {**FAMILIES, "ops": ["min", "max", "norm", "shape"]}
RUN_FOLDER = re.compile(r"^[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}-rank(\d+)-[0-9a-f]{8}$")
# Every file of a rank's 3 steps (step_count_per_record 1); Adam has no moments before step 0.
FILES = sorted([f"{p}_{s}-{s}.csv" for s in range(STEPS)
                for p in ("grad_unreduced", "grad_reduced", "param_origin", "param_updated")]
               + [f"{p}_{s}-{s}.csv" for s in range(1, STEPS) for p in ("exp_avg", "exp_avg_sq")])


def fully_shard_function():
    """FSDP2's fully_shard where this torch has it (torch.distributed.fsdp from 2.6, the
    _composable path before), else None."""
    try:
        from torch.distributed.fsdp import fully_shard
        return fully_shard
    except Exception:  # noqa: BLE001 - ImportError, or an fsdp package that fails to import
        pass
    try:
        from torch.distributed._composable.fsdp import fully_shard
        return fully_shard
    except Exception:  # noqa: BLE001
        return None


# ----------------------------------------------------------------------------------------------
# The worker: one rank.

def _local(t):
    return getattr(t, "_local_tensor", t).detach()


def _wrap(model, kind: str, world: int):
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    fully_shard = fully_shard_function()
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _train(out: pathlib.Path, name: str, kind: str, rank: int, world: int, config) -> dict:
    import msprobe_cpp
    torch.manual_seed(0)  # the same weights on every rank and in every run
    model = MODELS["mlp"]()
    wrapped = _wrap(model, kind, world)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    monitor = None
    if config is not None:
        os.environ["MONITOR_OUTPUT_DIR"] = str(out / name)  # read when the TrainerMon is made
        monitor = msprobe_cpp.TrainerMon(config, params_have_main_grad=False)
        monitor.set_monitor(wrapped, optimizer)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    losses, local_grads, stepped_grads = [], [], []
    for _ in range(STEPS):
        x, y = batch(g, "mlp")
        # The rank's own gradient of the whole model on its batch, on a copy that neither DDP,
        # FSDP2 nor the monitor hooks (FSDP2: the whole weights all-gathered, on every rank alike).
        if kind == "ddp":
            ref = copy.deepcopy(model)
        else:
            ref = MODELS["mlp"]()
            ref.load_state_dict({n: p.full_tensor().detach() for n, p in model.named_parameters()})
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        local_grads.append({n: p.grad.clone() for n, p in ref.named_parameters()})
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(wrapped(x), y)
        loss.backward()
        stepped_grads.append({n: _local(p.grad).clone() for n, p in model.named_parameters()})
        optimizer.step()
        losses.append(loss.item().hex())
    if monitor is not None:
        monitor.drain()
    torch.save({"state": local_state(model), "local_grads": local_grads, "stepped_grads": stepped_grads,
                "global_shapes": {n: list(p.shape) for n, p in model.named_parameters()}},
               out / f"{name}_rank{rank}.pt")
    return {"losses": losses}


class RowParallel(torch.nn.Module):
    """A tensor-parallel layer as people write it: each rank's partial product, summed over the
    ranks by an all_reduce of the output in place (its backward is the identity)."""

    def __init__(self) -> None:
        super().__init__()
        self.part = torch.nn.Linear(64, 64)

    def forward(self, x):
        out = self.part(x)
        torch.distributed.all_reduce(out)
        return out


def _train_tp(out: pathlib.Path, rank: int, config) -> dict:
    """One step of RowParallel (64 x 64 outputs: enough for a tensor's values to be kept by
    version) under the monitor; the outputs' max before and after the reduction."""
    import msprobe_cpp
    torch.manual_seed(rank)
    model = RowParallel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    os.environ["MONITOR_OUTPUT_DIR"] = str(out / "tp")
    monitor = msprobe_cpp.TrainerMon(config, params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(100 + rank))
    with torch.no_grad():
        partial = model.part(x).max().item()
    reduced = model(x)
    reduced.sum().backward()
    optimizer.step()
    monitor.drain()
    return {"partial_max": partial, "reduced_max": reduced.max().item()}


def worker(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--wrap", choices=["ddp", "fsdp2", "tp"], required=True)
    p.add_argument("--monitor", action="append", default=[], metavar="NAME=CONFIG")
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (out / f"pid_rank{rank}").write_text(str(os.getpid()))  # dist_runs kills a hung rank by it
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = {"rank": rank, "runs": {}, "raised": None, "finished": False, "torch": torch.__version__}
    try:
        if args.wrap == "tp":
            name, config = args.monitor[0].split("=", 1)
            result["runs"][name] = _train_tp(out, rank, config)
            args.monitor = []
        else:
            result["runs"]["bare"] = _train(out, "bare", args.wrap, rank, world, None)
        for item in args.monitor:
            name, config = item.split("=", 1)
            result["runs"][name] = _train(out, name, args.wrap, rank, world, config)
        result["finished"] = True
    except BaseException as e:  # noqa: BLE001 - recorded for the test; the process ends normally
        result["raised"] = {"type": type(e).__name__, "message": str(e),
                            "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))[-8000:]}
    path = out / f"result_rank{rank}.json"
    path.with_suffix(".tmp").write_text(json.dumps(result, indent=1))
    os.replace(path.with_suffix(".tmp"), path)
    try:
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - a peer may have gone already
        pass


if __name__ == "__main__":
    worker(sys.argv[1:])
    sys.exit(0)


# ----------------------------------------------------------------------------------------------
# The tests.

from dist_runs import assert_states_equal, run_ranks  # noqa: E402
from gloo import needs_gloo  # noqa: E402

pytestmark = [pytest.mark.slow, needs_gloo]
THIS = pathlib.Path(__file__).resolve()


def launch(out: pathlib.Path, wrap: str, configs: dict):
    """Runs the 2 ranks with the bare run and one monitored run per config; each rank's result."""
    out.mkdir(parents=True, exist_ok=True)
    args = ["--wrap", wrap]
    for name, config in configs.items():
        path = out / f"{name}.json"
        path.write_text(json.dumps(config))
        args += ["--monitor", f"{name}={path}"]
    run = run_ranks(out, WORLD, args, timeout=TIMEOUT_S, worker=THIS)
    assert run.returncodes == [0] * WORLD, run.context()
    return run


def run_folders(root: pathlib.Path) -> dict:
    """{rank: folder} of the run folders under a MONITOR_OUTPUT_DIR; each name must be msprobe's."""
    folders = {}
    for d in sorted(root.iterdir()) if root.exists() else []:
        m = RUN_FOLDER.match(d.name)
        assert d.is_dir() and m, f"{d.name} is not a run folder <time>-rank<R>-<8 hex>"
        assert int(m.group(1)) not in folders, f"two run folders of rank {m.group(1)}: {sorted(root.iterdir())}"
        folders[int(m.group(1))] = d
    return folders


def read_rows(path: pathlib.Path, ops) -> dict:
    """{name: {column: cell}} of one CSV, whose header must be msprobe's for these ops (shape and
    dtype appended when not among them)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    columns = [*ops] + [c for c in ("shape", "dtype") if c not in ops]  # msprobe appends them
    assert rows[0] == ["vpp_stage", "name", "step", *columns], path.name
    out = {}
    for row in rows[1:]:
        assert row[0] == "0" and row[1] not in out and row[-1] == "torch.float32", f"{path.name}: {row}"
        out[row[1]] = dict(zip(["step", *columns], row[2:]))
    return out


def assert_stats(cells: dict, t: torch.Tensor, what: str) -> None:
    """A row's min, max and norm are the tensor's (6 digits, msprobe's ndigits)."""
    t = t.double()
    for op, value in (("min", t.min().item()), ("max", t.max().item()), ("norm", torch.norm(t).item())):
        assert abs(float(cells[op]) - value) <= 6e-7 + 1e-6 * abs(value), \
            f"{what}: {op} is {cells[op]}, the tensor's is {value!r}"


def assert_bit_identical(run, name: str) -> None:
    for r, res in enumerate(run.results):
        assert res["raised"] is None and res["finished"], f"rank {r}: {res['raised']}\n{run.context()}"
        assert res["runs"][name]["losses"] == res["runs"]["bare"]["losses"], f"rank {r}: {name}'s losses differ"
        bare = torch.load(run.out / f"bare_rank{r}.pt")["state"]
        assert_states_equal(torch.load(run.out / f"{name}_rank{r}.pt")["state"], bare,
                            f"rank {r}'s final state under {name} against the bare run's")


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    return launch(tmp_path_factory.mktemp("ddp"), "ddp",
                  {"all_ranks": DDP_CONFIG, "rank1": {**DDP_CONFIG, "module_ranks": [1]}})


def test_ddp_each_rank_writes_its_own_run_and_training_is_unaltered(ddp_run):
    """Under DDP with the wg, mv and param families: both ranks' losses and final states are
    bit-identical to the bare run's; each rank writes one run folder <time>-rank<R>-<8 hex> of
    its own rank, holding every family's file for each of the 3 steps (no exp_avg at step 0), a
    row per parameter named as DDP's named_parameters (module.*); grad_unreduced holds the rank's
    own local gradient, param_updated at the last step its final weights; the replicated
    parameters and Adam moments are written identically by both ranks."""
    run = ddp_run
    assert_bit_identical(run, "all_ranks")
    folders = run_folders(run.out / "all_ranks")
    assert sorted(folders) == [0, 1]
    ops = DDP_CONFIG["ops"]
    for r, folder in folders.items():
        assert sorted(p.name for p in folder.iterdir()) == FILES, f"rank {r}"
        saved = torch.load(run.out / f"all_ranks_rank{r}.pt")
        names = sorted(f"module.{n}" for n in saved["state"] if n in saved["global_shapes"])
        for s in range(STEPS):
            unreduced = read_rows(folder / f"grad_unreduced_{s}-{s}.csv", ops)
            assert sorted(unreduced) == names, f"rank {r} step {s}"
            assert {c["step"] for c in unreduced.values()} == {str(s)}
            for n, g in saved["local_grads"][s].items():
                assert_stats(unreduced[f"module.{n}"], g, f"rank {r} step {s} grad_unreduced {n}")
                assert unreduced[f"module.{n}"]["shape"] == str(saved["global_shapes"][n])  # whole tensors
        last = read_rows(folder / f"param_updated_{STEPS - 1}-{STEPS - 1}.csv", ops)
        assert sorted(last) == names
        for n in saved["global_shapes"]:
            assert_stats(last[f"module.{n}"], saved["state"][n], f"rank {r} param_updated {n}")
    for prefix in ("param_origin", "param_updated", "exp_avg", "exp_avg_sq"):
        for f in FILES:
            if f.startswith(prefix + "_"):
                assert (folders[0] / f).read_text() == (folders[1] / f).read_text(), f
    # Each rank's own data: the local gradients differ.
    assert (folders[0] / "grad_unreduced_0-0.csv").read_text() != (folders[1] / "grad_unreduced_0-0.csv").read_text()


def test_ddp_grad_reduced_is_after_ddps_all_reduce(ddp_run):
    """grad_reduced under DDP is the gradient after DDP's all-reduce, the one the optimizer steps
    with: its rows equal that gradient's statistics, which is the mean of the two ranks' local
    gradients, so both ranks write the same grad_reduced files, and they differ from each rank's
    grad_unreduced (its local gradient)."""
    run = ddp_run
    folders = run_folders(run.out / "all_ranks")
    saved = [torch.load(run.out / f"all_ranks_rank{r}.pt") for r in range(WORLD)]
    ops = DDP_CONFIG["ops"]
    for s in range(STEPS):
        f = f"grad_reduced_{s}-{s}.csv"
        assert (folders[0] / f).read_text() == (folders[1] / f).read_text(), f"{f}: the ranks differ"
        for r in range(WORLD):
            reduced = read_rows(folders[r] / f, ops)
            unreduced = read_rows(folders[r] / f"grad_unreduced_{s}-{s}.csv", ops)
            assert sorted(reduced) == sorted(unreduced)
            differing = 0
            for n, g in saved[r]["stepped_grads"][s].items():
                mean = sum(saved[q]["local_grads"][s][n] for q in range(WORLD)) / WORLD
                assert torch.allclose(g, mean, rtol=1e-5, atol=1e-7), f"step {s} {n}: not DDP's average"
                assert_stats(reduced[f"module.{n}"], g, f"rank {r} step {s} grad_reduced {n}")
                differing += reduced[f"module.{n}"] != unreduced[f"module.{n}"]
            assert differing == len(reduced), f"rank {r} step {s}: grad_reduced rows equal to grad_unreduced"


def test_ddp_module_ranks_1_makes_rank_1_alone_write(ddp_run):
    """With module_ranks [1] rank 0 writes no file; rank 1 writes its run folder, byte for byte
    the files it wrote when every rank wrote; training stays bit-identical."""
    run = ddp_run
    assert_bit_identical(run, "rank1")
    folders = run_folders(run.out / "rank1")
    assert 1 in folders, sorted(p.name for p in (run.out / "rank1").iterdir())
    assert [p for p in (run.out / "rank1").rglob("*") if p.is_file()] == \
        [p for p in folders[1].rglob("*") if p.is_file()], "a file outside rank 1's run folder"
    full = run_folders(run.out / "all_ranks")[1]
    assert sorted(p.name for p in folders[1].iterdir()) == FILES
    for f in FILES:
        assert (folders[1] / f).read_text() == (full / f).read_text(), f


def test_ddp_module_ranks_1_rank_0_makes_no_run_folder(ddp_run):
    """msprobe 26.2.0 makes a run folder only on a rank of module_ranks (its writer is made only
    there): with module_ranks [1], the output folder holds rank 1's run folder alone."""
    folders = run_folders(ddp_run.out / "rank1")
    assert sorted(folders) == [1], sorted(p.name for p in (ddp_run.out / "rank1").iterdir())


@pytest.fixture(scope="module")
def fsdp2_run(tmp_path_factory):
    if fully_shard_function() is None:
        pytest.skip("this torch has no FSDP2 fully_shard")
    return launch(tmp_path_factory.mktemp("fsdp2"), "fsdp2", {"all_ranks": FSDP2_CONFIG})


def test_fsdp2_each_rank_writes_its_local_shards(fsdp2_run):
    """Under FSDP2 (fully_shard on each block and the root) with the same families and the shape
    op: training is bit-identical to the bare run on each rank's local shards; each rank writes
    its own run folder, with grad_reduced, exp_avg* and param_* for its steps, a row per
    parameter; the values are the rank's local shards': grad_reduced the shard of the gradient
    the optimizer stepped with (shape column: the shard's, half of dim 0), param_updated at the
    last step the final local weights, param_origin at step 0 the shard of the initial weights.
    The shape column of param_* and exp_avg* is the DTensor's whole shape: msprobe 26.2.0
    writes the same files (checked by running its TrainerMon in this worker on torch 2.13)."""
    run = fsdp2_run
    assert_bit_identical(run, "all_ranks")
    folders = run_folders(run.out / "all_ranks")
    assert sorted(folders) == [0, 1]
    ops = FSDP2_CONFIG["ops"]
    saved = [torch.load(run.out / f"all_ranks_rank{r}.pt") for r in range(WORLD)]
    whole = saved[0]["global_shapes"]
    torch.manual_seed(0)
    initial = dict(MODELS["mlp"]().named_parameters())
    for r, folder in folders.items():
        files = sorted(p.name for p in folder.iterdir() if not p.name.startswith("grad_unreduced"))
        assert files == [f for f in FILES if not f.startswith("grad_unreduced")], f"rank {r}: {files}"
        shards = {n: list(saved[r]["state"][n].shape) for n in whole}
        assert all(shards[n][0] * WORLD == whole[n][0] and shards[n][1:] == whole[n][1:] for n in whole), shards
        for f in files:
            rows = read_rows(folder / f, ops)
            assert sorted(rows) == sorted(whole), f"rank {r} {f}"
            shapes = shards if f.startswith("grad_reduced") else whole
            assert {n: c["shape"] for n, c in rows.items()} == {n: str(v) for n, v in shapes.items()}, \
                f"rank {r} {f}"
        for s in range(STEPS):
            rows = read_rows(folder / f"grad_reduced_{s}-{s}.csv", ops)
            for n, g in saved[r]["stepped_grads"][s].items():
                assert_stats(rows[n], g, f"rank {r} step {s} grad_reduced {n}")
        last = read_rows(folder / f"param_updated_{STEPS - 1}-{STEPS - 1}.csv", ops)
        first = read_rows(folder / "param_origin_0-0.csv", ops)
        for n in whole:
            assert_stats(last[n], saved[r]["state"][n], f"rank {r} param_updated {n}")
            shard = initial[n].detach().chunk(WORLD, dim=0)[r]
            assert_stats(first[n], shard, f"rank {r} param_origin {n}")
    # Each rank wrote its own shards: they differ between the ranks.
    assert (folders[0] / "param_origin_0-0.csv").read_text() != (folders[1] / "param_origin_0-0.csv").read_text()


def test_fsdp2_grad_unreduced_is_each_ranks_unsharded_gradient(fsdp2_run):
    """msprobe 26.2.0 writes grad_unreduced under FSDP2 from the gradients FSDP2 hands to its
    reduce-scatter (foreach_reduce): each rank's own gradient of the whole parameter, before
    the reduction. Each rank's files hold a row per parameter, its whole shape, and the stats of
    the rank's local gradient."""
    run = fsdp2_run
    folders = run_folders(run.out / "all_ranks")
    ops = FSDP2_CONFIG["ops"]
    for r, folder in folders.items():
        saved = torch.load(run.out / f"all_ranks_rank{r}.pt")
        whole = saved["global_shapes"]
        for s in range(STEPS):
            path = folder / f"grad_unreduced_{s}-{s}.csv"
            assert path.exists(), f"rank {r}: no {path.name} ({sorted(p.name for p in folder.iterdir())})"
            rows = read_rows(path, ops)
            assert sorted(rows) == sorted(whole), f"rank {r} step {s}"
            for n, g in saved["local_grads"][s].items():
                assert rows[n]["shape"] == str(whole[n])
                assert_stats(rows[n], g, f"rank {r} step {s} grad_unreduced {n}")


def test_tensor_parallel_an_output_reduced_in_place_is_read_as_reduced(tmp_path):
    """A module's output all-reduced in place by its parent (RowParallel) is the same tensor at
    the same version as the child's output (all_reduce bumps no version counter): the parent's
    row must hold the sum over the ranks, the child's the rank's own partial product."""
    run = launch(tmp_path, "tp", {"tp": {"xy_distribution": True, "forward_only": True, "ops": ["max"]}})
    for r, res in enumerate(run.results):
        assert res["raised"] is None and res["finished"], f"rank {r}: {res['raised']}\n{run.context()}"
        values = res["runs"]["tp"]
        [folder] = [d for rank, d in run_folders(tmp_path / "tp").items() if rank == r]
        with open(folder / "actv_0-0.csv", newline="", encoding="utf-8") as f:
            rows = {row["name"]: row for row in csv.DictReader(f)}
        assert abs(float(rows["part.output"]["max"]) - values["partial_max"]) < 1e-5
        assert abs(float(rows[".output"]["max"]) - values["reduced_max"]) < 1e-5, \
            f"rank {r}: the reduced output's row {rows['.output']} against {values}"
    assert run.results[0]["runs"]["tp"]["reduced_max"] == run.results[1]["runs"]["tp"]["reduced_max"]
