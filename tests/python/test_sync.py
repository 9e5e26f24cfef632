"""Batched sync (overflow_check.sync): device statistics come back to the host once per batch of
calls instead of once per call, and the calls are judged in their order when they arrive. Proved
on the CPU through the device path ("cpu-generic"), where _C._host_syncs() counts the reads back."""
import json
import pathlib

import pytest
import torch

import msprobe_cpp
from msprobe_cpp import _C
from dumps import load as read_dump_file


@pytest.fixture
def generic():
    _C._force_generic_statistics(True)
    yield
    _C._force_generic_statistics(False)


def start_tensor() -> torch.Tensor:
    # Made before start(): not in the step. It requires grad, so NaN/inf made from it does damage
    # at once (the damage rule holds NaN/inf in tensors without gradient).
    return torch.linspace(-2, 2, 4096).reshape(64, 64).requires_grad_()


def chain(x: torch.Tensor, n: int, overflow_at: int = -1) -> torch.Tensor:
    """n hooked calls in a row; call `overflow_at` (1-based) multiplies into +inf from finite
    inputs: an op origin, critical."""
    for i in range(1, n + 1):
        x = torch.mul(x, 1e39) if i == overflow_at else torch.tanh(x)
    return x


def run_step(dump: pathlib.Path, n: int, overflow_at: int = -1, **kw) -> int:
    """One step of `n` calls; returns the host syncs it took."""
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(dump), level="L1", **kw)
    x = start_tensor()
    before = _C._host_syncs()
    dbg.start()
    chain(x, n, overflow_at)
    dbg.stop()
    dbg.step()
    dbg.drain()  # async_dump: the step's files on disk
    assert dbg._session.host_syncs == _C._host_syncs() - before  # the session counts its own
    return dbg._session.host_syncs


def files(dump: pathlib.Path) -> dict:
    """The step's files, with the dump's own path taken out; stack.json is left out, as its frames
    of this test file differ in the line each mode was called from."""
    rank = dump / "step0" / "rank"
    return {p.name: json.loads(p.read_text().replace(str(dump), "DUMP"))
            for p in sorted(rank.glob("*.json")) if p.name != "stack.json"}


def test_a_batch_is_one_sync_and_the_files_are_the_same(tmp_path, generic):
    batched = run_step(tmp_path / "batch", 50, task="statistics", sync="batch")
    per_call = run_step(tmp_path / "call", 50, task="statistics", sync="call")
    assert batched <= 2, batched
    assert per_call == 50, per_call
    assert files(tmp_path / "batch") == files(tmp_path / "call")
    assert len(files(tmp_path / "batch")["dump.json"]["data"]) == 50


def test_verdicts_and_reports_are_the_same_in_both_modes(tmp_path, generic):
    kw = dict(task="overflow_check", action="continue", overflow_nums=-1)
    batched = run_step(tmp_path / "batch", 50, overflow_at=10, sync="batch", **kw)
    per_call = run_step(tmp_path / "call", 50, overflow_at=10, sync="call", **kw)
    assert batched <= 2 and per_call >= 50, (batched, per_call)
    a, b = files(tmp_path / "batch"), files(tmp_path / "call")
    assert a == b
    assert a["overflow_report.json"]["critical_apis"] == ["Torch.mul.0.forward"]
    assert a["overflow_report.json"]["first_anomaly"]["origin"] == "op"


@pytest.mark.parametrize("batch, raised_at", [(256, "stop"), (8, 16)])
def test_a_batched_stop_names_the_call_that_overflowed(tmp_path, generic, batch, raised_at):
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="overflow_check", level="L1",
                                        sync="batch", sync_batch_calls=batch)
    x = start_tensor()
    dbg.start()
    calls_made = 0
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        for i in range(1, 41):
            x = torch.mul(x, 1e39) if i == 10 else torch.tanh(x)
            calls_made = i
        dbg.stop()
    e = info.value
    # Raised inside the call whose batch was full, or at stop(): never before the verdict came.
    assert calls_made == (40 if raised_at == "stop" else raised_at - 1)
    later = (40 if raised_at == "stop" else raised_at) - 10
    assert e.call == "Torch.mul.0.forward" and e.origin == "op"
    assert f"raised {later} calls later" in str(e)
    rank = tmp_path / "step0" / "rank"
    data = read_dump_file(rank)["data"]
    assert len(data) == (40 if raised_at == "stop" else raised_at)  # the whole step up to the raise
    report = read_dump_file(rank, "overflow_report.json")
    assert report["first_anomaly"]["api_name"] == "Torch.mul.0.forward"
    assert report["first_anomaly"]["raised_calls_later"] == later


def test_call_mode_stops_at_the_call_itself(tmp_path, generic):
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="overflow_check", level="L1",
                                        sync="call")
    x = start_tensor()
    dbg.start()
    calls_made = 0
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        for i in range(1, 41):
            calls_made = i
            x = torch.mul(x, 1e39) if i == 10 else torch.tanh(x)
    assert calls_made == 10 and info.value.call == "Torch.mul.0.forward"
    assert "calls later" not in str(info.value)


def test_backward_verdicts_arrive_before_the_optimizer(tmp_path, generic):
    """A NaN made by a backward op stops loss.backward() itself under batched sync: the queued
    backward calls are judged when the pass ends, before any optimizer step."""
    w = torch.nn.Parameter(torch.tensor([0.0, 1.0, 4.0]))
    model = torch.nn.Module()
    model.w = w
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="overflow_check", level="L1",
                                        sync="batch")
    dbg.start(model)
    loss = torch.sqrt(w).sum()  # d sqrt(w)/dw at 0 is inf
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        loss.backward()
    assert info.value.call == "Torch.sqrt.0.backward"
    assert info.value.gradients == ["w"]
