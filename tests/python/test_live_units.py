"""The live parts driven on their own, through the test hooks of _C._units (csrc/bind/bind_units.cpp):
OverflowWatch judging calls made of real tensors, StepWriter writing a finished step, DeferredCalls
queueing calls. No session, no hook and no training loop stands between the test and the part."""
import json
import os
import stat

import pytest
import torch

from msprobe_cpp import _C
from testenv import devices

WATCH = json.dumps({"task": "overflow_check", "level": "L1"})


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_watch_names_the_origin_of_each_kind(device):
    watch = _C._units.Watch(WATCH)
    x = torch.ones(4, device=device)
    clean = watch.judge("Torch.add.0.forward", (x, x), x + x)
    assert not clean["flagged"] and clean["origin"] is None and not watch.step_flagged

    made = torch.full((4,), float("inf"), device=device)
    op = watch.judge("Torch.mul.0.forward", (x, 1e39), made)
    assert op["flagged"] and op["origin"] == "op" and op["finding"] == "Torch.mul.0.forward"
    # The next call reads what the op made: explained downstream, not a second origin.
    downstream = watch.judge("Torch.relu.0.forward", (made,), torch.relu(made))
    assert downstream["origin"] is None
    assert watch.step_flagged


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_watch_tells_a_batch_from_a_parameter(device):
    watch = _C._units.Watch(WATCH)
    weight = torch.ones(4, device=device)
    watch.add_model_tensor("fc.weight", weight)
    watch.new_step()
    batch = torch.tensor([1.0, float("nan"), 1.0, 1.0], device=device)
    came_in = watch.judge("Torch.mul.0.forward", (batch, weight), batch * weight)
    assert came_in["flagged"] and came_in["origin"] == "input"

    watch.new_step()
    weight[0] = float("nan")  # written in place, as a bad optimizer step would
    x = torch.ones(4, device=device)
    bad = watch.judge("Torch.mul.1.forward", (x, weight), x * weight)
    assert bad["origin"] == "parameter" and bad["parameter"] == "fc.weight"


def test_a_new_step_starts_clean():
    watch = _C._units.Watch(WATCH)
    made = torch.full((2,), float("inf"))
    assert watch.judge("Torch.exp.0.forward", (torch.full((2,), 100.0),), made)["origin"] == "op"
    assert watch.step_flagged
    watch.new_step()
    assert not watch.step_flagged
    batch = torch.tensor([float("nan"), 1.0])
    assert watch.judge("Torch.add.0.forward", (batch, 1.0), batch + 1)["origin"] == "input"
    assert watch.step_flagged


def test_the_writer_publishes_a_step_whole(tmp_path):
    error, folder = _C._units.write_step(str(tmp_path), 3, 1, ["Torch.add.0.forward", "Tensor.mul.0.forward"])
    assert error == "" and folder == str(tmp_path / "step3" / "rank1")
    dump = json.loads((tmp_path / "step3" / "rank1" / "dump.json").read_text())
    assert list(dump["data"]) == ["Torch.add.0.forward", "Tensor.mul.0.forward"]
    assert sorted(os.listdir(tmp_path)) == ["step3"]  # no staging folder is left beside it
    # Written again (a later stop() of the step): the folder is replaced whole.
    error, _ = _C._units.write_step(str(tmp_path), 3, 1, ["Torch.add.0.forward"])
    assert error == ""
    dump = json.loads((tmp_path / "step3" / "rank1" / "dump.json").read_text())
    assert list(dump["data"]) == ["Torch.add.0.forward"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_write_that_cannot_be_made_says_why_and_leaves_nothing(tmp_path):
    root = tmp_path / "locked"
    root.mkdir()
    root.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        error, _ = _C._units.write_step(str(root), 0, -1, ["Torch.add.0.forward"])
    finally:
        root.chmod(stat.S_IRWXU)
    assert error != ""
    assert os.listdir(root) == []


def test_a_write_into_a_file_says_why(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    error, _ = _C._units.write_step(str(blocker), 0, -1, ["Torch.add.0.forward"])
    assert error != ""
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("sync, batch, due", [
    ("call", 4, [True, True, True]),  # every call is judged at once
    ("batch", 2, [False, True, True]),  # full from the second call on (nothing takes it here)
    ("batch", 4, [False, False, False]),  # the batch is not full yet
])
def test_the_queue_is_due_as_the_sync_mode_says_and_keeps_the_order(sync, batch, due):
    names = ["Torch.a.0.forward", "Torch.b.0.forward", "Torch.c.0.forward"]
    flags, taken = _C._units.defer_calls(sync, batch, names)
    assert flags == due
    assert taken == names
