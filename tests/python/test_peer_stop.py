"""One rank overflows, every rank stops (3 gloo processes on 127.0.0.1): each ends with an
OverflowError naming the overflowing rank and its call, and keeps its records of that step."""
import pathlib
from typing import Sequence

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402
from dist_runs import PEER_RUN, run_ranks  # noqa: E402
from testenv import said_besides_on_line  # noqa: E402
from gloo import needs_gloo  # noqa: E402
from dumps import load as read_dump_file

WORLD = 3
TIMEOUT_S = 90.0
TORCH_MAJOR = int(torch.__version__.split(".")[0])

pytestmark = [pytest.mark.slow, needs_gloo]

MODES = {"nan": ["--mode", "nan_batch", "--action", "raise"],
         "continue": ["--mode", "nan_batch", "--action", "continue"],
         "fp16": ["--job", "fp16_all_reduce", "--action", "continue"]}


def run_peers(out: pathlib.Path, bad_rank: int, bad_step: int, mode: str = "nan", steps: int = 5,
              more: Sequence[str] = ()) -> tuple:
    """rank_worker.py's small model on WORLD ranks, gradients averaged by all_reduce, under
    overflow_check; rank BAD_RANK's batch holds a NaN at step BAD_STEP. Mode "nan": action raise;
    "continue": action continue (nobody stops); "fp16": no training, one float16 all_reduce whose
    sum overflows. Returns each rank's result and output."""
    # --reraise non-overflow: any other error a rank meets fails its exit status below.
    run = run_ranks(out, WORLD, PEER_RUN + MODES[mode] + ["--reraise", "non-overflow", "--bad-rank", str(bad_rank),
                                                          "--bad-step", str(bad_step), "--steps", str(steps),
                                                          *more],
                    timeout=TIMEOUT_S)
    # Every process ends on its own, with status 0: the watcher threads end with them cleanly.
    assert run.returncodes == [0] * WORLD, run.context()
    return run.results, run.logs


@pytest.mark.parametrize("bad_rank", [1, 0])  # 0 hosts the store
def test_every_rank_stops_with_the_one_that_overflowed(tmp_path, bad_rank):
    results, logs = run_peers(tmp_path, bad_rank, 2)
    assert all(r["raised"] for r in results), logs
    stopped = results[bad_rank]["raised"]
    raised_at = stopped["at"]
    call = stopped["call"]
    assert call.startswith("Functional.linear.") and not stopped["peer_stop"]
    assert f"rank {bad_rank}" in stopped["message"] and call in stopped["message"]
    assert stopped["step"] == 2
    for r in results:
        e = r["raised"]
        # A peer meets the stop in the step it is in: step 2 at its first hooked call, or still in
        # step 1 when it gets to that step's stop()/step() only after the bad rank has stopped (a
        # loaded machine). Its folder is that step's.
        assert e["step"] in (1, 2), r
        folder = tmp_path / "dump" / f"step{e['step']}" / f"rank{r['rank']}"
        assert (folder / "dump.json").exists() and (folder / "overflow_report.json").exists(), r
        report = read_dump_file(folder, "overflow_report.json")
        # Order, not speed: each rank's evidence is on disk before it raises, and a peer in the
        # stopping rank's step writes it before it acknowledges, so before that rank raises (a
        # file's time may trail the clock by a tick; none of this is a timing budget).
        written = (folder / "overflow_report.json").stat().st_mtime
        assert written <= e["at"] + 0.05, (written, r)
        if r["rank"] != bad_rank and e["step"] == 2:
            assert written <= raised_at + 0.05, (written, raised_at, r)
        if r["rank"] == bad_rank:
            assert "peer_stop" not in report and report["first_anomaly"]["origin"] == "input"
            continue
        assert e["peer_stop"] and e["peer_rank"] == bad_rank and e["call"] == call, r
        assert e["message"].startswith(f"[rank {r['rank']}] stopping: rank {bad_rank} overflowed at step 2 "
                                       f"({call}, origin input)"), e["message"]
        # The published stop's fields (peer_overflow_members): scene and level as the peer said them.
        assert report["peer_stop"] == {"rank": bad_rank, "step": 2, "call": call, "origin": "input",
                                       "scene": e["scene"], "level": e["level"]}, report
        # The records it had of the step, from its first call on: how far it got before its watcher
        # saw the stop depends on timing (it stops at its next hooked call, before recording it, so
        # a peer that reaches step 2 after the stop has none of it).
        data = read_dump_file(folder)["data"]
        if e["step"] == 1 or data:
            assert list(data)[:1] == ["Functional.linear.0.forward"], list(data)


def report(out: pathlib.Path, step: int, rank: int) -> dict:
    return read_dump_file(out / "dump" / f"step{step}" / f"rank{rank}", "overflow_report.json")


def test_nan_arriving_through_all_reduce_is_judged_there_with_origin_peer(tmp_path):
    results, logs = run_peers(tmp_path, 1, 2, "continue")
    assert not any(r["raised"] for r in results), logs
    assert report(tmp_path, 2, 1)["first_anomaly"]["origin"] == "input"
    for rank in (0, 2):
        first = report(tmp_path, 2, rank)["first_anomaly"]
        assert first["api_name"] == "Distributed.all_reduce.0.forward", first
        assert (first["origin"], first["rank"]) == ("peer", "critical")
        assert first["note"] == "rank 1 gave this collective NaN/inf"
        data = read_dump_file(tmp_path / "dump" / "step2" / f"rank{rank}")["data"]
        record = data["Distributed.all_reduce.0.forward"]
        assert record["input_args"][0]["Max"] == record["input_args"][0]["Max"]  # clean before
        assert record["output"][0]["Max"] != record["output"][0]["Max"]  # NaN after


def test_an_fp16_all_reduce_that_overflows_is_an_op_origin_on_every_rank(tmp_path):
    results, logs = run_peers(tmp_path, -1, -1, "fp16")
    for rank in range(WORLD):
        first = report(tmp_path, 0, rank)["first_anomaly"]
        assert (first["api_name"], first["rank"], first["origin"]) == \
            ("Distributed.all_reduce.0.forward", "critical", "op"), (rank, first, logs[rank])


def test_a_clean_run_writes_nothing_and_ends_cleanly(tmp_path):
    results, logs = run_peers(tmp_path, -1, -1, "continue", steps=20)
    assert not any(r["raised"] for r in results), logs
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())
    # Quiet (issue 32): nothing at all on either rank's output. The watcher's renewed store wait
    # made torch 2.x's c10d log two warnings every 2 s on every rank.
    assert [said_besides_on_line(log) for log in logs] == [""] * len(logs), logs


@pytest.mark.skipif(TORCH_MAJOR < 2, reason="torch 1.13 has no torch._dynamo")
@pytest.mark.parametrize("destroy", ["attribute", "imported"])
def test_a_clean_run_that_imported_dynamo_first_ends_quietly(tmp_path, destroy):
    """A program that imports torch._dynamo (torch.compile, some trainers) before its process group
    (found by the warm forks' preload, tests/python/zygote.py). Rank 0's destroy_process_group
    ended the store's server while every rank's watcher was in its store wait: c10d printed
    "recvValueWithTimeout failed" and a C++ stack on each. Through dist.destroy_process_group (the
    tool's wrapper), and through the name imported before start() (the store kept until exit)."""
    results, logs = run_peers(tmp_path, -1, -1, "continue", steps=3, more=["--import-dynamo", "--destroy", destroy])
    assert not any(r["raised"] for r in results), logs
    assert [said_besides_on_line(log) for log in logs] == [""] * len(logs), logs


def test_an_unreachable_store_costs_the_coordination_not_the_training(tmp_path, monkeypatch, capfd):
    import msprobe_cpp
    from msprobe_cpp import peer_stop

    def unreachable(session, patches, host, port):
        raise RuntimeError("connection refused")

    monkeypatch.setattr(peer_stop, "_store_address", lambda: ("127.0.0.1", 1))
    monkeypatch.setattr(peer_stop, "PeerStop", unreachable)
    assert peer_stop.create(None, None) is None
    assert "a stop on one rank will not stop the others" in capfd.readouterr().err
    assert peer_stop.active() is None
