"""msprobe 1.1.1 itself as a test peer (mindstudio-probe, pinned in requirements-torch2.txt and
imported from its installed package): it and we dump the fixture's block model in the same
environment, and msprobe's own compare reads ours against theirs and ours against ours; its
AnomalyDetector judges our overflow dump as our `check --compat` does.

msprobe 1.1.1 does not import on Debian's torch 1.13 (its monitor imports
torch.optim.optimizer.register_optimizer_step_pre_hook, a 2.x name), so these run in the
torch 2 environment only."""
import glob
import json
import pathlib
import subprocess
import sys
from typing import Any, Dict, List

import pytest
import torch

import msprobe_cpp
from testenv import FIXTURES

try:
    import msprobe  # noqa: F401
    from msprobe.core.overflow_check.checker import AnomalyDetector
    from msprobe.pytorch.compare.pt_compare import compare as msprobe_compare
    MSPROBE_ERROR = ""
except Exception as e:  # ImportError, or its own import-time failures on an older torch
    MSPROBE_ERROR = f"{type(e).__name__}: {e}"

if MSPROBE_ERROR and int(torch.__version__.split(".")[0]) < 2:
    MSPROBE_ERROR = ("msprobe 1.1.1 needs PyTorch 2.x (it imports torch.optim.optimizer's "
                     "register_optimizer_step_pre_hook); it is installed in the torch 2 environment")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MSPROBE_ERROR), reason=f"msprobe 1.1.1 is not importable here: {MSPROBE_ERROR}")]

# Records our wrap list has and msprobe 1.1.1's lacks (issue 22 makes the lists the same).
OUR_EXTRA_APIS = ("Tensor.split.", "Tensor.view.", "Tensor.to.", "Tensor.float.", "Tensor.clone.")

DUMP_WITH_MSPROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("block_model", sys.argv[1])
bm = importlib.util.module_from_spec(spec); spec.loader.exec_module(bm)
from msprobe.pytorch import PrecisionDebugger
model, opt, x, y = bm.make()
debugger = PrecisionDebugger(config_path=sys.argv[2], model=model)
for _ in range(2):
    debugger.start()
    bm.train_step(model, opt, x, y)
    debugger.stop()
    debugger.step()
"""


def config(path: pathlib.Path, task: str, dump: pathlib.Path, level: str = "L1") -> pathlib.Path:
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        section["summary_mode"] = "statistics"
    path.write_text(json.dumps({"task": task, "dump_path": str(dump), "rank": [], "step": [0], "level": level,
                                task: section}))
    return path


def dump_theirs(tmp_path: pathlib.Path, task: str) -> pathlib.Path:
    cfg = config(tmp_path / f"msprobe_{task}.json", task, tmp_path / f"theirs_{task}")
    out = subprocess.run([sys.executable, "-c", DUMP_WITH_MSPROBE, str(FIXTURES / "block_model.py"), str(cfg)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp_path / f"theirs_{task}" / "step0" / "rank"


def dump_ours(tmp_path: pathlib.Path, task: str, overflow: bool = False) -> pathlib.Path:
    import importlib.util
    spec = importlib.util.spec_from_file_location("block_model", FIXTURES / "block_model.py")
    bm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bm)
    model, opt, x, y = bm.make()
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(config(tmp_path / f"ours_{task}.json", task,
                                                                tmp_path / f"ours_{task}")), model=model)
    for _ in range(2):
        dbg.start()
        bm.train_step(model, opt, x, y)
        dbg.stop()
        dbg.step()
    return tmp_path / f"ours_{task}" / "step0" / "rank"


def compare_rows(tmp_path: pathlib.Path, npu: pathlib.Path, bench: pathlib.Path, name: str) -> List[Dict[str, Any]]:
    import pandas
    out = tmp_path / f"compare_{name}"
    msprobe_compare({"npu_json_path": str(npu / "dump.json"), "bench_json_path": str(bench / "dump.json"),
                     "stack_json_path": str(npu / "stack.json"), "is_print_compare_log": False},
                    str(out), stack_mode=False, auto_analyze=False, fuzzy_match=False)
    files = glob.glob(str(out / "compare_result*.xlsx"))
    assert len(files) == 1, files
    return pandas.read_excel(files[0]).to_dict("records")


def unmatched(rows: List[Dict[str, Any]]) -> List[str]:
    return [r["NPU Name"] for r in rows if str(r["Bench Name"]) in ("N/A", "nan")]


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_msprobes_compare_matches_every_row_of_ours_against_theirs(tmp_path, task):
    theirs = dump_theirs(tmp_path, task)
    ours = dump_ours(tmp_path, task)
    rows = compare_rows(tmp_path, ours, theirs, "ours_vs_theirs")
    assert len(rows) > 100
    assert [n for n in unmatched(rows) if not n.startswith(OUR_EXTRA_APIS)] == []
    rows = compare_rows(tmp_path, ours, ours, "ours_vs_ours")
    assert unmatched(rows) == []
    if task == "tensor":
        # Real-data compare of a dump with itself: every tensor row agrees exactly.
        cos = [r["Cosine"] for r in rows if isinstance(r.get("Cosine"), (int, float)) and r["Cosine"] == r["Cosine"]]
        assert len(cos) > 100 and all(c == pytest.approx(1.0, abs=1e-6) for c in cos)
        assert all(r["MaxAbsErr"] == 0 for r in rows if isinstance(r.get("MaxAbsErr"), (int, float)))


def test_msprobes_anomaly_detector_agrees_with_our_check(tmp_path, cli):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), action="continue")
    dbg.start(model)
    h = model(torch.randn(8, 16))
    (h * 1e38 * 1e38).sum()  # a critical multiply, then its consequences
    torch.nn.functional.softmax(torch.randn(4, 4).masked_fill(torch.eye(4, dtype=torch.bool), float("-inf")), -1)
    dbg.stop()
    dump = tmp_path / "dump" / "step0" / "rank" / "dump.json"
    data = json.loads(dump.read_text())["data"]
    detector = AnomalyDetector(data).analyze().filter()
    theirs = [(d["api_name"], d["rank"], d["scene_type"]) for d in detector.get_statistics()["anomaly_details"]]
    out = subprocess.run([str(cli), "check", str(dump), "--compat"], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    ours = [(d["api_name"], d["rank"], d["scene_type"]) for d in json.loads(out.stdout)["anomaly_details"]]
    assert sorted(ours) == sorted(theirs) and ours
    # And msprobe's own overflow dump: our check --compat against its detector.
    fixture = FIXTURES / "mlp_overflow_check_L1"
    for path in sorted(fixture.rglob("dump.json")):
        theirs = [(d["api_name"], d["rank"], d["scene_type"]) for d in
                  AnomalyDetector(json.loads(path.read_text())["data"]).analyze().filter().get_statistics()["anomaly_details"]]
        out = subprocess.run([str(cli), "check", str(path), "--compat"], capture_output=True, text=True)
        ours = [(d["api_name"], d["rank"], d["scene_type"]) for d in json.loads(out.stdout)["anomaly_details"]]
        assert sorted(ours) == sorted(theirs), path
