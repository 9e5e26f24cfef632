"""msprobe 26.2.0's features, each run by 26.2.0 itself and by us on the same training script, and
the files compared (docs/config.md and docs/formats.md, "msprobe 1.1.x and 26.x"): summary_mode
xor, the structure task, level debug with PrecisionDebugger.save, statistics.tensor_list, slice,
request_id with start(scheduled_tokens), list entries "name-regex(...)" and dump_enable. Marked
as tests/python/test_msprobe26_peer.py is: tools/test.sh runs them in the torch 2.13 venv, where
26.2.0 is installed."""
import json
import os
import pathlib
import re
from typing import Any, Dict

import pytest
import torch

from dist_runs import run_python
from msprobe_runs import msprobe_version, tool_imports
from testenv import PACKAGE_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.msprobe26,
              pytest.mark.skipif(msprobe_version() != "26.2.0",
                                 reason=f"msprobe 26.2.0 is not installed here ({msprobe_version() or 'none'})")]

SCRIPT = """
import json, os, sys, time
import torch
TOOL, PLAN = sys.argv[1], json.loads(sys.argv[2])
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
        return self.fc2(h / (torch.norm(h) + 1))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
config = f"config_{TOOL}.json"
with open(config, "w") as f:
    json.dump(dict(PLAN["config"], dump_path=f"dump_{TOOL}"), f)
debugger = PrecisionDebugger(config_path=config)
for step in range(PLAN.get("steps", 2)):
    if str(step) in PLAN.get("rewrite", {}):  # dump_enable: the file changed, and its interval passed
        with open(config, "w") as f:
            json.dump(dict(PLAN["config"], dump_path=f"dump_{TOOL}", **PLAN["rewrite"][str(step)]), f)
        time.sleep(PLAN["wait"])
    tokens = PLAN.get("tokens", {}).get(str(step))
    debugger.start(model, scheduled_tokens=tokens) if tokens else debugger.start(model)
    x = torch.randn(6, 6)
    y = torch.randint(0, 3, (6,))
    out = model(x)
    if PLAN.get("save"):
        debugger.save(out, "out")
        debugger.save({"a": out * 2, "b": [out.sum(), 3, "s"]}, "nest")
        PrecisionDebugger.save(out.mean(), "mean", save_backward=False)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
"""


def normalized(value: Any, tool: str) -> Any:
    """A file's JSON with what names its own run left out: the dump folder and the process."""
    if isinstance(value, dict):
        return {k: normalized(v, tool) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v, tool) for v in value]
    if isinstance(value, str):
        return re.sub(r"proc\d+", "proc", value.replace(f"dump_{tool}", "dump"))
    return value


def files(root: pathlib.Path, tool: str) -> Dict[str, Any]:
    """Every file of the tool's dump: JSON parsed (stack.json by its call names: the frames of
    the hooks' own code differ), saved tensors loaded."""
    out: Dict[str, Any] = {}
    base = root / f"dump_{tool}"
    for path in sorted(base.rglob("*")):
        if path.is_dir():
            continue
        rel = re.sub(r"proc\d+", "proc", str(path.relative_to(base)))
        if path.name == "stack.json":
            out[rel] = [group[0] for group in json.loads(path.read_text()).values()]
        elif path.suffix == ".json":
            out[rel] = normalized(json.loads(path.read_text()), tool)
        elif path.suffix == ".pt":
            out[rel] = torch.load(path).tolist()
    return out


def both(tmp_path: pathlib.Path, plan: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The script under msprobe 26.2.0 and under us, from one folder (the same stack frames)."""
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
    out = {}
    for tool in ("msprobe", "ours"):
        done = run_python(["train.py", tool, json.dumps(plan)], cwd=tmp_path, env=env, timeout=300,
                          preload=tool_imports(tool))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out[tool] = files(tmp_path, tool)
        out[tool + "_log"] = done.stdout + done.stderr
    return out


def config(**keys: Any) -> Dict[str, Any]:
    """26.2.0's shipped config.json with `keys` over it (statistics: data_mode all, risk ALL)."""
    section = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}
    section.update(keys.pop("statistics", {}))
    doc = {"task": "statistics", "rank": [], "step": [], "level": "L1", "extra_info": True, "async_dump": False,
           "risk_level": "ALL", "statistics": section,
           "acc_check": {"white_list": [], "black_list": [], "error_data_path": "./"}}
    doc.update(keys)
    return doc


def assert_same(runs: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    theirs, ours = runs["msprobe"], runs["ours"]
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        assert ours[name] == theirs[name], name
    return ours


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_summary_mode_xor_writes_the_checksums_26_writes(tmp_path, level):
    ours = assert_same(both(tmp_path, {"config": config(level=level, statistics={"summary_mode": "xor"})}))
    data = ours["step0/proc/dump.json"]["data"]
    entry = data["Functional.linear.0.forward"]["input_args"][0]
    assert list(entry) == ["type", "dtype", "shape", "md5", "requires_grad"]
    assert re.fullmatch(r"0x[0-9a-f]{16}", entry["md5"])


@pytest.mark.parametrize("level", ["L1", "L0", "mix"])
def test_the_structure_task_writes_the_calls_names_and_places_only(tmp_path, level):
    ours = assert_same(both(tmp_path, {"config": config(task="structure", level=level, risk_level="FOCUS")}))
    dump = ours["step0/proc/dump.json"]
    assert dump["data"] == {} and dump["level"] == ("mix" if level == "L1" else level)
    assert "Module.fc1.Linear.forward.0" in ours["step0/proc/construct.json"]


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_level_debug_saves_values_and_their_gradients_in_debug_json(tmp_path, task):
    ours = assert_same(both(tmp_path, {"config": config(task=task, level="debug",
                                                        tensor={"scope": [], "list": [], "data_mode": ["all"]}),
                                       "save": True}))
    data = ours["step1/proc/debug.json"]["data"]
    assert list(data)[:4] == ["out.0.debug", "out_grad.0.debug", "nest.0.debug", "nest_grad.0.debug"]
    assert data["out_grad.0.debug"]["shape"] == [6, 3] and "mean_grad.0.debug" not in data
    assert not any(name.endswith("dump.json") for name in ours)


def test_tensor_list_saves_the_named_calls_tensors(tmp_path):
    ours = assert_same(both(tmp_path, {"config": config(statistics={"tensor_list": ["relu", "linear.0.forward"]})}))
    saved = sorted(n.split("/")[-1] for n in ours if n.startswith("step0/") and n.endswith(".pt"))
    assert "Functional.linear.0.forward.input.0.pt" in saved and "Torch.relu.0.backward.output.0.pt" in saved
    assert not any(n.startswith("Functional.linear.1") for n in saved)


def test_slice_describes_the_slice_of_each_tensor(tmp_path):
    ours = assert_same(both(tmp_path, {"config": config(
        statistics={"slice": [{"dim": 0, "begin": 1, "end": 3}, {"dim": 1, "begin": -2, "size": 8}]})}))
    data = ours["step0/proc/dump.json"]["data"]
    assert data["Torch.relu.0.forward"]["output"][0]["shape"] == [2, 2]
    assert data["Functional.linear.0.forward"]["input_args"][0]["shape"] == [2, 6]  # 6 columns, not 8


def test_request_id_describes_its_requests_rows_and_skips_steps_without_it(tmp_path):
    runs = both(tmp_path, {"config": config(statistics={"request_id": "b"}), "steps": 3,
                           "tokens": {"0": {"a": 2, "b": 3, "c": 1}, "1": {"a": 6}, "2": {"b": 4, "c": 2}}})
    ours = assert_same(runs)
    assert sorted({n.split("/")[0] for n in ours}) == ["step0", "step2"]
    assert ours["step0/proc/dump.json"]["data"]["Torch.relu.0.forward"]["output"][0]["shape"] == [3, 8]
    assert "b not found in scheduled_tokens, step 1 will not be dumped" in runs["ours_log"]


def test_name_regex_list_entries_are_matched_as_26_matches_them(tmp_path):
    runs = both(tmp_path, {"config": config(statistics={"list": ["name-regex(Functional\\.linear.*)", "relu"]})})
    ours = assert_same(runs)
    assert sorted(ours["step0/proc/dump.json"]["data"]) == ["Torch.relu.0.backward", "Torch.relu.0.forward"]
    assert "selects no call" in runs["ours_log"]


def test_dump_enable_turns_the_dump_off_and_on_as_the_file_changes(tmp_path):
    # dump_enable false after step 1 (0.5 s apart while on), true again after step 3 (3 s while off).
    plan = {"config": config(dump_enable=True), "steps": 5, "wait": 0.6,
            "rewrite": {"1": {"dump_enable": False}, "3": {"dump_enable": True}}}
    runs = both(tmp_path, dict(plan, wait=3.2))
    ours = assert_same(runs)
    assert sorted({n.split("/")[0] for n in ours}) == ["step0", "step3", "step4"]
