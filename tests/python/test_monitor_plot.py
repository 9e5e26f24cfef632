"""`msprobe-cpp monitor-plot` (issue 55): a training monitor's curves drawn without TensorBoard,
one SVG per file kind and row, the steps its alerts fired at ringed. On hand-built runs here, and
on a run of msprobe 26.2.0's own TrainerMon in the torch 2.13 venv (marker msprobe26)."""
import json
import pathlib
import re
import subprocess
import sys

import pytest

from msprobe_runs import msprobe_version

ROOT = pathlib.Path(__file__).resolve().parent
HEADER = "vpp_stage,name,step,micro_step,min,max,norm,zeros,nans,mean,shape,dtype\n"


def plot(cli: pathlib.Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), "monitor-plot", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def polyline_points(svg: pathlib.Path):
    return re.search(r'<polyline[^>]* points="([^"]*)"', svg.read_text()).group(1).split()


def hand_built_run(root: pathlib.Path) -> pathlib.Path:
    run = root / "Dec06_06-45-53-rank1-aa8bd87d"
    run.mkdir(parents=True)
    for step, norm in [(2, 3.0), (10, 5.0), (0, 1.0)]:  # "actv_10-10" sorts before "actv_2-2"
        (run / f"actv_{step}-{step}.csv").write_text(
            HEADER + f'0,fc1.output,{step},0,-1.0,1.0,{norm},0.0,0,0.1,"[16, 8]",torch.float32\n'
                     f'0,fc1.output,{step},1,-1.0,1.0,{norm * 2},0.0,0,0.1,"[16, 8]",torch.float32\n')
    (run / "grad_reduced_0-9.csv").write_text(
        "vpp_stage,name,step,norm,shape,dtype\n"
        "0,fc1.weight,0,0.5,\"[8, 4]\",torch.float32\n0,fc1.weight,1,nan,\"[8, 4]\",torch.float32\n")
    alerts = root / "anomaly_detected" / "rank1"
    alerts.mkdir(parents=True)
    (alerts / "anomaly.json").write_text(json.dumps({
        "a": {"rank": 1, "step": 10, "tag_name": "0:fc1.output:0/rank1/actv"},
        "b": {"rank": 1, "step": 1, "tag_name": "0:fc1.weight/rank1/post_grad"},
    }, indent=1))
    return run


def test_each_row_is_a_curve_over_the_steps_with_its_alerts_ringed(cli, tmp_path):
    hand_built_run(tmp_path / "monitor_output")
    r = plot(cli, tmp_path / "monitor_output", "-o", tmp_path / "plots")
    assert r.returncode == 0, r.stderr
    assert "Dec06_06-45-53-rank1-aa8bd87d: 3 curves of norm, 2 alerts marked" in r.stdout
    pictures = tmp_path / "plots" / "Dec06_06-45-53-rank1-aa8bd87d"
    assert sorted(p.relative_to(pictures).as_posix() for p in pictures.rglob("*.svg")) == [
        "actv/fc1.output.svg", "actv/fc1.output:1.svg", "grad_reduced/fc1.weight.svg"]
    output = pictures / "actv" / "fc1.output.svg"
    assert len(polyline_points(output)) == 3
    xs = [float(p.split(",")[0]) for p in polyline_points(output)]
    assert xs == sorted(xs)  # steps 0, 2, 10, in order
    assert output.read_text().count('class="alert"') == 1
    assert (pictures / "actv" / "fc1.output:1.svg").read_text().count('class="alert"') == 0
    assert (pictures / "grad_reduced" / "fc1.weight.svg").read_text().count('class="alert"') == 1


def test_the_op_drawn_is_chosen(cli, tmp_path):
    run = hand_built_run(tmp_path)
    r = plot(cli, run, "-o", tmp_path / "plots", "--op", "min")
    assert r.returncode == 0, r.stderr
    assert "2 curves of min" in r.stdout  # grad_reduced has no min column


@pytest.mark.parametrize("args, message", [
    ([], "msprobe-cpp monitor-plot: RUN is required"),
    (["RUN"], "msprobe-cpp monitor-plot: -o OUT is required"),
    (["RUN", "-o", "OUT", "--bogus"], "msprobe-cpp monitor-plot: unknown option --bogus"),
    (["EMPTY", "-o", "OUT"], "msprobe-cpp monitor-plot: EMPTY: no training monitor CSVs there"),
])
def test_bad_arguments_are_one_line_and_exit_2(cli, tmp_path, args, message):
    (tmp_path / "EMPTY").mkdir()
    r = subprocess.run([str(cli), "monitor-plot", *args], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.splitlines()[0] == message, r.stderr


def test_a_row_that_does_not_fit_its_header_is_named(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "actv_0-0.csv").write_text(HEADER + "0,fc1.output,0,0,1.0\n")
    r = plot(cli, run, "-o", tmp_path / "plots")
    assert r.returncode == 2
    assert "actv_0-0.csv: a row of 5 fields under a header of 12" in r.stderr


@pytest.mark.slow
@pytest.mark.msprobe26
@pytest.mark.skipif(msprobe_version() != "26.2.0", reason="msprobe 26.2.0 is not installed here")
def test_msprobes_own_monitor_run_is_drawn_with_every_alert(cli, tmp_path):
    config = {"targets": {"fc1": {}, "fc2": {}}, "xy_distribution": True, "wg_distribution": True,
              "mv_distribution": True, "param_distribution": True,
              "ops": ["min", "max", "norm", "zeros", "nans", "mean"],
              "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}],
                        "dump": True}}
    (tmp_path / "monitor.json").write_text(json.dumps(config))
    out = tmp_path / "monitor_output"
    subprocess.run([sys.executable, str(ROOT / "monitor_peer.py"), "msprobe", str(tmp_path / "monitor.json"),
                    str(out), "4"], check=True, capture_output=True, timeout=300)
    alerts = json.loads((out / "anomaly_detected" / "rank0" / "anomaly.json").read_text())
    assert alerts, "the threshold of 0.5 fires in 4 steps of this run"
    r = plot(cli, out, "-o", tmp_path / "plots")
    assert r.returncode == 0, r.stderr
    svgs = list((tmp_path / "plots").rglob("*.svg"))
    kinds = {p.parent.name for p in svgs}
    assert {"actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq",
            "param_origin", "param_updated"} <= kinds
    assert sum(p.read_text().count('class="alert"') for p in svgs) == len(alerts)
    assert f"{len(alerts)} alert{'s' if len(alerts) != 1 else ''} marked" in r.stdout
