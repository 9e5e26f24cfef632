"""A real 2-process torch.distributed run (gloo, localhost) under the debugger.

Both ranks run rank_worker.py --job linear_step (started by dist_runs.run_ranks, bounded in time)
and the test reads their dumps: each rank writes its own step0/rank<R> folder with its own
statistics, the all_reduce of the gradients is recorded by both, and config "rank": [1] leaves
rank 0 without any output although it takes part in the collectives.
"""
import hashlib
import json
import pathlib
from typing import Dict, List

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402
from dist_runs import run_ranks  # noqa: E402
from dumps import load  # noqa: E402
from gloo import needs_gloo  # noqa: E402

WORLD_SIZE = 2
TIMEOUT_S = 120.0

pytestmark = [pytest.mark.slow, needs_gloo]


def write_config(tmp_path: pathlib.Path, rank: List) -> pathlib.Path:
    config = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
              "step": [0], "rank": rank}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def run_two_ranks(tmp_path: pathlib.Path, config: pathlib.Path, job: str = "linear_step") -> Dict[int, dict]:
    """Runs the two ranks; returns what each worker computed itself, by rank."""
    run = run_ranks(tmp_path, WORLD_SIZE, ["--job", job, "--config", str(config), "--reraise", "all"],
                    timeout=TIMEOUT_S)
    assert run.returncodes == [0] * WORLD_SIZE, f"the 2-process run failed\n{run.context()}"
    return {r: run.results[r]["expected"] for r in range(WORLD_SIZE)}


def test_each_rank_dumps_its_own_folder_with_its_own_statistics(tmp_path):
    config = write_config(tmp_path, rank=[])
    expected = run_two_ranks(tmp_path, config)
    step0 = tmp_path / "dump" / "step0"
    assert sorted(p.name for p in step0.iterdir()) == ["rank0", "rank1"]

    linear_inputs = {}
    reduce_inputs = {}
    for rank in range(WORLD_SIZE):
        folder = step0 / f"rank{rank}"
        for name in ("dump.json", "stack.json", "construct.json"):
            assert (folder / name).is_file(), f"{folder / name} missing"
        dump = load(folder, "dump.json")
        assert dump["task"] == "statistics" and dump["level"] == "L1"
        data = dump["data"]
        names = list(data)
        assert "Functional.linear.0.forward" in data
        # One all_reduce per parameter (weight, then bias), after the backward, then one with a group.
        assert "Distributed.all_reduce.0.forward" in data, names
        assert "Distributed.all_reduce.1.forward" in data, names
        assert "Distributed.all_reduce.3.forward" not in data, names
        assert names.index("Distributed.all_reduce.0.forward") > names.index("Functional.linear.0.backward")
        # As msprobe writes it: a stack for every forward record, none for backward records.
        assert set(load(folder, "stack.json")) == {n for n in data if not n.endswith(".backward")}
        assert load(folder, "construct.json") == {}  # no modules at L1, as msprobe writes it

        x = data["Functional.linear.0.forward"]["input_args"][0]
        assert x["type"] == "torch.Tensor" and x["shape"] == [3, 8] and x["dtype"] == "torch.float32"
        assert x["Max"] == pytest.approx(expected[rank]["Max"], rel=1e-6)
        assert x["Min"] == pytest.approx(expected[rank]["Min"], rel=1e-6)
        linear_inputs[rank] = (x["Max"], x["Min"])

        grad = data["Distributed.all_reduce.0.forward"]["input_args"][0]
        assert grad["type"] == "torch.Tensor"
        assert grad["shape"] == [4, 8] and grad["dtype"] == "torch.float32"
        # The rank's own gradient, as it was before the reduction.
        assert grad["Max"] == pytest.approx(expected[rank]["grad_Max"], rel=1e-5, abs=1e-6)
        assert grad["Min"] == pytest.approx(expected[rank]["grad_Min"], rel=1e-5, abs=1e-6)
        reduce_inputs[rank] = (grad["Max"], grad["Min"])
        assert data["Distributed.all_reduce.1.forward"]["input_args"][0]["shape"] == [4]
        # msprobe's record of a process group: its ranks, and the md5 of their text.
        assert data["Distributed.all_reduce.2.forward"]["input_kwargs"]["group"] == {
            "type": "torch.ProcessGroup", "group_ranks": [0, 1],
            "group_id": hashlib.md5(b"[0, 1]").hexdigest()}

    assert linear_inputs[0] != linear_inputs[1]  # different data on each rank, different statistics
    assert reduce_inputs[0] != reduce_inputs[1]
    # The collective really ran: both ranks end with the same averaged gradients.
    assert expected[0]["grad_sum"] == pytest.approx(expected[1]["grad_sum"], rel=1e-6)


def test_rank_list_1_leaves_rank_0_without_output(tmp_path):
    config = write_config(tmp_path, rank=[1])
    expected = run_two_ranks(tmp_path, config)  # rank 0 still takes part: both finish
    dump_path = tmp_path / "dump"
    assert sorted(p.name for p in (dump_path / "step0").iterdir()) == ["rank1"]
    assert not [p for p in dump_path.rglob("rank0*")], "rank 0 wrote something"
    assert not [p for p in dump_path.rglob("rank") if p.is_dir()]
    folder = dump_path / "step0" / "rank1"
    for name in ("dump.json", "stack.json", "construct.json"):
        assert (folder / name).is_file()
    data = load(folder, "dump.json")["data"]
    assert "Distributed.all_reduce.0.forward" in data
    x = data["Functional.linear.0.forward"]["input_args"][0]
    assert x["Max"] == pytest.approx(expected[1]["Max"], rel=1e-6)
    assert x["Min"] == pytest.approx(expected[1]["Min"], rel=1e-6)
    assert expected[0]["grad_sum"] == pytest.approx(expected[1]["grad_sum"], rel=1e-6)


def test_an_in_place_collective_is_recorded_with_what_it_wrote(tmp_path):
    # all_reduce writes its buffer and bumps no version counter: the buffer's statistics from
    # before the call (the op that made it was recorded with them) must not stand for its output,
    # nor for the input of the op after it; nor after an asynchronous one's wait.
    config = write_config(tmp_path, rank=[])
    expected = run_two_ranks(tmp_path, config, job="reduce_in_place")
    for rank in range(WORLD_SIZE):
        data = load(tmp_path / "dump" / "step0" / f"rank{rank}", "dump.json")["data"]
        assert expected[rank] == {"y": 3.0, "a": 6.0}  # 1 + 2, and twice it: the collectives ran
        made = data["Tensor.__mul__.0.forward"]["output"][0]
        assert made["Max"] == rank + 1.0
        reduced = data["Distributed.all_reduce.0.forward"]
        assert reduced["input_args"][0]["Max"] == rank + 1.0  # in-place: its input before the call
        assert reduced["output"][0]["Max"] == 3.0
        assert data["Tensor.add.0.forward"]["input_args"][0]["Max"] == 3.0
        assert data["Distributed.all_reduce.1.forward"]["input_args"][0]["Max"] == 2.0 * (rank + 1)
        assert data["Tensor.add.1.forward"]["input_args"][0]["Max"] == 6.0
