"""Why did the op overflow: at an op-origin stop the call is replayed with its original function and
arguments, wider (float16 -> float32, float32 -> float64) and, from an accelerator, on the CPU in
the same dtype; the verdicts are in the message, e.replay and overflow_report.json."""
import json
from typing import Any, Callable, Dict, List

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dumps import guard, report, load as read_dump_file
from testenv import devices


class Attention(nn.Module):
    """Scores in float16, as a mixed-precision refactor leaves them; `temperature` in the wrong
    units overflows them."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, 4)

    def forward(self, x: torch.Tensor, scores_op: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = scores_op(torch.matmul(q, k.transpose(-2, -1)).half()).float()
        return self.out(torch.softmax(scores, dim=-1) @ x)


def train(tmp_path, device: str, scores_op: Callable[[torch.Tensor], torch.Tensor], steps: int = 3,
          **kw: Any) -> msprobe_cpp.OverflowError:
    """Trains until the guard stops it at the last step; returns the stop."""
    torch.manual_seed(0)
    model = Attention().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dbg = guard(tmp_path, "L1", **kw)
    for step in range(steps):
        x = torch.randn(4, 8, 16, device=device)
        dbg.start(model)
        try:
            opt.zero_grad()
            op = scores_op if step == steps - 1 else (lambda s: s)
            loss = model(x, op).pow(2).mean()
            loss.backward()
            opt.step()
        except msprobe_cpp.OverflowError as e:
            return e
        finally:
            dbg.stop()
            dbg.step()
    pytest.fail("no stop")


def verdicts(e: msprobe_cpp.OverflowError) -> List[str]:
    return [r["verdict"] for r in e.replay]


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_a_float16_multiply_that_exceeds_float16(tmp_path, device):
    e = train(tmp_path, device, lambda s: s * 1e6)
    assert e.origin == "op" and e.call.startswith("Tensor.__mul__.")
    wider = e.replay[0]
    assert (wider["kind"], wider["dtype"], wider["finite"]) == ("wider", "torch.float32", True)
    assert max(abs(wider["max"]), abs(wider["min"])) > 65504
    assert "the values exceed float16; keep this op in float32 or scale its inputs" in wider["verdict"]
    assert wider["verdict"] in str(e).splitlines()[-1] or f"  {wider['verdict']}" in str(e).splitlines()
    assert e.overflow.replay == e.replay and e.not_replayed is None
    assert "intended?" not in str(e)  # a real overflow: no ignore rule offered (issue 33)
    first = report(tmp_path, 2)["first_anomaly"]
    assert first["replay"] == e.replay and first["not_replayed"] is None
    if device != "cpu":  # msprobe's verdict: the CPU's float16 multiply overflows as well
        cpu = e.replay[1]
        assert (cpu["kind"], cpu["device"], cpu["dtype"], cpu["finite"]) == ("cpu", "cpu", "torch.float16", False)
        assert cpu["verdict"] == "CPU replay in float16 overflows too: a normal overflow"
    else:
        assert [r["kind"] for r in e.replay] == ["wider"]


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_log_of_an_exact_zero_is_undefined_in_any_width(tmp_path, device):
    """A cross-entropy written by hand: the log of a softmax whose masked entries are exactly 0."""
    torch.manual_seed(0)
    model = nn.Linear(16, 6).to(device)
    dbg = guard(tmp_path, "L1")
    x = torch.randn(8, 16, device=device)
    mask = torch.zeros(8, 6, dtype=torch.bool, device=device)
    mask[:, 4:] = True  # padding classes
    target = torch.zeros(8, 6, device=device)
    target[:, 0] = 1.0
    dbg.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        probs = torch.softmax(model(x).masked_fill(mask, float("-inf")), dim=-1)
        (-(torch.log(probs) * target).sum()).backward()
    dbg.stop()
    e = info.value
    assert e.call.startswith("Torch.log.") and e.origin == "op"
    assert e.replay[0]["kind"] == "wider" and e.replay[0]["dtype"] == "torch.float64"
    assert e.replay[0]["verdict"] == "replay in float64: -inf as well: the op is undefined here (log of 0?)"
    assert not e.replay[0]["finite"]
    assert "intended? an ignore rule" in str(e)  # -inf on purpose is likely here


def test_an_in_place_overflow_is_not_replayed(tmp_path):
    e = train(tmp_path, "cpu", lambda s: s.mul_(1e6))
    assert e.call.startswith("Tensor.mul_.")
    assert e.replay == [] and e.not_replayed == "not replayed: an in-place call (its inputs are overwritten)"
    assert e.not_replayed in str(e).splitlines()[-1] or f"  {e.not_replayed}" in str(e).splitlines()
    assert report(tmp_path, 2)["first_anomaly"]["not_replayed"] == e.not_replayed


def test_a_dropout_overflow_is_not_replayed(tmp_path):
    """Dropout rescales the kept values by 1/(1-p): near the top of the range that is inf (float32:
    torch 1.13 has no float16 dropout on the CPU)."""
    def near_the_top(s: torch.Tensor) -> torch.Tensor:
        return F.dropout(s.float() * 0 + 3e38, p=0.5, training=True)
    e = train(tmp_path, "cpu", near_the_top)
    assert e.call.startswith("Functional.dropout.")
    assert e.not_replayed == "not replayed: a random op (a replay would draw other numbers)"


def test_a_replay_that_raises_costs_one_line_not_the_stop(tmp_path, monkeypatch):
    import msprobe_cpp.replay as replay

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the replayed op failed")
    monkeypatch.setattr(replay, "replay_call", fails)  # the replay itself raises
    e = train(tmp_path, "cpu", lambda s: s * 1e6)
    assert type(e) is msprobe_cpp.OverflowError and e.origin == "op"
    assert e.replay == [] and "not replayed: RuntimeError: the replayed op failed" in e.not_replayed
    folder = tmp_path / "dump" / "step2" / "rank"
    assert {p.name for p in folder.iterdir()} >= {"dump.json", "overflow_report.json", "dump_tensor_data"}
    assert e.call in read_dump_file(folder)["data"]

    monkeypatch.undo()
    monkeypatch.setattr(replay, "_run", fails)  # the op raises when replayed
    e = train(tmp_path / "again", "cpu", lambda s: s * 1e6)
    assert e.not_replayed == "not replayed: RuntimeError: the replayed op failed" and e.replay == []


def test_replay_false_replays_nothing_and_records_the_same(tmp_path):
    on = train(tmp_path / "on", "cpu", lambda s: s * 1e6)
    off = train(tmp_path / "off", "cpu", lambda s: s * 1e6, replay=False)
    assert off.replay == [] and off.not_replayed is None and "replay in" not in str(off)
    assert "replay" not in report(tmp_path / "off", 2)["first_anomaly"]
    # The replay runs unhooked and under no_grad: the same records, the same values.
    dumps = [read_dump_file(t / "dump" / "step2" / "rank")["data"] for t in
             (tmp_path / "on", tmp_path / "off")]
    assert dumps[0] == dumps[1]
    def lines(e: msprobe_cpp.OverflowError, folder: str) -> List[str]:
        return [x.replace(str(tmp_path / folder), "X") for x in str(e).splitlines() if "source:" not in x]
    # The verdict follows the anomalous tensors (header, origin, module, output[0]). Unreplayed,
    # nothing says the values outgrew float16, so the ignore rule is offered there.
    unreplayed = lines(off, "off")
    snippet = next(i for i, x in enumerate(unreplayed) if x.startswith("  intended?"))
    dump = next(i for i, x in enumerate(unreplayed) if x.startswith("  dump:"))
    assert lines(on, "on") == unreplayed[:4] + ["  " + on.replay[0]["verdict"]] + unreplayed[4:snippet] + \
        unreplayed[dump:]


def test_check_prints_the_stops_replays(tmp_path, cli):
    import subprocess
    e = train(tmp_path, "cpu", lambda s: s * 1e6)
    dump = tmp_path / "dump" / "step2" / "rank" / "dump.json"
    out = subprocess.run([str(cli), "check", str(dump), "--format", "text"], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    # Issue 44: the live stop's verdict first, then the dump's own reading beside it (they agree).
    live = lines.index(f"  the live stop (overflow_report.json): {e.call}, origin op")
    assert "    " + e.replay[0]["verdict"] in lines[live:]
    assert lines[-1].startswith(f"  offline reading (this dump's statistics alone): probable origin: {e.call} ")
    (dump.parent / "overflow_report.json").unlink()  # without the report: the findings alone
    out = subprocess.run([str(cli), "check", str(dump), "--format", "text"], capture_output=True, text=True)
    assert "live stop" not in out.stdout and out.stdout.splitlines()[-1].startswith("  probable origin:")
