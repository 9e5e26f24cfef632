"""FSDP2 (torch.distributed.fsdp.fully_shard on each block and on the root; 2 gloo processes on
CPU) under the tool: clean training is bit-identical to the run without it, and FSDP2's own
uninitialized all-gather buffers (torch.empty, then Tensor.narrow of them) are never an anomaly,
so a clean overflow_check run writes no step folder; a NaN in one rank's batch stops both ranks
in that step, with no NaN in any rank's local shards."""

import pytest

torch = pytest.importorskip("torch")
try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401 - FSDP2, torch 2.x
except Exception as e:  # noqa: BLE001 - ImportError, or torch 1.13's fsdp failing to import under Python 3.11
    pytest.skip(f"this torch has no torch.distributed.fsdp.fully_shard (FSDP2): {type(e).__name__}",
                allow_module_level=True)
from dist_runs import (assert_finite_state, assert_states_equal, clean_bare_run, error_name,  # noqa: E402
                       run_ranks)
from gloo import needs_gloo  # noqa: E402
from dumps import load as read_dump_file

pytestmark = [pytest.mark.slow, needs_gloo]

WORLD = 2
STEPS = 5
BAD_STEP = 2
TIMEOUT_S = 90.0
FSDP2 = ["--wrap", "fsdp2"]

_bare_runs = {}


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    def get(optim: str):
        if optim not in _bare_runs:
            out = tmp_path_factory.mktemp(f"bare_fsdp2_{optim}")
            _bare_runs[optim] = clean_bare_run(out, WORLD, FSDP2 + ["--optim", optim, "--steps", str(STEPS)],
                                               TIMEOUT_S)
        return _bare_runs[optim]
    yield get
    _bare_runs.clear()


CLEAN = [pytest.param(task, level, "sgd", id=f"{task}-{level}")
         for task in ("statistics", "overflow_check") for level in ("L1", "mix")]
CLEAN += [pytest.param("overflow_check", "L1", "adamw", id="overflow_check-L1-adamw")]


@pytest.mark.parametrize("task,level,optim", CLEAN)
def test_clean_fsdp2_training_is_bit_identical_to_the_bare_run(tmp_path, bare, task, level, optim):
    run = run_ranks(tmp_path, WORLD, FSDP2 + ["--task", task, "--level", level, "--optim", optim,
                                              "--steps", str(STEPS)], timeout=TIMEOUT_S)
    ref = bare(optim)
    assert run.returncodes == [0] * WORLD, run.context()
    for r, res in enumerate(run.results):
        assert res["raised"] is None and res["exceptions"] == [] and res["finished"], \
            f"rank {r} raised {error_name(res['raised'])}\n{run.context()}"
        assert res["losses"] == ref.results[r]["losses"], f"rank {r}: losses differ from the bare run"
        assert_states_equal(run.state(r), ref.state(r), f"rank {r}'s local shards against the bare run's")
    if task == "overflow_check":
        # FSDP2's all-gather output is torch.empty'd and narrowed: uninitialized memory, never an anomaly.
        assert run.step_folders() == [], f"a clean overflow_check run wrote {run.step_folders()}\n{run.context()}"
    else:
        for r in range(WORLD):
            assert (run.folder(0, r) / "dump.json").exists(), run.step_folders()


def test_a_nan_batch_on_one_rank_stops_both_in_that_step(tmp_path):
    bad_rank = 1
    run = run_ranks(tmp_path, WORLD, FSDP2 + ["--mode", "nan_batch", "--bad-rank", str(bad_rank), "--bad-step",
                                              str(BAD_STEP), "--task", "overflow_check", "--level", "L1",
                                              "--steps", str(STEPS)], timeout=TIMEOUT_S)
    assert run.returncodes == [0] * WORLD, run.context()
    for r, res in enumerate(run.results):
        exc = res["raised"]
        assert exc is not None and exc["type"] == "OverflowError", \
            f"rank {r} ended with {error_name(exc)}\n{run.context()}"
        assert exc["step"] == BAD_STEP, f"rank {r} stopped in step {exc['step']}\n{run.context()}"
        if r == bad_rank:
            assert exc["peer_stop"] is False and exc["origin"] == "input", exc
        else:
            assert exc["peer_stop"] is True and exc["peer_rank"] == bad_rank and exc["origin"] == "peer", exc
        assert not res["nonfinite_params"] and not res["nonfinite_optimizer_state"], f"rank {r} was damaged: {res}"
        assert_finite_state(run.state(r), f"rank {r}'s local shards after the stop")
        folder = run.folder(BAD_STEP, r)
        assert (folder / "dump.json").exists() and (folder / "overflow_report.json").exists(), run.step_folders()
        report = read_dump_file(folder, "overflow_report.json")
        if r == bad_rank:
            assert report["first_anomaly"]["origin"] == "input", report["first_anomaly"]
        else:
            assert report.get("peer_stop", {}).get("rank") == bad_rank, report
