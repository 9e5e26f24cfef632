"""Session and ApiHook driven on their own (issue 54): the engine's session as _C binds it, and an
API hook wrapped around one torch function by hand, with no PrecisionDebugger, no patches and no
model. What the debugger adds (the wrap list, the started models, the loss scalers) is not here:
what is left is the pipeline's own contract: a call is recorded only while the session collects,
named by its API and its counter in the step, judged, and written by the step's end."""
import json
import pathlib

import pytest
import torch

import msprobe_cpp
from msprobe_cpp import _C
from msprobe_cpp.errors import Overflow, OverflowError
from msprobe_cpp.replay import live_replay
from testenv import devices

PACKAGE_DIR = str(pathlib.Path(msprobe_cpp.__file__).parent)


@pytest.fixture
def session_of(tmp_path):
    made = []

    def make(**config):
        overrides = {"dump_path": str(tmp_path / "dump"), "level": "L1", **config}
        session = _C.Session("", json.dumps(overrides), PACKAGE_DIR)
        _C.set_current_session(session)
        made.append(session)
        return session

    yield make
    _C.set_current_session(None)


def dump_data(tmp_path: pathlib.Path, step: int) -> dict:
    return json.loads((tmp_path / "dump" / f"step{step}" / "rank" / "dump.json").read_text())["data"]


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_the_hook_records_only_while_the_session_collects_and_numbers_per_step(tmp_path, session_of, device):
    session = session_of(task="statistics")
    add = _C.ApiHook("Torch.add", torch.add)
    x = torch.arange(4.0, device=device)
    assert torch.equal(add(x, x), x + x)  # before start(): the original, not recorded
    session.start(-1, True)
    assert torch.equal(add(x, 1), x + 1)
    add(x, x)
    session.stop()
    add(x, x)  # after stop(): not recorded
    session.step()
    session.start(-1, False)
    add(x, 2)
    session.stop()
    session.step()
    session.drain_writes()  # async_dump: the steps' files on disk
    first, second = dump_data(tmp_path, 0), dump_data(tmp_path, 1)
    assert list(first) == ["Torch.add.0.forward", "Torch.add.1.forward"]
    assert list(second) == ["Torch.add.0.forward"], "the counter restarts with each step"
    out = first["Torch.add.0.forward"]["output"][0]
    assert (out["Max"], out["Min"], out["Mean"]) == (4.0, 1.0, 2.5)


def test_the_step_and_rank_lists_gate_the_session(tmp_path, session_of):
    session = session_of(task="statistics", step=[1], rank=[0])
    add = _C.ApiHook("Torch.add", torch.add)
    for step in range(3):
        session.start(-1, step == 0)  # outside torch.distributed: rank 0 for the list
        add(torch.ones(2), 1)
        session.stop()
        session.step()
    session.drain_writes()  # async_dump: the steps' files on disk
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == ["step1"]
    assert session.finished, "past the last step the list names"
    other = session_of(task="statistics", dump_path=str(tmp_path / "rank1"), rank=[1])
    other.start(-1, True)
    add(torch.ones(2), 1)
    other.stop()
    other.step()
    assert not (tmp_path / "rank1").exists()


def test_an_op_that_makes_inf_is_judged_by_the_session_and_raised_by_the_hook(tmp_path, session_of):
    session = session_of(task="overflow_check")
    flagged, stopped = [], []
    # The Python objects a debugger hands the guard (debugger._python_side), here by hand.
    session.set_python_side(
        overflow_type=Overflow, error_type=OverflowError, on_flagged=flagged.append,
        queue_callback=torch.autograd.Variable._execution_engine.queue_callback,
        on_stop=lambda overflow, notify: stopped.append((overflow, notify)),
        raise_peer_stop=lambda: None,
        mark_collective_input=lambda call: None, collective_input_rank=lambda call: None,
        replay=live_replay)
    mul = _C.ApiHook("Torch.mul", torch.mul)
    w = torch.ones(4, requires_grad=True)
    session.start(-1, True)
    mul(w, 2.0)
    with pytest.raises(OverflowError) as stop:
        mul(w, 1e39)  # float32 overflow, into a tensor that requires grad
    session.step()
    overflow = stop.value.overflow
    assert (overflow.call, overflow.origin, overflow.step) == ("Torch.mul.1.forward", "op", 0)
    # A stop is one Overflow, handed to on_stop (which tells on_overflow: the step's first
    # notice) before it is raised; no separate notice is made of it.
    assert flagged == [] and stopped == [(overflow, True)] and stopped[0][0] is overflow
    assert "Torch.mul.1.forward" in dump_data(tmp_path, 0)
