"""DistributedDataParallel (gloo, CPU, 2-3 processes on 127.0.0.1) under the tool.

Clean training is bit-identical to the run without the tool. A NaN/inf origin on one rank (a NaN
in the batch, an fp16 op that overflows in forward, a sqrt whose backward makes inf) stops every
rank in the same step with msprobe_cpp.OverflowError, before any NaN reaches a parameter or the
optimizer's state, and nothing else (no gloo error) is what a rank ends with. After a stop under
torch.distributed the tool refuses to go on: the next call raises DistributedStopError, which an
`except msprobe_cpp.OverflowError:` does not swallow. Under torchrun the job ends soon after a stop.
"""
import json

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402
from dist_runs import (assert_finite_state, assert_states_equal, clean_bare_run, error_name,  # noqa: E402
                       run_ranks)
from gloo import needs_gloo  # noqa: E402
from testenv import said_besides_on_line  # noqa: E402

import msprobe_cpp  # noqa: E402
from dumps import load as read_dump_file

pytestmark = [pytest.mark.slow, needs_gloo]

TIMEOUT_S = 60.0
STEPS = 5
BAD_STEP = 2

_bare_runs = {}


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """The run without the tool (cached per world size and model): the reference."""
    def get(world: int, model: str = "mlp"):
        key = (world, model)
        if key not in _bare_runs:
            out = tmp_path_factory.mktemp(f"bare_{world}_{model}")
            _bare_runs[key] = clean_bare_run(out, world, ["--model", model, "--steps", str(STEPS)], TIMEOUT_S)
        return _bare_runs[key]
    yield get
    _bare_runs.clear()


# --- 1. clean training: bit-identical to the bare run ---

CLEAN = [pytest.param(world, task, level, "mlp", False, id=f"{world}ranks-{task}-{level}")
         for world in (2, 3) for task in ("statistics", "overflow_check") for level in ("L1", "mix")]
CLEAN += [
    pytest.param(2, "overflow_check", "mix", "transformer", False, id="2ranks-overflow_check-mix-transformer"),
    pytest.param(2, "overflow_check", "L1", "mlp", True, id="2ranks-overflow_check-L1-start_module"),
]


@pytest.mark.parametrize("world,task,level,model,start_module", CLEAN)
def test_clean_training_is_bit_identical_to_the_bare_run(tmp_path, bare, world, task, level, model, start_module):
    args = ["--task", task, "--level", level, "--model", model, "--steps", str(STEPS)]
    run = run_ranks(tmp_path, world, args + (["--start-module"] if start_module else []), timeout=TIMEOUT_S)
    ref = bare(world, model)
    assert run.returncodes == [0] * world, run.context()
    for r, res in enumerate(run.results):
        assert res["raised"] is None and res["exceptions"] == [] and res["finished"], \
            f"rank {r} raised {error_name(res['raised'])}\n{run.context()}"
        assert res["losses"] == ref.results[r]["losses"], f"rank {r}: losses differ from the bare run"
        assert len(res["losses"]) == STEPS
        assert_states_equal(run.state(r), ref.state(r), f"rank {r}'s final state_dict against the bare run's")
        assert not res["nonfinite_params"] and not res["nonfinite_optimizer_state"]
    if task == "overflow_check":
        assert run.step_folders() == [], f"a clean overflow_check run wrote {run.step_folders()}\n{run.context()}"
        if world == 2 and level == "L1" and model == "mlp" and not start_module:
            # Quiet: nothing at all on any rank's stdout or stderr.
            assert [said_besides_on_line(log) for log in run.logs] == [""] * world, run.context()
    else:  # the tool was there: every step of every rank is dumped
        for step in range(STEPS):
            for r in range(world):
                assert (run.folder(step, r) / "dump.json").exists(), (step, r, run.step_folders())


# --- 2. a fault on one rank stops every rank in the same step, before any damage ---

ORIGIN = {"nan_batch": "input", "fp16_op": "op", "backward_nan": "op"}
FAULTS = [pytest.param(mode, world, bad_rank, "L1", False, id=f"{mode}-{world}ranks-bad{bad_rank}")
          for mode in ("nan_batch", "fp16_op", "backward_nan") for world, bad_rank in ((2, 1), (3, 0))]
FAULTS += [
    pytest.param("fp16_op", 2, 1, "mix", False, id="fp16_op-2ranks-bad1-mix"),
    pytest.param("nan_batch", 3, 0, "L1", True, id="nan_batch-3ranks-bad0-start_module"),
]


def assert_stopped_together(run, mode: str, bad_rank: int) -> None:
    """Contract 2 on the recorded first OverflowError of each rank."""
    for r, res in enumerate(run.results):
        exc = res["exceptions"][0] if res["exceptions"] else None
        assert exc is not None and exc["type"] == "OverflowError" and exc["is_overflow_error"], \
            f"rank {r} ended with {error_name(exc)}\n{run.context()}"
        assert "Connection closed by peer" not in exc["message"]
        assert exc["step"] == BAD_STEP, f"rank {r} stopped in step {exc['step']}\n{run.context()}"
        if r == bad_rank:
            assert exc["peer_stop"] is False and exc["origin"] == ORIGIN[mode], exc
            if mode == "backward_nan":
                assert "sqrt" in exc["call"], exc
        else:
            assert exc["peer_stop"] is True and exc["peer_rank"] == bad_rank and exc["origin"] == "peer", \
                f"rank {r}: {exc}"
        assert not res["nonfinite_params"] and not res["nonfinite_buffers"] \
            and not res["nonfinite_optimizer_state"], f"rank {r} was damaged: {res}"
        assert "after_error" not in res, res["after_error"]
        assert len(res["losses"]) == BAD_STEP  # steps 0 and 1 done, step 2 stopped


def assert_step_folders(run, mode: str, bad_rank: int) -> None:
    for r in range(run.world):
        folder = run.folder(BAD_STEP, r)
        assert (folder / "dump.json").exists() and (folder / "overflow_report.json").exists(), \
            f"rank {r}: {run.step_folders()}"
        report = read_dump_file(folder, "overflow_report.json")
        if r == bad_rank:
            assert report["first_anomaly"]["origin"] == ORIGIN[mode], report["first_anomaly"]
        else:
            assert report.get("peer_stop", {}).get("rank") == bad_rank, report


@pytest.mark.parametrize("mode,world,bad_rank,level,start_module", FAULTS)
def test_a_fault_on_one_rank_stops_every_rank_in_that_step(tmp_path, mode, world, bad_rank, level, start_module):
    args = ["--mode", mode, "--bad-rank", str(bad_rank), "--bad-step", str(BAD_STEP), "--task", "overflow_check",
            "--level", level, "--steps", str(STEPS)] + (["--start-module"] if start_module else [])
    run = run_ranks(tmp_path, world, args, timeout=TIMEOUT_S)
    assert run.returncodes == [0] * world, run.context()
    for r, res in enumerate(run.results):
        assert res["raised"] is not None and res["raised"]["type"] == "OverflowError", \
            f"rank {r} ended with {error_name(res['raised'])}\n{run.context()}"
    assert_stopped_together(run, mode, bad_rank)
    assert_step_folders(run, mode, bad_rank)
    for r in range(world):
        assert_finite_state(run.state(r), f"rank {r}'s state after the stop")


@pytest.mark.parametrize("mode", ["fp16_op", "backward_nan"])
def test_without_the_tool_each_fault_puts_nan_into_the_weights(tmp_path, mode):
    """The damage the tool must prevent is there without it: after the fault step's opt.step().
    (A NaN in the batch does it too, plainly; the op faults are the ones worth proving.)"""
    run = run_ranks(tmp_path, 2, ["--bare", "--mode", mode, "--bad-rank", "1", "--bad-step", str(BAD_STEP),
                                  "--steps", "3"], timeout=TIMEOUT_S)
    assert run.returncodes == [0, 0], run.context()
    assert run.results[1]["nonfinite_after_fault_step"], run.context()
    for r in range(2):  # and DDP's all_reduce took it to the other rank
        assert run.results[r]["nonfinite_params"] and run.results[r]["nonfinite_optimizer_state"], run.context()


# --- 3. catch and go on: refused under torch.distributed ---

def test_distributed_stop_error_is_a_runtime_error_and_not_an_overflow_error():
    stop_error = getattr(msprobe_cpp, "DistributedStopError", None)
    assert stop_error is not None, "msprobe_cpp.DistributedStopError does not exist"
    assert issubclass(stop_error, RuntimeError) and not issubclass(stop_error, msprobe_cpp.OverflowError)


@pytest.mark.parametrize("world,bad_rank", [(2, 1), (3, 0)], ids=["2ranks-bad1", "3ranks-bad0"])
def test_catching_the_overflow_error_and_going_on_is_refused(tmp_path, world, bad_rank):
    args = ["--mode", "nan_batch", "--bad-rank", str(bad_rank), "--bad-step", str(BAD_STEP),
            "--task", "overflow_check", "--level", "L1", "--steps", str(STEPS), "--catch"]
    run = run_ranks(tmp_path, world, args, timeout=45.0)
    assert run.returncodes == [0] * world, run.context()
    for r, res in enumerate(run.results):
        types = [e["type"] for e in res["exceptions"]]
        assert types == ["OverflowError", "DistributedStopError"], f"rank {r}: {types}\n{run.context()}"
        stop = res["exceptions"][1]
        assert stop["is_distributed_stop_error"] and stop["is_runtime_error"] and not stop["is_overflow_error"], stop
        assert "step 2" in stop["message"] and "torch.distributed" in stop["message"], stop["message"]
    assert_stopped_together(run, "nan_batch", bad_rank)
    states = [run.state(r) for r in range(world)]
    for r in range(world):
        assert_finite_state(states[r], f"rank {r}'s final state")
        assert_states_equal(states[r], states[0], f"rank {r}'s final state against rank 0's")


# --- 4. torchrun: the job ends soon after the stop ---

def test_under_torchrun_the_job_ends_soon_after_the_stop(tmp_path):
    args = ["--mode", "nan_batch", "--bad-rank", "1", "--bad-step", str(BAD_STEP), "--task", "overflow_check",
            "--level", "L1", "--steps", "50", "--reraise", "all"]
    run = run_ranks(tmp_path, 2, args, torchrun=True, timeout=90.0, read_results=False)
    # Once rank 1 fails, torchrun's agent ends rank 0 (SIGTERM): rank 0 may be gone before its own
    # result file is written. Its evidence is on disk before that: rank 1 leaves only once rank 0
    # has written its step (the acknowledgement), which the step folders below prove.
    path = tmp_path / "result_rank1.json"
    assert path.exists(), f"rank 1 left no result\n{run.context()}"
    bad = json.loads(path.read_text())
    assert bad["raised"] is not None and bad["raised"]["type"] == "OverflowError", run.context()
    stopped_at = bad["raised"]["at"]
    assert run.ended_at - stopped_at < 30.0, f"the job ended {run.ended_at - stopped_at:.1f} s after the stop"
    assert run.returncodes != [0], "torchrun saw no failing worker"
    for r in range(2):
        folder = run.folder(BAD_STEP, r)
        assert (folder / "dump.json").exists(), \
            f"no {folder.relative_to(tmp_path)}/dump.json; step{BAD_STEP} holds " \
            f"{sorted(p.name for p in folder.parent.glob('*'))}\n{run.context()}"


# --- 5. a loss scaler under DDP: a step whose gradients overflowed is skipped on every rank ---

def _cpu_grad_scaler() -> bool:
    try:
        torch.amp.GradScaler("cpu")
    except Exception:  # noqa: BLE001 - no torch.amp.GradScaler (1.13), or one that needs CUDA
        return False
    return True


INIT_SCALE = 2.0 ** 8


@pytest.mark.skipif(not _cpu_grad_scaler(), reason="torch.amp.GradScaler('cpu') arrived in PyTorch 2.3")
def test_a_grad_scaler_skips_the_overflowing_step_on_every_rank_and_nothing_stops(tmp_path):
    """float16 autocast and torch.amp.GradScaler("cpu") under DDP. At step 2 rank 1 alone hands the
    scaler its loss times 1e6: that rank's own backward overflows the float16 logits' gradient, and
    rank 0 gets the inf only through DDP's all-reduce of the gradients. Both scalers find it, skip
    the step and halve the scale; the tool must see a skipped step on both ranks, not a stop, and
    change nothing: every rank bit-identical to the same run without the tool."""
    args = ["--amp", "--init-scale", str(INIT_SCALE), "--mode", "scaled_overflow", "--bad-rank", "1",
            "--bad-step", str(BAD_STEP), "--task", "overflow_check", "--level", "L1", "--steps", str(STEPS)]
    run = run_ranks(tmp_path / "tool", 2, args, timeout=TIMEOUT_S)
    ref = run_ranks(tmp_path / "bare", 2, args + ["--bare"], timeout=TIMEOUT_S)
    assert ref.returncodes == [0, 0] and all(r["raised"] is None and r["finished"] for r in ref.results), \
        ref.context()
    # Without the tool the fault is what it claims: a skipped step on both ranks, no damage.
    expected = [INIT_SCALE] * BAD_STEP + [INIT_SCALE / 2] * (STEPS - BAD_STEP)
    assert [r["scales"] for r in ref.results] == [expected, expected], ref.context()
    assert ref.results[1]["nonfinite_after_fault_step"] == [], ref.context()
    assert run.returncodes == [0, 0], run.context()
    states = [run.state(r) for r in range(2)]
    for r, res in enumerate(run.results):
        assert res["raised"] is None and res["exceptions"] == [] and res["finished"], \
            f"rank {r} raised {error_name(res['raised'])}\n{run.context()}"
        assert "Traceback" not in run.logs[r], run.context()
        assert res["scales"] == expected, f"rank {r}'s scales {res['scales']}\n{run.context()}"
        assert res["losses"] == ref.results[r]["losses"] and len(res["losses"]) == STEPS, \
            f"rank {r}: losses differ from the bare run"
        assert not res["nonfinite_params"] and not res["nonfinite_optimizer_state"], res
        assert_finite_state(states[r], f"rank {r}'s final state")
        assert_states_equal(states[r], ref.state(r), f"rank {r}'s final state against the bare run's")
        assert_states_equal(states[r], states[0], f"rank {r}'s final state against rank 0's")
    # A skipped step is not dumped (overflow_check.dump_skipped_steps is false by default).
    assert run.step_folders() == [], f"{run.step_folders()}\n{run.context()}"


# --- 6. torch.multiprocessing.spawn: the ranks of one launcher stop together, and it joins ---

def test_under_mp_spawn_every_rank_stops_and_the_launcher_joins(tmp_path):
    args = ["--mode", "nan_batch", "--bad-rank", "1", "--bad-step", str(BAD_STEP), "--task", "overflow_check",
            "--level", "L1", "--steps", str(STEPS)]
    run = run_ranks(tmp_path, 2, args, spawn=True, timeout=TIMEOUT_S)
    assert run.returncodes == [0], run.context()
    assert (tmp_path / "spawn_joined").exists(), run.context()
    assert "ProcessRaisedException" not in run.logs[0] and "Traceback" not in run.logs[0], run.context()
    pids = {(tmp_path / f"pid_rank{r}").read_text() for r in range(2)}
    assert len(pids) == 2, pids  # two spawned processes, one per rank
    for r, res in enumerate(run.results):
        assert res["raised"] is not None and res["raised"]["type"] == "OverflowError", \
            f"rank {r} ended with {error_name(res['raised'])}\n{run.context()}"
    assert_stopped_together(run, "nan_batch", 1)
    assert_step_folders(run, "nan_batch", 1)
    for r in range(2):
        assert_finite_state(run.state(r), f"rank {r}'s state after the stop")
