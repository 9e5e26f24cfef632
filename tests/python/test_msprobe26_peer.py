"""msprobe 26.2.0 itself as a peer (mindstudio-probe, pinned in the torch 2.13 venv:
requirements-torch213.txt): one run dumped by it and by us under a config in 26.x's form, then
read by its own tools. tools/test.sh runs these on 2.13 (`-m "not slow or msprobe26"`); where
26.2.0 is not installed they are skipped.

What is compared: the forward records. 26.2.0 records an API's backward from the autograd node of
its first output (its grad_fn hook), not from the API's arguments, so its backward records of
linear and cross_entropy hold other tensors than 1.1.1's and ours (docs/formats.md)."""
import csv
import json
import os
import pathlib
import subprocess
import sys
from typing import Dict, List

import pytest

from msprobe_runs import msprobe_version
from testenv import PACKAGE_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.msprobe26,
              pytest.mark.skipif(msprobe_version() != "26.2.0",
                                 reason=f"msprobe 26.2.0 is not installed here ({msprobe_version() or 'none'})")]

SCRIPT = """
import json, sys
import torch
TOOL = sys.argv[1]
if TOOL == "msprobe":
    from msprobe.pytorch import PrecisionDebugger
else:
    from msprobe_cpp import PrecisionDebugger


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.fc1(x)).reshape(x.shape[0], 8)
        n = torch.linalg.norm(h, dim=1, keepdim=True) + torch.norm(h)
        return self.fc2(h / n)


torch.manual_seed(0)
model = Net()
if sys.argv[3] == "huge_weight":  # fc1's output overflows from clean inputs: the analyzer's case
    with torch.no_grad():
        model.fc1.weight.fill_(3e38)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = PrecisionDebugger(config_path=sys.argv[2])
for step in range(2):
    debugger.start(model)
    x = torch.randn(4, 6)
    y = torch.randint(0, 3, (4,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
"""


def dump(folder: pathlib.Path, tool: str, level: str = "L1", data_mode=("forward",), fault: str = "none",
         **top) -> pathlib.Path:
    """The run under `tool` ("msprobe" or "ours") with 26.2.0's shipped config but for these
    values; returns its step0 folder."""
    folder.mkdir(parents=True)
    config = {"task": "statistics", "dump_path": str(folder / "dump"), "rank": [], "step": [], "level": level,
              "extra_info": True, "async_dump": False,
              "statistics": {"scope": [], "list": [], "data_mode": list(data_mode), "summary_mode": "statistics"},
              "acc_check": {"white_list": [], "black_list": [], "error_data_path": "./"}, **top}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
    done = subprocess.run([sys.executable, "train.py", tool, "config.json", fault], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder / "dump" / "step0"


def msprobe(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """The `msprobe` command of this venv's 26.2.0."""
    main = "import sys; from msprobe.msprobe import main; sys.argv[0] = 'msprobe'; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", main, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def compare_rows(target: pathlib.Path, golden: pathlib.Path, out: pathlib.Path) -> List[Dict[str, str]]:
    """msprobe compare -tp target -gp golden, at the step folder (directory) level: its rows."""
    out.mkdir(parents=True)
    done = msprobe("compare", "-tp", str(target), "-gp", str(golden), "-o", str(out), cwd=out)
    results = sorted(out.glob("compare_result_*.csv"))
    assert results, done.stdout[-3000:] + done.stderr[-3000:]
    with open(results[0], newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def forward_names(step: pathlib.Path) -> List[str]:
    (rank,) = list(step.iterdir())
    return [n for n in json.loads((rank / "dump.json").read_text())["data"] if n.endswith(".forward")]


@pytest.mark.parametrize("risk_level", ["FOCUS", "ALL"])
def test_the_same_calls_in_the_same_order(tmp_path, risk_level):
    theirs = dump(tmp_path / "msprobe", "msprobe", risk_level=risk_level)
    ours = dump(tmp_path / "ours", "ours", risk_level=risk_level)
    assert forward_names(ours) == forward_names(theirs)
    assert [p.name.startswith("proc") for p in ours.iterdir()] == [True]


@pytest.mark.parametrize("direction", ["ours_against_theirs", "theirs_against_ours"])
def test_msprobe_compare_pairs_every_forward_row_with_equal_statistics(tmp_path, direction):
    theirs = dump(tmp_path / "msprobe", "msprobe", risk_level="ALL")
    ours = dump(tmp_path / "ours", "ours", risk_level="ALL")
    target, golden = (ours, theirs) if direction == "ours_against_theirs" else (theirs, ours)
    rows = compare_rows(target, golden, tmp_path / "compare")
    assert rows
    unmatched = [r["NPU Name"] for r in rows if r["Bench Name"] in ("N/A", "")]
    assert unmatched == [], unmatched
    for stat in ("max", "min", "mean", "l2norm"):
        differ = [(r["NPU Name"], r[f"NPU {stat}"], r[f"Bench {stat}"]) for r in rows
                  if r[f"NPU {stat}"] != r[f"Bench {stat}"]]
        assert differ == [], (stat, differ[:5])


def test_the_offline_analyzer_names_the_same_first_anomalous_call(tmp_path):
    verdicts = {}
    for tool in ("msprobe", "ours"):
        step = dump(tmp_path / tool, tool, data_mode=("all",), fault="huge_weight", risk_level="ALL")
        out = tmp_path / f"{tool}_analysis"
        done = msprobe("overflow_check", "-i", str(step), "-o", str(out), cwd=tmp_path)
        found = sorted(out.glob("anomaly_analyze_*.json"))
        assert found, done.stdout[-3000:] + done.stderr[-3000:]
        analysis = json.loads(found[0].read_text())
        verdicts[tool] = [node["op_name"] for node in analysis["rank_0"]]
    assert verdicts["ours"] == verdicts["msprobe"] == ["Functional.linear.0.forward"], verdicts
