"""Live overflow detection (task overflow_check) on real training loops."""
import json
import math
import subprocess

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from testenv import said_besides_on_line
from dumps import debugger, report, steps_on_disk, load as read_dump_file
from models import fp16_overflow_at, make_model, run_steps


def test_clean_gpt_training_writes_nothing(tmp_path):
    """20 steps with the causal -inf mask and AdamW: the mask is explained, nothing is flagged."""
    dbg = debugger(tmp_path)
    losses = run_steps(make_model("gpt"), 20, dbg)
    assert losses == run_steps(make_model("gpt"), 20, None)
    assert steps_on_disk(tmp_path) == []
    assert not (tmp_path / "dump").exists()


def test_fp16_overflow_stops_training_at_its_step(tmp_path, capfd):
    model = make_model("gpt")
    original = torch.matmul
    on_step = fp16_overflow_at([3], block=2, model=model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run_steps(model, 6, debugger(tmp_path), on_step)
    e = info.value
    assert isinstance(e, RuntimeError)
    assert e.step == 3 and e.rank == 0  # outside torch.distributed the run is rank 0 (folder `rank`)
    assert e.origin == "op" and e.parameter is None
    assert e.call.startswith("Tensor.__mul__.") and e.call.endswith(".forward")
    assert (e.scene, e.level) == ("InputNormalOutputAnomalyScene", "critical")
    assert e.output_anomaly_indices == [0] and e.input_args_anomaly_indices == []
    assert "blocks.2." in e.module
    assert e.source.endswith("return (scores.half() * 1e5).float()")
    assert e.source.startswith(fp16_overflow_at.__code__.co_filename + ":")  # the line inject() runs
    assert e.dump_dir == str(tmp_path / "dump" / "step3" / "rank")
    assert len(e.tensors) == 1 and e.tensors[0]["text"].startswith("output[0]: torch.float16 [8, 4, 32, 32]: 0 NaN, ")
    assert e.tensors[0]["nan"] == 0 and e.tensors[0]["posinf"] + e.tensors[0]["neginf"] > 0
    for fact in (e.call, "step 3", "InputNormalOutputAnomalyScene", e.module, e.source, e.dump_dir,
                 e.tensors[0]["text"]):
        assert fact in str(e)
    # Only the flagged step is on disk, with everything of it up to the stop.
    assert steps_on_disk(tmp_path) == ["step3"]
    step = tmp_path / "dump" / "step3" / "rank"
    data = read_dump_file(step)["data"]
    assert list(data)[-1] == e.call
    assert data[e.call]["output"][0]["data_name"] == f"{e.call}.output.0.pt"
    saved = torch.load(step / "dump_tensor_data" / f"{e.call}.output.0.pt")
    assert f"dump:   {e.dump_dir}  (overflow_report.json, dump.json, dump_tensor_data/)" in str(e)
    assert saved.dtype == torch.float16 and torch.isinf(saved).any()
    assert report(tmp_path, 3)["critical_apis"] == [e.call]
    # The one-screen summary: the flagged call apart from the expected mask findings.
    summary = said_besides_on_line(capfd.readouterr().err).splitlines()
    assert summary[0].startswith("msprobe_cpp: step 3 flagged: ")
    assert f"  critical: {e.call}" in summary
    assert any(l.startswith("  expected (") and "Tensor.masked_fill.0.forward" in l for l in summary)
    # The process is healthy and still guarded: the hooks stay, training goes on, nothing more is
    # flagged.
    assert torch.matmul is not original
    model.inject = None
    assert all(math.isfinite(l) for l in run_steps(model, 2, None))


def test_backward_only_overflow_comes_out_of_backward(tmp_path):
    class SqrtNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sqrt(F.relu(self.fc(x)) * 0.0).sum()  # sqrt(0): finite, gradient inf

    torch.manual_seed(0)
    model = SqrtNet()
    dbg = debugger(tmp_path)
    dbg.start(model)
    loss = model(torch.randn(3, 4))
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        loss.backward()
    e = info.value
    assert e.call == "Torch.sqrt.0.backward"
    assert e.level == "critical" and e.output_anomaly_indices == [0]
    assert e.source.endswith("return torch.sqrt(F.relu(self.fc(x)) * 0.0).sum()  # sqrt(0): finite, gradient inf")
    assert steps_on_disk(tmp_path) == ["step0"]
    assert report(tmp_path, 0)["critical_apis"] == ["Torch.sqrt.0.backward"]


def inf_data_at(k: int):
    def on_step(i: int, x: torch.Tensor) -> torch.Tensor:
        if i == k:
            x = x.clone()
            x[0, 0] = float("inf")
        return x
    return on_step


def test_inf_in_the_data_is_reported_not_stopped_without_input_in_stop_on(tmp_path, cli):
    dbg = debugger(tmp_path, stop_on=["op", "parameter"])
    # Step 2's inf batch is no stop; its NaN gradients poison the weights, and step 3 stops at the
    # first call that uses one.
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run_steps(make_model("mlp"), 5, dbg, inf_data_at(2))
    e = info.value
    assert (e.step, e.origin, e.parameter, e.call) == (3, "parameter", "fc1.weight", "Functional.linear.0.forward")
    assert e.dump_dir is None and "no more dumps are written" in str(e)  # overflow_nums 1
    assert steps_on_disk(tmp_path) == ["step2"]
    r = report(tmp_path, 2)
    assert r["critical_apis"] == []
    assert r["first_anomaly"]["api_name"] == "Functional.linear.0.forward"
    assert r["first_anomaly"]["input_args_anomaly_indices"] == [0]
    assert r["first_anomaly"]["origin"] == "input"


def test_stop_level_applies_to_findings_without_an_origin(tmp_path):
    """The batch's inf is an input origin, left out of stop_on; the next call, downstream of it,
    has no origin and is high: stop_level high stops there."""
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run_steps(make_model("mlp"), 5, debugger(tmp_path, stop_level="high", stop_on=["op"]), inf_data_at(2))
    e = info.value
    assert (e.step, e.call, e.level, e.origin) == (2, "Functional.relu.0.forward", "high", None)


def test_backward_inheritance_keeps_nan_data_below_critical(tmp_path):
    """With NaN data every call of the step, forward and backward, is high or medium."""
    dbg = debugger(tmp_path, overflow_nums=-1, action="continue")
    run_steps(make_model("mlp"), 3, dbg, inf_data_at(1))
    r = report(tmp_path, 1)
    assert r["critical_apis"] == []
    assert any(".backward" in d["api_name"] for d in r["anomaly_details"])


def test_shipped_rules_apply_live(tmp_path, monkeypatch):
    """torch.empty may hold NaN; masked_fill_ refills -inf masks: neither is flagged. (torch.empty
    is not in msprobe's wrap list: extra_apis adds it, and the shipped rule then applies.)"""
    real_empty = torch.empty

    def garbage_empty(*size, **kw):  # uninitialised memory that happens to hold NaN
        return real_empty(*size, **kw).fill_(float("nan"))

    # Replaced before the hooks go in, so the wrapper records it as torch.empty itself.
    monkeypatch.setattr(torch, "empty", garbage_empty)
    seen = []
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scratch = torch.empty(64)
            seen.append(bool(torch.isnan(scratch).all()))
            s = self.fc(x) @ self.fc(x).t()
            mask = torch.ones_like(s, dtype=torch.bool).triu(1)
            s.masked_fill_(mask, float("-inf"))
            s.masked_fill_(mask, float("-inf"))  # input 0 already holds -inf
            return F.softmax(s, dim=-1).sum() + scratch[:0].sum()

    for compat in (False, True):
        torch.manual_seed(0)
        model = Masked()
        x = torch.randn(3, 4)
        dbg = debugger(tmp_path / str(compat), compat=compat, extra_apis=["Torch.empty"])
        dbg.start(model)
        model(x).backward()
        dbg.stop()
        dbg.step()
        # Released here, before monkeypatch puts torch.empty back: a release later would restore
        # the garbage_empty it wrapped, for every test after this one.
        dbg._release()
        assert steps_on_disk(tmp_path / str(compat)) == [], compat
    assert seen == [True, True]


def test_action_continue_dumps_exactly_the_overflowing_steps(tmp_path, cli):
    model = make_model("gpt")
    on_step = fp16_overflow_at([2, 5], block=1, model=model, masked=True)
    run_steps(model, 7, debugger(tmp_path, action="continue", overflow_nums=-1), on_step)
    assert steps_on_disk(tmp_path) == ["step2", "step5"]
    for k in (2, 5):
        step = tmp_path / "dump" / f"step{k}" / "rank"
        r = report(tmp_path, k)
        assert r["critical_apis"] and r["first_anomaly"]["api_name"] == r["critical_apis"][0]
        # The live report is what `msprobe-cpp check` computes from the written dump.json.
        checked = subprocess.run([str(cli), "check", str(step / "dump.json")], capture_output=True, text=True)
        assert checked.returncode == 1, checked.stderr
        live = dict(r)
        live["live_stop"] = live.pop("first_anomaly")  # check names it the live stop's verdict
        assert json.loads(checked.stdout) == live
        # The flagged calls' tensors are saved; calls without a finding are not.
        data = read_dump_file(step)["data"]
        saved = {p.name for p in (step / "dump_tensor_data").iterdir()}
        for name in r["critical_apis"]:
            assert f"{name}.output.0.pt" in saved
        assert not any(n.startswith("Functional.embedding") for n in saved)
        assert set(data) >= set(d["api_name"] for d in r["anomaly_details"])


@pytest.mark.parametrize("nums, expected", [(1, ["step1"]), (2, ["step1", "step3"]),
                                            (-1, ["step1", "step3", "step4"])])
def test_overflow_nums_limits_the_flagged_steps_written(tmp_path, capfd, nums, expected):
    model = make_model("gpt")
    on_step = fp16_overflow_at([1, 3, 4], block=0, model=model, masked=True)
    flagged = []
    dbg = debugger(tmp_path, action="continue", overflow_nums=nums)
    dbg._on_overflow = lambda o: flagged.append(o.step)
    run_steps(model, 6, dbg, on_step)
    assert steps_on_disk(tmp_path) == expected
    assert flagged == [1, 3, 4]  # detection goes on after the last dump
    # A written step holds the whole step, up to the optimizer.
    data = read_dump_file(tmp_path / "dump" / "step1" / "rank")["data"]
    assert list(data)[-1].startswith("Tensor.add")
    said = "overflow_nums (%d) reached: no more dumps are written" % nums
    assert (said in capfd.readouterr().err) == (nums != -1 and nums < 3)


def test_mix_level_stop_names_the_module(tmp_path):
    model = make_model("gpt")
    on_step = fp16_overflow_at([1], block=3, model=model)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run_steps(model, 3, debugger(tmp_path, level="mix"), on_step)
    assert info.value.step == 1 and "blocks.3." in info.value.module
    construct = read_dump_file(tmp_path / "dump" / "step1" / "rank", "construct.json")
    assert construct[info.value.call] == info.value.module


def test_bad_rules_file_in_config_is_an_error_before_hooks(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text("ignore_nan_inf:\n  - api_name: [x\n")
    original = torch.matmul
    with pytest.raises(ValueError, match=r"r.yaml:3:1: invalid YAML"):
        debugger(tmp_path, rules=[str(rules)])
    assert torch.matmul is original


def test_a_flagged_calls_tensors_are_copied_once(tmp_path):
    """Issue 54: the evidence of a flagged call was cloned when the call was flagged and again when
    the step was written. The copies counted by torch's profiler: one per file written."""
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    dbg = debugger(tmp_path, level="L1", action="continue")
    x = torch.randn(3, 4)
    x[0, 0] = math.nan
    with torch.autograd.profiler.profile() as prof:
        dbg.start(model)
        model(x)
        dbg.stop()
        dbg.step()
    files = sorted(p.name for p in (tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data").iterdir())
    assert files == [f"Functional.linear.0.forward.{side}.pt" for side in ("input.0", "input.1", "input.2", "output.0")]
    clones = sum(e.count for e in prof.key_averages() if e.key == "aten::clone")
    assert clones == len(files), clones
