"""DeepSpeed (pinned, test-only, in the torch-2 venv) as users run it: 2 gloo ranks on DeepSpeed's
CPU accelerator, ZeRO stages 0-3 at the default bucket sizes, bf16, fp16 with DeepSpeed's
dynamic loss scaler, or fp32, gradient accumulation (2 micro-batches a step) and clipping, the
debugger started on the engine (ds_worker.py).

Both sides: a clean run is bit-identical to the run without the tool (losses, parameters, ZeRO's
fp32 partitions and optimizer state) and writes no step folder, at every stage and dtype; the
steps DeepSpeed's scaler skips are no stops (its hysteresis keeps the scale at a first overflow);
each planted fault stops both ranks in its step, the faulty one with its origin and call, the
other as peer naming it, each with its folder, no raw RuntimeError, and no NaN in any rank's
weights or partitions."""
import dataclasses

import pytest

pytest.importorskip("deepspeed")
import torch  # noqa: E402

from dist_runs import assert_states_equal, load_results, run_ranks  # noqa: E402
from gloo import needs_gloo  # noqa: E402
from testenv import TESTS  # noqa: E402

pytestmark = [pytest.mark.slow, needs_gloo]

WORKER = TESTS / "ds_worker.py"
# What a rank imports besides torch (a second of DeepSpeed, and ZeRO's check of the optimizer
# imports its Muon optimizer, torch.compile's): once in a warm server (zygote.py), with the
# accelerator ds_worker.py asks for.
WORKER_IMPORTS = ("deepspeed", "deepspeed.runtime.engine", "deepspeed.runtime.zero.muon.muon_optimizer")
WORLD = 2
STEPS = 4
BAD_STEP = 2
BAD_RANK = 1
TIMEOUT_S = 180.0
STAGES = [0, 1, 2, 3]
DTYPES = ["bf16", "fp16", "fp32"]


def run(out, args):
    return run_ranks(out, WORLD, ["--steps", str(STEPS), *args], timeout=TIMEOUT_S, worker=WORKER,
                     preload=WORKER_IMPORTS, env={"DS_ACCELERATOR": "cpu"})


def finished_cleanly(r):
    assert r.returncodes == [0] * WORLD, r.context()
    for rank, res in enumerate(r.results):
        assert res["raised"] is None and res["finished"], f"rank {rank} raised\n{r.context()}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stage", STAGES)
def test_clean_training_is_bit_identical_and_quiet(tmp_path, stage, dtype):
    # The run without the tool first, in the same processes (ds_worker.py --with-bare).
    watched = run(tmp_path, ["--with-bare", "--stage", str(stage), "--dtype", dtype])
    bare = dataclasses.replace(watched, out=tmp_path / "bare", results=load_results(tmp_path / "bare", WORLD))
    assert None not in bare.results, watched.context()
    finished_cleanly(bare)
    finished_cleanly(watched)
    assert watched.step_folders() == [], f"a clean run wrote {watched.step_folders()}\n{watched.context()}"
    for rank in range(WORLD):
        assert watched.results[rank]["losses"] == bare.results[rank]["losses"], f"rank {rank}'s losses"
        assert watched.results[rank]["nonfinite_state"] == []
        assert_states_equal(watched.state(rank), bare.state(rank), f"rank {rank}'s weights and partitions")
    assert "msprobe_cpp: step" not in "".join(watched.logs), watched.context()


@pytest.mark.parametrize("stage,hysteresis", [(0, 2), (1, 1), (2, 2), (3, 2)])
def test_the_steps_deepspeeds_loss_scaler_skips_are_no_stops(tmp_path, stage, hysteresis):
    """2**32 to start: every step's gradients overflow in fp16 until the scale has come down."""
    r = run(tmp_path, ["--stage", str(stage), "--dtype", "fp16", "--scale-power", "32",
                       "--hysteresis", str(hysteresis)])
    finished_cleanly(r)
    assert r.step_folders() == [], r.context()
    if stage > 0:  # ZeRO-0's unfused fp16 optimizer scales the loss in fp32: nothing overflows
        assert all(res["skipped_steps"] == STEPS for res in r.results), r.context()
        log = "".join(r.logs)
        assert "the loss scaler skipped the step" in log, log
        if hysteresis > 1:
            assert "the loss scaler skipped the step (its scale held: hysteresis)" in log, log


EXPECTED = {  # the faulty rank's (origin, call)
    "nan_batch": ("input", "Functional.linear.0.forward"),
    "op_overflow": ("op", "Tensor.__mul__.0.forward"),
    "lr_inf": ("op", "(before AdamW.step)"),
    "nan_shard": ("parameter", None),  # the call that reads the shard: linear, or ZeRO-3's gather
}
FAULTS = [(stage, "bf16", mode) for stage in STAGES for mode in EXPECTED]
FAULTS += [(2, "fp16", "nan_batch"), (2, "fp16", "lr_inf"), (1, "fp32", "op_overflow"), (3, "fp32", "lr_inf")]


# torch's gloo, at interpreter exit, when a collective of the stopped step was left in flight (a
# rank stopped by its peer raises before DeepSpeed waits on its overlapped reduce): its work thread
# still holds the tensors, and their release during finalization aborts the process (pytorch's
# "destroy process groups at exit" pull request 179291 names it). Seen in about 1 launch in 80,
# after the rank wrote its result: the stop itself is whole, and it is checked in full below.
TORCH_EXIT_ABORT = "terminate called without an active exception"


def exited_after_its_stop(r, rank: int) -> bool:
    code = r.returncodes[rank]
    if code == 0:
        return True
    lines = [line for line in r.logs[rank].splitlines() if line.strip()]
    return code == -6 and bool(lines) and lines[-1].strip() == TORCH_EXIT_ABORT and \
        r.results[rank] is not None and r.results[rank]["raised"] is not None


@pytest.mark.parametrize("stage,dtype,mode", FAULTS)
def test_a_fault_stops_every_rank_in_its_step_with_clean_weights(tmp_path, stage, dtype, mode):
    r = run(tmp_path, ["--stage", str(stage), "--dtype", dtype, "--mode", mode, "--bad-rank", str(BAD_RANK),
                       "--bad-step", str(BAD_STEP)])
    assert all(exited_after_its_stop(r, rank) for rank in range(WORLD)), r.context()
    origin, call = EXPECTED[mode]
    for rank, res in enumerate(r.results):
        e = res["raised"]
        assert e is not None and e["type"] == "OverflowError", f"rank {rank} ended with {e}\n{r.context()}"
        assert e["step"] == BAD_STEP, f"rank {rank} stopped in step {e['step']}\n{r.context()}"
        if rank == BAD_RANK:
            assert (e["origin"], e["peer_stop"]) == (origin, False), e
            if call is not None:
                assert e["call"] == call, e
        else:
            assert (e["origin"], e["peer_stop"], e["peer_rank"]) == ("peer", True, BAD_RANK), e
        assert (r.folder(BAD_STEP, rank) / "dump.json").exists(), r.step_folders()
        planted = ["module.fc1.weight"] if (mode == "nan_shard" and rank == BAD_RANK) else []
        assert res["nonfinite_state"] == planted, f"rank {rank}: NaN/inf reached {res['nonfinite_state']}"
    assert r.step_folders() == [f"step{BAD_STEP}"], r.context()


def test_ds_tensor_is_the_shard_the_nan_is_named_by():
    """The NaN shard of ZeRO-3 is named as its parameter (deepspeed_engine.zero_partitions)."""
    from msprobe_cpp import deepspeed_engine

    class Engine(torch.nn.Module):  # the attributes zero_partitions reads, nothing more
        def __init__(self) -> None:
            super().__init__()
            self.module = torch.nn.Linear(2, 2)
            self.module.weight.ds_tensor = torch.zeros(2)
            self.optimizer = type("Wrapper", (), {})()
            self.optimizer.fp32_partitioned_groups_flat = [torch.zeros(3)]
            self.optimizer.optimizer = torch.optim.SGD([torch.zeros(1)], lr=0.1)

    engine = Engine()
    names = [n for n, _ in deepspeed_engine.zero_partitions(engine, "", engine.named_parameters())]
    assert names == ["module.weight.ds_tensor", "zero.fp32_partitioned_groups_flat[0]", "zero.param_groups[0][0]"]


@pytest.mark.parametrize("stage", [1, 3])
def test_grad_probe_summarizes_the_partitions_deepspeed_holds(tmp_path, stage):
    """ZeRO leaves no .grad on the module's parameters at the optimizer step (msprobe's monitor
    writes headers only): the rows are ZeRO's fp32 partitions, named as such, this rank's part."""
    r = run(tmp_path, ["--stage", str(stage), "--dtype", "bf16", "--task", "grad_probe", "--steps", "2"])
    finished_cleanly(r)
    whole = sum(p.numel() for p in __import__("ds_worker").Net().parameters())
    for rank in range(WORLD):
        lines = (tmp_path / "dump" / f"rank{rank}" / "grad_summary_1.csv").read_text(
            encoding="utf-8-sig").splitlines()
        rows = [line.split(",") for line in lines[1:]]
        assert rows and all(row[0].startswith("zero.") for row in rows), lines
        sizes = [int(row[-1].strip("[]")) for row in rows]
        assert 0 < sum(sizes) < whole, f"rank {rank}: {sizes} of {whole} elements: not a partition"
        assert all(float(v) == float(v) and abs(float(v)) != float("inf") for row in rows for v in row[1:4]), rows
    assert "the gradients summarized are ZeRO's fp32 partitions'" in "".join(r.logs)
