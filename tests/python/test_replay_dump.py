"""`msprobe-cpp replay DUMP_DIR` (python -m msprobe_cpp replay): msprobe's run_overflow_check for
dumps with tensor data, with the live replay's verdicts."""
import json
import os
import pathlib
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest
import torch

from dumps import tensor, write_dump
from test_replay import train
from testenv import PACKAGE_ROOT

pytestmark = pytest.mark.slow  # tools/test.sh --fast leaves it out

INF = float("inf")


def replay(*args: str, binary: pathlib.Path = None) -> Tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT), MSPROBE_CPP_PYTHON=sys.executable)
    command = [str(binary)] if binary else [sys.executable, "-m", "msprobe_cpp"]
    done = subprocess.run(command + ["replay", *args], capture_output=True, text=True, env=env, timeout=300)
    return done.returncode, done.stdout, done.stderr


def saved(folder: pathlib.Path, name: str, t: torch.Tensor) -> Dict[str, Any]:
    """An entry of a tensor saved in dump_tensor_data/ as msprobe saves it."""
    (folder / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
    torch.save(t, folder / "dump_tensor_data" / name)
    d = t.double()
    return dict(tensor(d.max().item(), d.min().item(), d.mean().item(), d.norm().item(), dtype=str(t.dtype),
                       shape=list(t.shape)), data_name=name)


def overflowed(dtype: str, shape: List[int]) -> Dict[str, Any]:
    return tensor(INF, -INF, float("nan"), INF, dtype=dtype, shape=shape)


def test_the_live_stops_dump_gives_the_live_verdict(tmp_path, cli):
    e = train(tmp_path, "cpu", lambda s: s * 1e6)
    status, out, err = replay(str(tmp_path / "dump"), "--format", "json")
    assert status == 0, err
    results = json.loads(out)
    [(file, records)] = results.items()
    mul = [r for r in records if r["call"] == e.call]
    assert len(mul) == 1 and mul[0]["replay"][0] == e.replay[0]  # the same wider replay, value for value
    # Offline the recording device is unknown: the CPU replay in float16 is msprobe's verdict.
    assert mul[0]["replay"][1]["verdict"] == "CPU replay in float16 overflows too: a normal overflow"
    status, text, _ = replay(str(tmp_path / "dump"))
    assert f"  {e.call}" in text.splitlines() and f"    {e.replay[0]['verdict']}" in text.splitlines()
    # The standalone binary hands the command to the package: the same bytes.
    assert replay(str(tmp_path / "dump"), binary=cli) == (0, text, "")


def msprobe_style_dump(folder: pathlib.Path, exp_output: Dict[str, Any] = None) -> pathlib.Path:
    """A tensor dump as msprobe writes one: a float16 linear with its bias as a keyword, an exp that
    leaves float32, and a float16 multiply by a Python scalar; each output overflowed."""
    torch.manual_seed(0)
    x = torch.full((4, 64), 40.0, dtype=torch.float16)
    w = torch.full((8, 64), 30.0, dtype=torch.float16)
    b = torch.zeros(8, dtype=torch.float16)
    e = torch.tensor([1.0, 95.0, 120.0])
    m = torch.tensor([[3.0, -700.0]], dtype=torch.float16)
    data = {
        "Functional.linear.0.forward": {
            "input_args": [saved(folder, "Functional.linear.0.forward.input.0.pt", x),
                           saved(folder, "Functional.linear.0.forward.input.1.pt", w)],
            "input_kwargs": {"bias": saved(folder, "Functional.linear.0.forward.kwargs.bias.pt", b)},
            "output": [overflowed("torch.float16", [4, 8])]},
        "Torch.exp.0.forward": {
            "input_args": [saved(folder, "Torch.exp.0.forward.input.0.pt", e)], "input_kwargs": {},
            "output": [exp_output or overflowed("torch.float32", [3])]},
        "Tensor.__mul__.0.forward": {
            "input_args": [saved(folder, "Tensor.__mul__.0.forward.input.0.pt", m), {"type": "float", "value": 1e3}],
            "input_kwargs": {}, "output": [overflowed("torch.float16", [1, 2])]},
    }
    return write_dump(folder / "dump.json", data, task="tensor")


def test_a_hand_made_msprobe_tensor_dump_is_rebuilt_and_replayed(tmp_path):
    dump = msprobe_style_dump(tmp_path / "step0" / "rank")
    status, out, err = replay(str(dump), "--format", "json")
    assert status == 0, err
    records = json.loads(out)[str(dump)]
    assert [r["call"] for r in records] == ["Functional.linear.0.forward", "Torch.exp.0.forward",
                                            "Tensor.__mul__.0.forward"]
    wider = {r["call"]: r["replay"][0] for r in records}
    assert all(w["kind"] == "wider" and w["finite"] for w in wider.values())
    assert wider["Functional.linear.0.forward"]["max"] == 40.0 * 30.0 * 64  # 76800 > 65504
    assert "the values exceed float16" in wider["Functional.linear.0.forward"]["verdict"]
    assert wider["Torch.exp.0.forward"]["dtype"] == "torch.float64"
    assert "exceed float32" in wider["Torch.exp.0.forward"]["verdict"]
    assert wider["Tensor.__mul__.0.forward"]["min"] == -700000.0
    # JSON and text carry the same verdicts.
    _, text, _ = replay(str(dump))
    for r in records:
        for x in r["replay"]:
            assert f"    {x['verdict']}" in text.splitlines()


def test_only_the_recording_device_overflowed_is_abnormal(tmp_path):
    """An exp whose recorded output is inf where the CPU's, in the same float32, is finite: the
    device's kernel. Exit status 1."""
    recorded = overflowed("torch.float32", [3])
    dump = msprobe_style_dump(tmp_path / "step0" / "rank", exp_output=recorded)
    e = torch.tensor([1.0, 2.0, 3.0])
    torch.save(e, dump.parent / "dump_tensor_data" / "Torch.exp.0.forward.input.0.pt")
    doc = json.loads(dump.read_text())
    doc["data"]["Torch.exp.0.forward"]["input_args"][0].update(Max=3.0, Min=1.0, Mean=2.0, Norm=e.norm().item())
    dump.write_text(json.dumps(doc))
    status, out, _ = replay(str(dump), "--format", "json")
    assert status == 1
    exp = [r for r in json.loads(out)[str(dump)] if r["call"] == "Torch.exp.0.forward"][0]
    assert exp["replay"][1]["verdict"] == "CPU replay is finite: an abnormal overflow (the device's kernel)"


def test_a_dump_without_tensor_data_is_one_line_and_exit_2(tmp_path):
    dump = write_dump(tmp_path / "dump.json", {"Torch.exp.0.forward": {
        "input_args": [tensor()], "input_kwargs": {}, "output": [overflowed("torch.float32", [4, 4])]}})
    status, out, err = replay(str(dump))
    assert (status, out) == (2, "")
    assert err == (f"msprobe-cpp replay: {dump}: no dump_tensor_data/ beside it: replay needs a dump with "
                   "tensor data (task tensor, or an overflow_check dump)\n")
    status, _, err = replay(str(tmp_path / "nothing"))
    assert status == 2 and err.count("\n") == 1 and "no such file or folder" in err


def test_a_call_whose_recorded_outputs_are_finite_is_never_called_an_overflow(tmp_path):
    """Issue 44: an rsqrt flagged for finite values that jumped (a numerical mutation: a LoRA
    dump's) was replayed and called "an abnormal overflow (the device's kernel)"."""
    folder = tmp_path / "step0" / "rank"
    tiny = torch.full((4,), 1e-12)
    data = {"Torch.rsqrt.0.forward": {
        "input_args": [saved(folder, "Torch.rsqrt.0.forward.input.0.pt", tiny)], "input_kwargs": {},
        "output": [tensor(1e6, 1e6, 1e6, 2e6, shape=[4])]}}  # 1e6 / 2e-12: above the threshold
    dump = write_dump(folder / "dump.json", data, task="tensor")
    status, out, err = replay(str(dump), "--format", "json")
    assert status == 0, err
    [record] = json.loads(out)[str(dump)]
    assert record["call"] == "Torch.rsqrt.0.forward" and record["replay"] == []
    assert record["not_replayed"] == "not replayed: its recorded outputs are finite (a lead, not an overflow)"
