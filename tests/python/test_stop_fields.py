"""Issue 42: what every stop carries, and what the peer-stop watcher thread must never do.

The watcher thread (peer_stop.py) writes this rank's evidence when another rank stops. Under
batched sync the calls still queued are judged then; a stop among them must not run the user's
on_overflow, nor raise, on that thread: the thread would die before it acknowledges, and the
stopping rank would wait its whole timeout. Every documented field of OverflowError is present
on every stop, None where it does not apply (e.peer_rank raised AttributeError on a local stop).
"""
import json
import os
import pathlib
import threading

import pytest
import torch

import msprobe_cpp
from msprobe_cpp import _C
from dumps import load as read_dump_file

# docs/overflow-detection.md names these as attributes of the error.
DOCUMENTED = ["step", "rank", "call", "scene", "level", "origin", "parameter", "module", "source",
              "dump_dir", "tensors", "gradients", "masked", "absorbed", "caught", "caught_how",
              "replay", "not_replayed", "peer_stop", "peer_rank", "peer_step", "overflow"]


@pytest.fixture
def generic():
    _C._force_generic_statistics(True)  # the device path on the CPU: calls are queued
    yield
    _C._force_generic_statistics(False)


def local_stop(tmp_path) -> msprobe_cpp.OverflowError:
    """An op-origin stop of one process: Torch.mul making inf from finite inputs."""
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="overflow_check", level="L1")
    x = torch.ones(4, requires_grad=True)
    dbg.start()
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        torch.mul(x, 1e39)
    return info.value


def test_a_local_stop_has_every_documented_field(tmp_path):
    e = local_stop(tmp_path)
    missing = [name for name in DOCUMENTED if not hasattr(e, name)]
    assert missing == []
    assert e.peer_rank is None and e.peer_step is None and e.peer_stop is False
    assert e.caught is None and e.origin == "op"


def test_the_watcher_thread_runs_no_user_code_and_raises_nothing(tmp_path, generic):
    told = []
    dbg = msprobe_cpp.PrecisionDebugger(
        dump_path=str(tmp_path), task="overflow_check", level="L1", sync="batch", sync_batch_calls=64,
        on_overflow=lambda o: told.append(threading.current_thread().name))
    x = torch.linspace(-2, 2, 64).reshape(8, 8).requires_grad_()
    dbg.start()
    x = torch.tanh(torch.mul(torch.tanh(x), 1e39))  # an op origin, queued: not judged yet
    errors = []

    def watcher() -> None:  # what peer_stop.PeerStop._write_evidence does on its thread
        try:
            errors.append(dbg._session.stop_for_peer(
                {"rank": 1, "step": 0, "call": "Functional.linear.0.forward", "origin": "op"}))
        except BaseException as e:  # noqa: BLE001 - the point of the test
            errors.append(e)

    thread = threading.Thread(target=watcher, name="peer stop watcher")
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    folder = errors.pop()
    assert errors == [] and isinstance(folder, str), folder
    assert "peer stop watcher" not in told
    # The queued stop was judged into the evidence: it is in the report the watcher wrote.
    report = read_dump_file(pathlib.Path(folder), "overflow_report.json")
    assert report["peer_stop"]["rank"] == 1
    assert "Torch.mul.0.forward" in report["critical_apis"]


def test_the_report_and_the_error_read_the_engines_one_field_list(tmp_path):
    """core/fact_fields.h: one list per fact type. A stop's attributes are that list's attribute
    names (and the message and the Overflow itself), and its report's first_anomaly holds only
    that list's report keys; tests/cpp/test_report_fields.cpp shows the message is its lines."""
    names = _C.overflow_field_names()
    attrs = {attr for _, attr in names if attr is not None}
    keys = {key for key, _ in names if key is not None}
    assert {"call", "origin", "tensors", "peer_rank", "dump_dir"} <= attrs
    assert {"api_name", "origin", "tensors", "held", "history"} <= keys
    e = local_stop(tmp_path)
    assert set(vars(e.overflow)) == attrs | {"message"}
    assert set(vars(e)) >= attrs | {"message", "overflow"}
    report = json.loads((pathlib.Path(e.dump_dir) / "overflow_report.json").read_text())
    first = report["first_anomaly"]
    assert set(first) <= keys and {"api_name", "origin", "tensors", "step"} <= set(first)
    tensor_keys = set(first["tensors"][0])
    assert {"position", "type", "dtype", "shape"} <= tensor_keys
    assert tensor_keys <= set(e.tensors[0]) - {"text"}  # the same list: the report lacks only the text
