"""TrainerMon's options beyond the statistics families (issue 55), on every torch: stack_info,
dynamic_on, cc_distribution, append_output and alert.dump_step_on, each with the training
unaltered. The byte-for-byte comparisons with msprobe 26.2.0: test_monitor_peer.py."""
import csv
import io
import json
import logging
import os
import time

import torch

import msprobe_cpp
from monitor_peer import csv_files
from test_monitor import Net, train


def test_stack_info_names_each_modules_caller_and_its_hooks_go(tmp_path, monkeypatch):
    """stack_info.csv: one row per module in the order of their first forwards, each its calling
    stack as msprobe writes it; its hooks are gone once the file is written, training untouched."""
    bare_losses, bare_state, _ = train(3)
    config = {"wg_distribution": True, "stack_info": True, "start_step": 1, "ops": ["max"]}
    losses, state, model = train(3, config, tmp_path / "out", monkeypatch)
    assert losses == bare_losses
    assert all(torch.equal(state[k], bare_state[k]) for k in bare_state)
    rows = list(csv.reader(io.StringIO(csv_files(str(tmp_path / "out"))["stack_info.csv"])))
    assert rows[0] == ["module_name", "stack_info"]
    assert [row[0] for row in rows[1:]] == ["0:fc1", "0:fc2", "0:"]
    assert f"File {__file__}, line" in rows[1][1], rows[1][1]
    assert "\n return self.fc2(torch.relu(self.fc1(x))) \n" in rows[1][1]
    assert "\n loss = torch.nn.functional.mse_loss(model(x), y) \n" in rows[3][1]
    assert all(not module._forward_hooks for module in model.modules())


def test_dynamic_on_turns_the_monitor_on_and_off_from_its_file(tmp_path, monkeypatch, caplog):
    """DYNAMIC_MONITOR=true: nothing is written until the file says dynamic_on; a changed file
    that is not valid is said and changes nothing; a valid one runs from the next step for
    collect_times steps, then the file says dynamic_on: false again and the hooks are gone."""
    bare_losses, bare_state, _ = train(8)
    path = tmp_path / "monitor.json"
    config = {"param_distribution": True, "xy_distribution": True, "all_xy": True, "collect_times": 2,
              "ops": ["max"], "dynamic_on": False}
    path.write_text(json.dumps(config))
    monkeypatch.setenv("DYNAMIC_MONITOR", "true")
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = msprobe_cpp.TrainerMon(str(path), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    losses = []
    edits = {1: {**config, "dynamic_on": True, "ops": ["p99"]}, 3: {**config, "dynamic_on": True}}
    monkeypatch.setattr(logging.getLogger("msprobe_cpp"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="msprobe_cpp"):
        for step in range(8):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step in edits:
                path.write_text(json.dumps(edits[step]))
                os.utime(path, ns=(time.time_ns(), time.time_ns() + step))  # a new time, however coarse
    monitor.drain()
    assert losses == bare_losses
    assert all(torch.equal(model.state_dict()[k], bare_state[k]) for k in bare_state)
    assert any("ops" in r.getMessage() and "p99" in r.getMessage() for r in caplog.records if r.levelno >= 40)
    files = csv_files(str(tmp_path / "out"))
    # Turned on after step 3 (read at the end of step 4): steps 5 and 6 written.
    assert {line.split(",")[2] for line in files["param_origin_5-5.csv"].splitlines()[1:]} == {"5"}
    assert sorted(files) == ["actv_5-5.csv", "actv_6-6.csv", "actv_grad_5-5.csv", "actv_grad_6-6.csv",
                             "param_origin_5-5.csv", "param_origin_6-6.csv",
                             "param_updated_5-5.csv", "param_updated_6-6.csv"]
    assert json.loads(path.read_text()) == {**config, "dynamic_on": False}
    assert all(not module._forward_hooks and not module._forward_pre_hooks for module in model.modules())


def test_collectives_are_watched_and_given_back(tmp_path, monkeypatch):
    """cc_distribution on one gloo rank: the step's collectives are in the `other` file, the
    training is unaltered, and torch.distributed's own functions are back once the monitor
    wrote its collect_times steps."""
    dist = torch.distributed
    originals = (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.all_gather)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        def run(config):
            torch.manual_seed(0)
            model = Net()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
            if config:
                path = tmp_path / "monitor.json"
                path.write_text(json.dumps(config))
                monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
                monitor = msprobe_cpp.TrainerMon(str(path), params_have_main_grad=False)
                monitor.set_monitor(model, optimizer)
            x, y = torch.randn(16, 4), torch.randn(16, 2)
            losses = []
            for step in range(4):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                gathered = [torch.zeros(2)]
                dist.all_gather(gathered, torch.full((2,), float(step)))
                if step == 1:
                    assert (dist.all_reduce is not originals[0]) == bool(config)
                optimizer.step()
                losses.append(loss.item())
            if config:
                monitor.drain()
            return losses, model.state_dict()

        bare_losses, bare_state = run(None)
        losses, state = run({"cc_distribution": {"enable": True}, "ops": ["max"], "collect_times": 2})
        assert losses == bare_losses
        assert all(torch.equal(state[k], bare_state[k]) for k in bare_state)
        assert (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.all_gather) == originals
        files = csv_files(str(tmp_path / "out"))
        assert sorted(files) == ["other_0-0.csv", "other_1-1.csv"]
        rows = [line.split(",") for line in files["other_1-1.csv"].splitlines()[1:]]
        # [collective, max, step, shape, dtype]: the gathered tensor's max is the step's number.
        assert [row[0] for row in rows] == ["all_reduce", "all_gather"]
        assert rows[1][:3] == ["all_gather", "1.0", "1"]
    finally:
        dist.destroy_process_group()


def test_append_output_goes_on_writing_into_the_earlier_runs_folder(tmp_path, monkeypatch):
    """append_output, in a distributed run: a restarted monitor writes into the run folder of the
    same rank whose time tag lies within the two given."""
    dist = torch.distributed
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        config = {"param_distribution": True, "ops": ["max"], "collect_times": 1}
        train(2, config, tmp_path / "out", monkeypatch)
        (first,) = [p for p in (tmp_path / "out").iterdir() if "-rank0-" in p.name]
        tag = first.name.split("-rank0-")[0]
        train(2, {**config, "start_step": 1, "append_output": [tag, tag]}, tmp_path / "out", monkeypatch)
        assert [p.name for p in (tmp_path / "out").iterdir() if "-rank" in p.name] == [first.name]
        assert sorted(os.listdir(first)) == ["param_origin_0-0.csv", "param_origin_1-1.csv",
                                             "param_updated_0-0.csv", "param_updated_1-1.csv"]
    finally:
        dist.destroy_process_group()


def test_a_chosen_alert_writes_the_guards_step_before_anything_is_nan(tmp_path, monkeypatch, caplog):
    """alert.dump_step_on: a turbulence alert on fc2's output (its inputs 50 times larger at step 5)
    writes that step's dump under task overflow_check, a flagged step whose report carries the
    alert's line; no other step is written, nothing stops, the training is as under the guard
    alone."""
    from dumps import debugger

    def run(name, dump_step_on):
        torch.manual_seed(0)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        if dump_step_on is not None:
            config = {"targets": {"fc2": {}}, "xy_distribution": True, "forward_only": True, "ops": ["norm"],
                      "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 3.0}}],
                                "dump_step_on": dump_step_on}}
            (tmp_path / f"{name}.json").write_text(json.dumps(config))
            monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / f"{name}-monitor"))
            monitor = msprobe_cpp.TrainerMon(str(tmp_path / f"{name}.json"), params_have_main_grad=False)
            monitor.set_monitor(model, optimizer)
        dbg = debugger(tmp_path / name)
        x, y = torch.randn(16, 4), torch.randn(16, 2)
        losses = []
        for step in range(7):
            dbg.start(model)
            loss = torch.nn.functional.mse_loss(model(x * (50.0 if step == 5 else 1.0)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            dbg.stop()
            dbg.step()
        return losses, model.state_dict()

    bare_losses, bare_state = run("bare", None)
    monkeypatch.setattr(logging.getLogger("msprobe_cpp"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="msprobe_cpp"):
        losses, state = run("flagged", ["0:fc2.output"])
    assert losses == bare_losses
    assert all(torch.equal(state[k], bare_state[k]) for k in bare_state)
    dump = tmp_path / "flagged" / "dump"
    assert sorted(p.name for p in dump.iterdir()) == ["step5"]
    report = json.loads((dump / "step5" / "rank" / "overflow_report.json").read_text())
    assert "('0:fc2.output:0/rank0/actv', 'norm') at step 5" in report["monitor_alert"], report
    assert "flagged by the training monitor: > Rule AnomalyTurbulence" in caplog.text
    assert not (tmp_path / "bare" / "dump").exists() or not any((tmp_path / "bare" / "dump").iterdir())
