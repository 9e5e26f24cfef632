"""TrainerMon against msprobe 26.2.0's own (issue 55), where it is installed (the torch 2.13
venv): the same training under each (monitor_peer.py, one process per tool), and the same files
byte for byte, family by family: the CSVs, anomaly.json, module_struct.json."""
import json
import os
import pathlib

import pytest

from gloo import free_port
from monitor_peer import FAMILIES, csv_files
from dist_runs import run_python
from msprobe_runs import msprobe_version, tool_imports
from testenv import PACKAGE_ROOT

HERE = pathlib.Path(__file__).resolve().parent


def peer_run(tool: str, config: dict, out: pathlib.Path, steps: int = 4, model: str = "net",
             grad_acc: int = 1, env: dict = None) -> dict:
    path = out.parent / f"{out.name}.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ, **(env or {}),
               PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]))
    r = run_python([str(HERE / "monitor_peer.py"), tool, str(path), str(out), str(steps), model, str(grad_acc)],
                   timeout=300, env=env, preload=tool_imports(tool))
    assert r.returncode == 0, r.stderr[-3000:]
    return csv_files(str(out))


def assert_same_files(ours: dict, theirs: dict) -> None:
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        assert ours[name] == theirs[name], name


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config", [
    {"targets": {"fc1": {}, "fc2": {}}, **FAMILIES, "ops": ["min", "max", "norm", "zeros", "nans", "mean", "id"]},
    {**FAMILIES, "start_step": 1, "step_interval": 2, "step_count_per_record": 2, "ndigits": 4},
    {"targets": {"fc2": {}}, "param_distribution": True, "collect_times": 2, "ops": ["dtype", "max"]},
], ids=["targets-all-ops", "steps-and-files", "one-target-collect-times"])
def test_the_csvs_are_msprobes_own(tmp_path, config):
    theirs = peer_run("msprobe", config, tmp_path / "msprobe")
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours")
    assert any(name.startswith("param_origin") for name in theirs), sorted(theirs)
    assert_same_files(ours, theirs)


XY_OPS = ["min", "max", "norm", "zeros", "nans", "mean", "shape", "dtype"]


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config,grad_acc", [
    ({"targets": {"fc1": {}, "pair": {}, "fc2": {}}, "xy_distribution": True, "ops": XY_OPS}, 1),
    ({"xy_distribution": True, "all_xy": True, "wg_distribution": True, "ops": ["norm", "nans", "id"]}, 2),
    ({"targets": {"pair": {}, "head": {}}, "xy_distribution": True, "forward_only": True, "ops": ["max"]}, 1),
    ({"targets": {"pair": {}, "fc2": {}}, "xy_distribution": True, "backward_only": True, "ops": ["mean"],
      "step_interval": 2}, 2),
], ids=["targets", "all-xy-grad-acc", "forward-only", "backward-only-interval"])
def test_the_activation_csvs_are_msprobes_own(tmp_path, config, grad_acc):
    """xy_distribution (actv, actv_grad): modules with several positional inputs, a keyword input,
    a tuple output holding None, one module called twice per forward, micro batches: the same
    files, rows and values as msprobe 26.2.0's, byte for byte."""
    theirs = peer_run("msprobe", config, tmp_path / "msprobe", 3, "xy", grad_acc)
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours", 3, "xy", grad_acc)
    families = {name.rsplit("_", 1)[0] for name in theirs}
    assert families & {"actv", "actv_grad"}, sorted(theirs)
    assert_same_files(ours, theirs)


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config,grad_acc", [
    ({"squash_name": True, "xy_distribution": True, "all_xy": True, "wg_distribution": True,
      "mv_distribution": True, "mg_direction": True, "monitor_mbs_grad": True, "ops": ["norm", "max"]}, 2),
    ({"squash_name": True, "targets": {"layers.0.fc": {}, "norm": {}, "model.layers.1": {}}, "xy_distribution": True,
      "wg_distribution": True, "param_distribution": True, "mg_direction": True, "ops": ["min", "mean"]}, 1),
], ids=["squash-mg-mbs", "squash-targets"])
def test_squashed_names_mg_direction_and_micro_step_grads_are_msprobes_own(tmp_path, config, grad_acc):
    """squash_name (names shortened from their last .layers., .norm, ...; targets matched on
    either name), mg_direction (the `other` files) and monitor_mbs_grad (grad_unreduced per micro
    step): the same files and rows as msprobe 26.2.0's, byte for byte."""
    theirs = peer_run("msprobe", config, tmp_path / "msprobe", 3, "stack", grad_acc)
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours", 3, "stack", grad_acc)
    assert any(name.startswith("other") for name in theirs), sorted(theirs)
    assert_same_files(ours, theirs)


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config", [{"print_struct": True}, {"print_struct": True, "forward_only": True}],
                         ids=["both", "forward-only"])
def test_print_struct_is_msprobes_own(tmp_path, config):
    """print_struct: every module's input, output and gradients' structure at its first call, in
    msprobe 26.2.0's module_struct.json byte for byte, and the run stopped at its first optimizer
    step with msprobe's exception."""
    texts = {}
    for tool in ("msprobe", "msprobe_cpp"):
        out = tmp_path / tool
        (tmp_path / f"{tool}.json").write_text(json.dumps(config))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]))
        r = run_python([str(HERE / "monitor_peer.py"), tool, str(tmp_path / f"{tool}.json"), str(out), "3", "xy", "1"],
                       timeout=300, env=env, preload=tool_imports(tool))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "stopped: exit after first monitor step when print model struct" in r.stdout
        texts[tool] = (out / "module_struct" / "rank0" / "module_struct.json").read_text()
    assert texts["msprobe_cpp"] == texts["msprobe"]
    assert '"config": "tuple[3]"' in texts["msprobe"] and "NoneType" in texts["msprobe"]


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config,model", [
    ({"xy_distribution": True, "all_xy": True, "stack_info": True, "ops": ["max"]}, "xy"),
    ({"squash_name": True, "wg_distribution": True, "stack_info": True, "start_step": 1, "ops": ["norm"]},
     "stack"),
], ids=["all-xy", "squash-start-step"])
def test_stack_info_is_msprobes_own(tmp_path, config, model):
    """stack_info: every module's call stack at its last forward before the first written step,
    msprobe 26.2.0's stack_info.csv byte for byte (its rows' order, names, frames and quoting)."""
    theirs = peer_run("msprobe", config, tmp_path / "msprobe", 3, model)
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours", 3, model)
    assert "monitor_peer.py, line" in theirs["stack_info.csv"], sorted(theirs)
    assert_same_files(ours, theirs)


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config,switch_at", [
    ({"param_distribution": True, "dynamic_on": True, "collect_times": 2, "start_step": 3, "ops": ["max"]}, -1),
    ({"wg_distribution": True, "xy_distribution": True, "dynamic_on": False, "collect_times": 2,
      "step_interval": 2, "ops": ["norm", "min"]}, 2),
], ids=["on-from-the-start", "turned-on-after-step-2"])
def test_dynamic_on_is_msprobes_own(tmp_path, config, switch_at):
    """DYNAMIC_MONITOR=true: nothing is watched until the config file says dynamic_on; then that
    config runs from the next step (its start_step overridden) for collect_times steps, and the
    file is given dynamic_on: false again. The same files as msprobe 26.2.0's, and the same
    config file at the end."""
    env = {"DYNAMIC_MONITOR": "true", "PEER_DYNAMIC_ON_AT": str(switch_at)}
    theirs = peer_run("msprobe", config, tmp_path / "msprobe", 8, "xy", env=env)
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours", 8, "xy", env=env)
    assert theirs, "msprobe wrote nothing"
    assert_same_files(ours, theirs)
    after = {tool: json.loads((tmp_path / f"{tool}.json").read_text()) for tool in ("msprobe", "ours")}
    assert after["ours"] == after["msprobe"] == {**config, "dynamic_on": False}


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config", [
    {"cc_distribution": {"enable": True}, "mg_direction": True, "ops": ["min", "max", "norm"], "step_interval": 2},
    {"cc_distribution": {"enable": True, "cc_pre_hook": True, "cc_codeline": ["gather_norms"]},
     "ops": ["mean", "zeros", "nans", "id"]},
    {"cc_distribution": {"enable": True}, "ops": ["max", "norm"], "start_step": 1, "step_interval": 3},
], ids=["with-mg-direction", "pre-hook-codeline", "folded-over-unwritten-steps"])
def test_the_collectives_are_msprobes_own(tmp_path, config):
    """cc_distribution: all_reduce, all_gather, an asynchronous all_reduce waited for, broadcast,
    each step on one gloo rank; their statistics folded over the steps since the last written
    one, in msprobe 26.2.0's `other` files byte for byte (its rows, longer than its header)."""
    theirs = peer_run("msprobe", config, tmp_path / "msprobe", 5, "cc", env={"MASTER_PORT": str(free_port())})
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours", 5, "cc", env={"MASTER_PORT": str(free_port())})
    assert any("all_gather" in text for name, text in theirs.items() if name.startswith("other")), theirs
    assert_same_files(ours, theirs)


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
def test_cc_log_only_says_where_each_collective_is_called_and_stops(tmp_path):
    """cc_log_only: the collectives called and from where, said at the second step, which ends
    the run with msprobe's exception, as msprobe 26.2.0's does."""
    said = {}
    for tool in ("msprobe", "msprobe_cpp"):
        (tmp_path / f"{tool}.json").write_text(json.dumps({"cc_distribution": {"enable": True, "cc_log_only": True}}))
        env = dict(os.environ, MASTER_PORT=str(free_port()),
                   PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]))
        r = run_python([str(HERE / "monitor_peer.py"), tool, str(tmp_path / f"{tool}.json"), str(tmp_path / tool),
                        "3", "cc"], timeout=300, env=env, preload=tool_imports(tool))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "stopped: exit after first step when print cc stack" in r.stdout
        said[tool] = r.stdout + r.stderr
    for text in said.values():
        assert "> Used communication ops and corresponding stack" in text
        for name in ("all_reduce", "all_gather", "broadcast"):
            assert f'"{name}"' in text
        assert "monitor_peer.py[" in text and "gather_norms" in text


ALERTS = {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
                    {"rule_name": "AnomalyNan", "args": {"threshold": 5.0}}], "dump": True}


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
def test_the_collectives_alerts_are_msprobes_own(tmp_path):
    """msprobe scans cc_distribution's values with the alert rules as it scans every family's,
    under "<collective>/rank<R>/<slot>" tags with no call id: the same anomaly.json, byte for
    byte. (Ours were once written to the CSVs and never scanned.)"""
    config = {"cc_distribution": {"enable": True}, "ops": ["min", "max", "norm"], "alert": ALERTS}
    runs = {}
    for tool in ("msprobe", "msprobe_cpp"):
        out = tmp_path / tool
        runs[tool] = peer_run(tool, config, out, 5, "cc", env={"MASTER_PORT": str(free_port())})
        runs[tool + ".json"] = (out / "anomaly_detected" / "rank0" / "anomaly.json").read_text()
    assert_same_files(runs["msprobe_cpp"], runs["msprobe"])
    theirs = json.loads(runs["msprobe.json"])
    assert any(key.startswith(("all_reduce/", "all_gather/", "broadcast/")) for key in theirs), list(theirs)
    assert runs["msprobe_cpp.json"] == runs["msprobe.json"]


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
@pytest.mark.parametrize("config,grad_acc", [
    ({"targets": {"fc1": {}, "fc2": {}}, "xy_distribution": True, **FAMILIES,
      "ops": ["min", "max", "norm", "zeros", "nans", "mean"], "alert": ALERTS}, 1),
    ({"xy_distribution": True, "all_xy": True, "wg_distribution": True, "mv_distribution": True,
      "ops": ["norm", "mean", "nans"], "alert": ALERTS}, 2),
], ids=["families", "all-xy-grad-acc"])
def test_the_alerts_are_msprobes_own(tmp_path, config, grad_acc):
    """AnomalyTurbulence and AnomalyNan over every value written: msprobe 26.2.0's anomaly.json,
    byte for byte (its keys, call ids, messages, order), on the same run; the CSVs too."""
    model = "net" if grad_acc == 1 else "xy"
    theirs = peer_run("msprobe", config, tmp_path / "msprobe", 4, model, grad_acc)
    ours = peer_run("msprobe_cpp", config, tmp_path / "ours", 4, model, grad_acc)
    assert ours == theirs
    anomaly = pathlib.Path("anomaly_detected", "rank0", "anomaly.json")
    their_json = (tmp_path / "msprobe" / anomaly).read_text()
    our_json = (tmp_path / "ours" / anomaly).read_text()
    assert len(json.loads(their_json)) > 3
    if grad_acc == 1:
        assert our_json == their_json
    else:
        # A module holding parameters (pair, whose pair.a accumulates): msprobe's full backward
        # hook fires after autograd accumulated pair.a's gradients, ours as pair's input gradients
        # are made, so the call ids of the step's later tags differ (docs/monitor.md). All else
        # is the same, in the same order.
        def without_call_ids(text):
            return [(key.rsplit("_call_", 1)[0], {k: v for k, v in entry.items() if k != "call_id"})
                    for key, entry in json.loads(text).items()]
        assert without_call_ids(our_json) == without_call_ids(their_json)
    context = json.loads((tmp_path / "ours" / anomaly).with_name("anomaly_context.json").read_text())
    assert list(context) == list(json.loads(our_json))
    assert all(c["call"].startswith("Module.") and c["source"].startswith(str(HERE / "monitor_peer.py"))
               for key, c in context.items() if "/actv" in key), context
