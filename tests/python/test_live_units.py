"""The live parts driven on their own, through the test extension msprobe_cpp_units (tests/ext/live_units.cpp):
OverflowWatch judging calls made of real tensors, StepWriter writing a finished step, DeferredCalls
queueing calls. No session, no hook and no training loop stands between the test and the part."""
import json
import os
import stat

import pytest
import torch

import msprobe_cpp  # torch and the engine first
import msprobe_cpp_units as units
from testenv import devices

WATCH = json.dumps({"task": "overflow_check", "level": "L1"})


def test_the_hooks_are_a_test_extension_not_part_of_the_product():
    """Issue 54: they shipped inside _C as _C._units; they are a module of their own now, built
    beside the package (cmake/torch_extension.cmake) and never by pip (test_install.py)."""
    assert not hasattr(msprobe_cpp._C, "_units")
    assert os.path.dirname(units.__file__) != os.path.dirname(msprobe_cpp._C.__file__)


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_watch_names_the_origin_of_each_kind(device):
    watch = units.Watch(WATCH)
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
    watch = units.Watch(WATCH)
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
    watch = units.Watch(WATCH)
    made = torch.full((2,), float("inf"))
    assert watch.judge("Torch.exp.0.forward", (torch.full((2,), 100.0),), made)["origin"] == "op"
    assert watch.step_flagged
    watch.new_step()
    assert not watch.step_flagged
    batch = torch.tensor([float("nan"), 1.0])
    assert watch.judge("Torch.add.0.forward", (batch, 1.0), batch + 1)["origin"] == "input"
    assert watch.step_flagged


def test_the_writer_publishes_a_step_whole(tmp_path):
    error, folder = units.write_step(str(tmp_path), 3, 1, ["Torch.add.0.forward", "Tensor.mul.0.forward"])
    assert error == "" and folder == str(tmp_path / "step3" / "rank1")
    dump = json.loads((tmp_path / "step3" / "rank1" / "dump.json").read_text())
    assert list(dump["data"]) == ["Torch.add.0.forward", "Tensor.mul.0.forward"]
    assert sorted(os.listdir(tmp_path)) == ["step3"]  # no staging folder is left beside it
    # Written again (a later stop() of the step): the folder is replaced whole.
    error, _ = units.write_step(str(tmp_path), 3, 1, ["Torch.add.0.forward"])
    assert error == ""
    dump = json.loads((tmp_path / "step3" / "rank1" / "dump.json").read_text())
    assert list(dump["data"]) == ["Torch.add.0.forward"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_write_that_cannot_be_made_says_why_and_leaves_nothing(tmp_path):
    root = tmp_path / "locked"
    root.mkdir()
    root.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        error, _ = units.write_step(str(root), 0, -1, ["Torch.add.0.forward"])
    finally:
        root.chmod(stat.S_IRWXU)
    assert error != ""
    assert os.listdir(root) == []


def test_a_write_into_a_file_says_why(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    error, _ = units.write_step(str(blocker), 0, -1, ["Torch.add.0.forward"])
    assert error != ""
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("sync, batch, due", [
    ("call", 4, [True, True, True]),  # every call is judged at once
    ("batch", 2, [False, True, True]),  # full from the second call on (nothing takes it here)
    ("batch", 4, [False, False, False]),  # the batch is not full yet
])
def test_the_queue_is_due_as_the_sync_mode_says_and_keeps_the_order(sync, batch, due):
    names = ["Torch.a.0.forward", "Torch.b.0.forward", "Torch.c.0.forward"]
    flags, taken = units.defer_calls(sync, batch, names)
    assert flags == due
    assert taken == names


# --- OverflowGuard: the session's judge, driven without a session ---------------------------------

@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_guard_stops_at_the_op_that_made_inf_and_writes_that_step(device):
    guard = units.Guard(WATCH)
    x = torch.ones(4, device=device)
    clean = guard.judge("Torch.add.0.forward", (x, x), x + x)
    assert clean == {"dropped": False, "keep_tensors": False, "event": None}
    # Made into a tensor that requires grad: the damage rule ends its hold at once.
    made = torch.full((4,), float("inf"), device=device, requires_grad=True)
    stop = guard.judge("Torch.mul.0.forward", (x, 1e39), made)
    assert stop["keep_tensors"], "the finding's tensors are its evidence"
    assert stop["event"] == {"notify": True, "raise": True, "call": "Torch.mul.0.forward", "origin": "op"}
    assert guard.step_flagged
    end = guard.end_step(calls_due=True, at_stop=True)
    assert end["closed"] and end["write"] and end["judgements"] >= 1


def test_a_held_inf_that_did_no_damage_is_no_stop():
    """Made, but in nothing that requires grad and cleaned before the step ended: held, never
    told as an overflow; the step is dumped as its evidence, with one line that says why."""
    guard = units.Guard(WATCH)
    made = torch.full((4,), float("inf"))
    held = guard.judge("Torch.mul.0.forward", (torch.ones(4), 1e39), made)
    assert held["event"] is None and not guard.step_flagged
    cleaned = torch.nan_to_num(made)
    guard.judge("Torch.nan_to_num.0.forward", (made,), cleaned)
    del made
    end = guard.end_step(calls_due=True, at_stop=False)
    assert end["write"] and not guard.step_flagged
    assert len(end["said"]) == 1 and "+inf made by Torch.mul.0.forward" in end["said"][0]
    assert "turned finite by Torch.nan_to_num.0.forward; no stop" in end["said"][0]


def test_a_clean_step_is_closed_and_not_written():
    guard = units.Guard(WATCH)
    x = torch.ones(4)
    guard.judge("Torch.add.0.forward", (x, x), x + x)
    end = guard.end_step(calls_due=True, at_stop=False)
    assert end["closed"] and not end["write"]
    guard.new_step(1)
    assert not guard.step_flagged


def test_a_call_of_an_ended_step_is_dropped_unjudged():
    """Another thread's stop ended the step while this call ran: it is not the next step's."""
    guard = units.Guard(WATCH)
    guard.new_step(1)
    bad = torch.full((4,), float("nan"))
    late = guard.judge("Torch.mul.0.forward", (torch.ones(4), 1.0), bad, stale=True)
    assert late == {"dropped": True, "keep_tensors": False, "event": None}
    assert not guard.step_flagged


def test_the_guard_names_a_started_models_parameter_as_the_origin():
    guard = units.Guard(WATCH)
    weight = torch.tensor([1.0, float("inf"), 1.0, 1.0])
    guard.add_model_tensor("fc.weight", weight)
    guard.new_step(1)
    stop = guard.judge("Torch.mul.0.forward", (torch.ones(4), weight), torch.ones(4) * weight)
    assert stop["event"]["origin"] == "parameter" and stop["event"]["raise"]


# --- StatsCache: statistics once per tensor version ------------------------------------------------

@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_cache_gives_back_a_version_and_nothing_else(device):
    cache = units.StatsCache()
    t = torch.ones(4096, device=device)
    assert units.StatsCache.cacheable(t) and not units.StatsCache.cacheable(torch.ones(16, device=device))
    cache.put(t, "v0")
    assert cache.find(t) == "v0"
    assert cache.find(t.view(64, 64)) is None, "a view is another object"
    t.add_(1)  # a new version: its statistics are stale
    assert cache.find(t) is None
    cache.put(t, "v1")
    assert cache.find(t) == "v1"
    cache.clear()
    assert cache.find(t) is None
    assert cache.hits_misses == (2, 3)


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_cache_lets_a_step_go_when_the_next_begins(device):
    """The session ends a step by publishing the next ticket, not by clearing the cache: the cache
    clears itself at its first look in the new step (a pending statistic's slot was the last
    step's)."""
    cache = units.StatsCache()
    t = torch.ones(4096, device=device)
    cache.put(t, "step 0")
    assert cache.find(t) == "step 0"
    cache.next_step()
    assert cache.find(t) is None
    cache.put(t, "step 1")
    assert cache.find(t) == "step 1"


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_memory_written_without_a_version_is_never_answered_from_the_cache(device):
    """An in-place collective writes its buffer and bumps no version (dist.all_reduce, both
    torches): from then until the step ends, nothing on that storage comes from the cache, views
    and the base included, and nothing on it is kept; other storages are not touched."""
    cache = units.StatsCache()
    flat = torch.zeros(8192, device=device)
    half, other = flat[:4096], torch.ones(4096, device=device)
    for t, tag in ((flat, "flat"), (half, "half"), (other, "other")):
        cache.put(t, tag)
    version = half._version
    cache.written_without_version(half)
    assert half._version == version, "the tool bumps no version of the user's tensor"
    assert cache.find(half) is None and cache.find(flat) is None, "the written storage is stale"
    cache.put(half, "after")
    assert cache.find(half) is None, "kept again while its writer may still write it"
    assert cache.find(other) == "other"
    cache.next_step()
    cache.put(half, "next step")
    assert cache.find(half) == "next step", "a new step starts with every storage cacheable"


def test_the_cache_never_gives_a_dead_tensors_statistics_to_a_new_one():
    cache = units.StatsCache()
    for i in range(50):  # the allocator hands the same addresses out again
        t = torch.full((4096,), float(i))
        assert cache.find(t) is None, f"tensor {i} got the statistics of a dead one"
        cache.put(t, str(i))
        del t


def test_inference_tensors_are_never_cached():
    with torch.inference_mode():
        t = torch.ones(4096)
    assert not units.StatsCache.cacheable(t)
