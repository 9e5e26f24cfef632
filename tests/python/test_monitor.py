"""TrainerMon, msprobe's training monitor (issue 55), on every torch: the training is unaltered
(in-place idioms and the guard beside it included), the values are the tensors' statistics, the
steps written are the config's, the alerts say what the guard knows, TensorBoard reads the event
files, and what is not valid is refused by name. The other options (stack_info, dynamic_on,
cc_distribution, ...): test_monitor_options.py. The byte-for-byte comparisons with msprobe
26.2.0's own TrainerMon: test_monitor_peer.py."""
import json
import logging

import pytest
import torch

import msprobe_cpp
from monitor_peer import FAMILIES, csv_files


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def train(steps: int, monitor_config=None, out=None, monkeypatch=None):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    if monitor_config is not None:
        path = out.parent / "monitor.json"
        path.write_text(json.dumps(monitor_config))
        monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(out))
        monitor = msprobe_cpp.TrainerMon(str(path), params_have_main_grad=False)
        monitor.set_monitor(model, optimizer)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if monitor_config is not None:
        monitor.drain()
    return losses, {k: v.clone() for k, v in model.state_dict().items()}, model


def test_training_is_bit_identical_and_each_family_is_written(tmp_path, monkeypatch):
    bare_losses, bare_state, _ = train(3)
    losses, state, _ = train(3, FAMILIES, tmp_path / "out", monkeypatch)
    assert losses == bare_losses
    assert all(torch.equal(state[k], bare_state[k]) for k in bare_state)
    files = csv_files(str(tmp_path / "out"))
    assert sorted(files) == sorted(
        [f"{p}_{s}-{s}.csv" for s in range(3)
         for p in ("grad_unreduced", "grad_reduced", "param_origin", "param_updated")]
        + [f"{p}_{s}-{s}.csv" for s in (1, 2) for p in ("exp_avg", "exp_avg_sq")])  # Adam has no state at 0
    assert files["grad_reduced_0-0.csv"].splitlines()[0] == "vpp_stage,name,step,norm,shape,dtype"
    assert [line.split(",")[1] for line in files["grad_reduced_0-0.csv"].splitlines()[1:]] == [
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    # Autograd accumulates fc2's gradients first: msprobe's grad_unreduced order.
    assert [line.split(",")[1] for line in files["grad_unreduced_0-0.csv"].splitlines()[1:]] == [
        "fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"]


def test_grad_reduced_is_the_gradient_the_optimizer_steps_with_changed_in_place_or_not(tmp_path, monkeypatch):
    """On one process the optimizer steps with the gradient accumulated last, and the monitor
    reads it once for grad_unreduced and grad_reduced; a gradient changed in place in between
    (clip_grad_norm_, a new version) is read again. 64 x 64 weights: large enough to be kept."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"wg_distribution": True, "ops": ["max", "norm"]}))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monitor = msprobe_cpp.TrainerMon(str(path), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    seen = {}
    for step, clip in enumerate((False, True)):
        optimizer.zero_grad()
        model(torch.randn(32, 64)).pow(2).sum().backward()
        seen[step, "unreduced"] = model[0].weight.grad.norm().item()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        seen[step, "reduced"] = model[0].weight.grad.norm().item()
        optimizer.step()
    monitor.drain()
    files = csv_files(str(tmp_path / "out"))

    def norm(name: str, step: int) -> float:
        [row] = [line.split(",") for line in files[f"{name}_{step}-{step}.csv"].splitlines()[1:]
                 if line.split(",")[1] == "0.weight"]
        return float(row[4])

    for step in (0, 1):
        for family, key in (("grad_unreduced", "unreduced"), ("grad_reduced", "reduced")):
            assert norm(family, step) == pytest.approx(seen[step, key], rel=1e-5, abs=6e-7), (family, step)  # ndigits 6
    assert seen[1, "reduced"] < seen[1, "unreduced"] / 10  # the clip changed it


class Residual(torch.nn.Module):
    """In-place idioms that PyTorch's full backward hooks break ("a view ... is being modified
    inplace"): `out += identity` on a module's output, ReLU(inplace=True) on a module's input."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.act = torch.nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.fc(x)
        out += x
        return self.act(out)


def residual_run(steps, config=None, out=None, monkeypatch=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), Residual(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    if config is not None:
        (out.parent / "monitor.json").write_text(json.dumps(config))
        monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(out))
        monitor = msprobe_cpp.TrainerMon(str(out.parent / "monitor.json"), params_have_main_grad=False)
        monitor.set_monitor(model, optimizer, grad_acc_steps=2)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        for _ in range(2):
            loss = torch.nn.functional.mse_loss(model(torch.randn(16, 4)), torch.randn(16, 2))
            loss.backward()
            losses.append(loss.item())
        optimizer.step()
    if config is not None:
        monitor.drain()
    return losses, model.state_dict()


def test_activations_leave_in_place_idioms_and_training_alone(tmp_path, monkeypatch):
    """xy_distribution on every module of a model whose ReLU(inplace=True) and `out += x` would
    fail under full backward hooks: it trains, bit for bit as without the monitor, and each
    module's rows are written for each micro step."""
    bare_losses, bare_state = residual_run(3)
    config = {"xy_distribution": True, "all_xy": True, "wg_distribution": True, "ops": ["norm"]}
    losses, state = residual_run(3, config, tmp_path / "out", monkeypatch)
    assert losses == bare_losses
    assert all(torch.equal(state[k], bare_state[k]) for k in bare_state)
    files = csv_files(str(tmp_path / "out"))
    assert {f"actv_{s}-{s}.csv" for s in range(3)} | {f"actv_grad_{s}-{s}.csv" for s in range(3)} <= set(files)
    names = [line.split(",")[1] + ":" + line.split(",")[3] for line in files["actv_grad_2-2.csv"].splitlines()[1:]]
    assert names[:4] == [".input:0", ".output:0", "2.input:0", "2.output:0"]
    assert {"1.act.input:1", "1.act.output:1", "1.fc.input:0", "1.input:1"} <= set(names), names


def test_the_values_are_the_tensors_statistics(tmp_path, monkeypatch):
    _, _, model = train(1, {"param_distribution": True, "ops": ["min", "max", "norm", "mean"]},
                        tmp_path / "out", monkeypatch)
    rows = {line.split(",")[1]: line.split(",") for line in
            csv_files(str(tmp_path / "out"))["param_updated_0-0.csv"].splitlines()[1:]}
    w = model.fc1.weight.detach()
    assert rows["fc1.weight"][3:7] == [repr(round(v, 6)) for v in (
        w.min().item(), w.max().item(), torch.norm(w.double()).item(), torch.mean(w.double()).item())]


class DoubledInPlace(torch.nn.Module):
    def forward(self, x):
        return x.mul_(2)


def test_a_tensor_is_read_once_a_step_and_again_once_changed(tmp_path, monkeypatch):
    """The monitor reads a tensor that fills several slots (a module's output, the next one's
    input) once a step, and again once it has changed: the middle module doubles its input in
    place, and the rows after it are the doubled tensor's, not those of the output it was."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), DoubledInPlace(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    (tmp_path / "monitor.json").write_text(json.dumps({"xy_distribution": True, "ops": ["min", "max", "norm"]}))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monitor = msprobe_cpp.TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    x = torch.randn(64, 64)
    with torch.no_grad():
        first = model[0](x)
    model(x).sum().backward()
    optimizer.step()
    monitor.drain()
    rows = {line.split(",")[1]: [float(v) for v in line.split(",")[4:7]]
            for line in csv_files(str(tmp_path / "out"))["actv_0-0.csv"].splitlines()[1:]}
    expected = {"0.output": first, "1.input": 2 * first, "1.output": 2 * first, "2.input": 2 * first}
    for slot, t in expected.items():
        assert rows[slot] == pytest.approx([t.min().item(), t.max().item(), t.norm().item()], rel=1e-5), slot


@pytest.mark.parametrize("change", ["in place", "replaced"])
def test_the_moments_are_the_steps_own_when_changed_between_steps(tmp_path, monkeypatch, change):
    """mv_distribution's moments are read ahead, after the optimizer step before the written one
    (moment_prefetch.h). A program that changes them in between, in place or by putting others in
    (load_state_dict), gets the values of what its optimizer steps with, not of what was read."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"mv_distribution": True, "ops": ["min", "max", "norm"]}))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monitor = msprobe_cpp.TrainerMon(str(path), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    expected = {}
    for step in range(4):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if step == 2:  # after step 1's optimizer step, before step 2's
            state = optimizer.state[model.fc1.weight]
            if change == "in place":
                state["exp_avg"].mul_(3.0)
            else:
                state["exp_avg"] = state["exp_avg"] * 5.0
        if step >= 1:
            m = optimizer.state[model.fc1.weight]["exp_avg"]
            expected[step] = [repr(round(v, 6)) for v in (m.min().item(), m.max().item(),
                                                         torch.norm(m.double()).item())]
        optimizer.step()
    monitor.drain()
    files = csv_files(str(tmp_path / "out"))
    for step, values in expected.items():
        rows = {line.split(",")[1]: line.split(",") for line in
                files[f"exp_avg_{step}-{step}.csv"].splitlines()[1:]}
        assert rows["fc1.weight"][3:6] == values, (step, rows["fc1.weight"], values)


@pytest.mark.parametrize("schedule, written", [
    ({"start_step": 2}, [2, 3, 4, 5]),
    ({"step_interval": 3}, [0, 3]),
    ({"start_step": 1, "step_interval": 2, "collect_times": 2}, [1, 3]),
])
def test_the_steps_written_are_the_configs(tmp_path, monkeypatch, schedule, written):
    train(6, {"param_distribution": True, **schedule}, tmp_path / "out", monkeypatch)
    steps = sorted(int(name.split("_")[-1].split("-")[0]) for name in csv_files(str(tmp_path / "out"))
                   if name.startswith("param_origin"))
    assert steps == written


def test_a_start_iteration_numbers_the_steps(tmp_path, monkeypatch):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"param_distribution": True, "step_count_per_record": 10}))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = msprobe_cpp.TrainerMon(str(path), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer, start_iteration=7)
    for _ in range(4):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    monitor.drain()
    files = csv_files(str(tmp_path / "out"))
    assert sorted(files) == ["param_origin_0-9.csv", "param_origin_10-19.csv",
                             "param_updated_0-9.csv", "param_updated_10-19.csv"]
    assert [line.split(",")[2] for line in files["param_origin_0-9.csv"].splitlines()[1:]][::4] == ["7", "8", "9"]


def test_a_collectives_pattern_that_is_no_regular_expression_is_refused(tmp_path):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"cc_distribution": {"enable": True, "cc_codeline": ["train(["]}}))
    with pytest.raises(msprobe_cpp.ConfigError) as e:
        msprobe_cpp.TrainerMon(str(path))
    assert str(e.value).startswith(f"{path}: cc_distribution.cc_codeline")
    assert "train([" in str(e.value)


def test_a_bad_config_is_one_line_per_key(tmp_path):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"ndigits": 30, "ops": ["p99"]}))
    with pytest.raises(msprobe_cpp.ConfigError) as e:
        msprobe_cpp.TrainerMon(str(path))
    assert str(e.value).splitlines() == [
        f"{path}: ops[0]: expected one of norm, min, max, zeros, nans, id, mean, shape, dtype, got \"p99\"",
        f"{path}: ndigits: expected an integer from 1 to 20, got 30"]
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(msprobe_cpp.ConfigError, match="broken.json:1:2: invalid JSON"):
        msprobe_cpp.TrainerMon(str(tmp_path / "broken.json"))


@pytest.mark.parametrize("argument, value, message", [
    ("grad_acc_steps", 0, "TrainerMon.set_monitor(grad_acc_steps=0): expected an integer >= 1"),
    ("start_iteration", -1, "TrainerMon.set_monitor(start_iteration=-1): expected an integer >= 0"),
    ("start_iteration", 1.5, "TrainerMon.set_monitor(start_iteration=1.5): expected an integer >= 0"),
])
def test_set_monitors_arguments_are_checked(tmp_path, monkeypatch, argument, value, message):
    path = tmp_path / "monitor.json"
    path.write_text("{}")
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = optimizer.step
    with pytest.raises(ValueError) as e:
        msprobe_cpp.TrainerMon(str(path)).set_monitor(model, optimizer, **{argument: value})
    assert str(e.value) == message
    assert optimizer.step == step  # nothing installed


def test_the_monitor_is_importable_as_msprobes_is():
    from msprobe_cpp.monitor import TrainerMon
    assert TrainerMon is msprobe_cpp.TrainerMon


class Scale(torch.nn.Module):
    """A float16 activation that takes most of float16's range."""

    def forward(self, x):
        return x.half() * 40000


class NearTheLimit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = Scale()

    def forward(self, x):
        return self.scale(torch.tanh(self.fc(x))).float().mean()


def test_an_alert_says_what_the_guard_knows(tmp_path, monkeypatch, caplog):
    """Alerts fire as msprobe's do (AnomalyNan on a planted NaN, and on a value over its
    threshold), into msprobe's anomaly.json; beyond msprobe, each names the module's call and the
    line that called it, and how much of float16's range the value takes (anomaly_context.json,
    and the log line)."""
    config = {"targets": {"scale": {}, "fc": {}}, "xy_distribution": True, "forward_only": True,
              "ops": ["min", "max", "norm"],
              "alert": {"rules": [{"rule_name": "AnomalyNan", "args": {"threshold": 15000}}], "dump": True}}
    (tmp_path / "monitor.json").write_text(json.dumps(config))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    torch.manual_seed(0)
    model = NearTheLimit()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = msprobe_cpp.TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    monkeypatch.setattr(logging.getLogger("msprobe_cpp"), "propagate", True)
    with caplog.at_level("INFO", logger="msprobe_cpp"):
        for step in range(3):
            x = torch.randn(8, 4) * 4
            if step == 2:
                x[0, 0] = float("nan")  # the batch carries a NaN
            optimizer.zero_grad()
            model(x).backward()
            optimizer.step()
        monitor.drain()
    folder = tmp_path / "out" / "anomaly_detected" / "rank0"
    anomalies = json.loads((folder / "anomaly.json").read_text())
    context = json.loads((folder / "anomaly_context.json").read_text())
    assert list(context) == list(anomalies)
    near = [k for k in anomalies if k.startswith("0:scale.output:0/rank0/actv_step_0")]
    assert near, sorted(anomalies)
    c = context[near[0]]
    assert c["call"] == "Module.scale.Scale.forward" and c["module"] == "scale"
    assert c["source"].startswith(__file__ + ":") and c["dtype"] == "torch.float16"
    assert c["near_limit"] is True and 0.5 < c["range_used"] <= 1
    nan = [k for k in anomalies if k.startswith("0:fc.input:0/rank0/actv_step_2")]
    assert nan and "current value nan" in anomalies[nan[0]]["message"], sorted(anomalies)
    assert context[nan[0]]["call"] == "Module.fc.Linear.forward" and "range_used" not in context[nan[0]]
    said = [r.getMessage() for r in caplog.records if "0:scale.output:0/rank0/actv" in r.getMessage()]
    assert said and "float16's range, near its limit]" in said[0], said


def event_scalars(folder):
    """{tag: [(step, value)]} of the run's TensorBoard event files, read by TensorBoard itself."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    reader = accumulator.EventAccumulator(str(folder), size_guidance={accumulator.SCALARS: 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def test_format_tensorboard_is_read_back_by_tensorboard(tmp_path, monkeypatch):
    """format "tensorboard" writes one event file in the run folder and no CSV: every numeric
    value of every family, tagged as msprobe's SummaryWriterWithAD tags it ("<tag>_<op>"), at
    its step; TensorBoard's own reader reads them back, equal to the CSV run's values."""
    pytest.importorskip("tensorboard")
    config = {"targets": {"fc1": {}, "fc2": {}}, "xy_distribution": True, **FAMILIES, "ops": ["min", "max", "norm"]}
    train(3, {**config, "format": "csv"}, tmp_path / "csv", monkeypatch)
    train(3, {**config, "format": "tensorboard"}, tmp_path / "tb", monkeypatch)
    (run,) = [p for p in (tmp_path / "tb").iterdir() if p.is_dir()]
    assert [p.name.startswith("events.out.tfevents.") for p in run.iterdir()] == [True]
    scalars = event_scalars(run)
    csvs = csv_files(str(tmp_path / "csv"))
    family_tags = {"actv": "actv", "actv_grad": "actv_grad", "grad_unreduced": "acc_grad", "grad_reduced": "post_grad",
                   "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq", "param_origin": "param_origin",
                   "param_updated": "param_updated"}
    compared = 0
    for name, text in csvs.items():
        family = name.rsplit("_", 1)[0]
        header, *lines = text.splitlines()
        columns = header.split(",")
        for line in lines:
            cells = dict(zip(columns, line.split(",")))
            tag = f"{cells['vpp_stage']}:{cells['name']}" + (f":{cells['micro_step']}" if "micro_step" in cells else "")
            for op in ("min", "max", "norm"):
                points = dict(scalars[f"{tag}/rank0/{family_tags[family]}_{op}"])
                assert points[int(cells["step"])] == pytest.approx(float(cells[op]), rel=1e-5, abs=1e-6, nan_ok=True)
                compared += 1
    assert compared > 100
    assert "0:fc1.input:0/rank0/actv_norm" in scalars and "0:fc2.weight/rank0/exp_avg_sq_max" in scalars
    assert [s for s, _ in scalars["0:fc1.weight/rank0/post_grad_norm"]] == [0, 1, 2]


def guarded_run(tmp_path, monkeypatch, steps, monitored, nan_at=None):
    """Net trained under the guard (task overflow_check, level L1), with or without the monitor
    (xy, wg, mv on fc1 and fc2). Returns the losses, the state and the stop, if any."""
    from dumps import debugger
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    name = "monitored" if monitored else "bare"
    if monitored:
        config = {"targets": {"fc1": {}, "fc2": {}}, "xy_distribution": True, **FAMILIES, "ops": ["max", "norm"],
                  "alert": {"rules": [{"rule_name": "AnomalyNan"}], "dump": True}}
        (tmp_path / "monitor.json").write_text(json.dumps(config))
        monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / f"{name}-monitor"))
        monitor = msprobe_cpp.TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
        monitor.set_monitor(model, optimizer)
    dbg = debugger(tmp_path / name)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    losses, stop = [], None
    for step in range(steps):
        dbg.start(model)
        batch = x.clone()
        if step == nan_at:
            batch[0, 0] = float("nan")
        try:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(batch), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        except msprobe_cpp.OverflowError as e:
            stop = e
            break
        finally:
            dbg.stop()
        dbg.step()
    if monitored:
        monitor.drain()
    return losses, model.state_dict(), stop


def test_the_monitor_runs_beside_the_guard(tmp_path, monkeypatch):
    """TrainerMon and PrecisionDebugger(task overflow_check) on one model: the clean run trains
    bit for bit as under the guard alone, with no stop and the monitor's files written; a NaN in
    the batch is still stopped by the guard at its first call, with origin input, in its step."""
    bare_losses, bare_state, bare_stop = guarded_run(tmp_path, monkeypatch, 3, monitored=False)
    losses, state, stop = guarded_run(tmp_path, monkeypatch, 3, monitored=True)
    assert bare_stop is None and stop is None
    assert losses == bare_losses
    assert all(torch.equal(state[k], bare_state[k]) for k in bare_state)
    files = csv_files(str(tmp_path / "monitored-monitor"))
    assert {"actv_2-2.csv", "actv_grad_2-2.csv", "grad_unreduced_2-2.csv", "exp_avg_2-2.csv"} <= set(files)
    (tmp_path / "nan").mkdir()
    _, _, stop = guarded_run(tmp_path / "nan", monkeypatch, 3, monitored=True, nan_at=1)
    assert stop is not None and (stop.step, stop.origin) == (1, "input")
    assert stop.call.startswith("Functional.linear.0")
