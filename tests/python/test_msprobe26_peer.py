"""msprobe 26.2.0 itself as a peer (mindstudio-probe, pinned in the torch 2.13 venv:
requirements-torch213.txt): one run dumped by it and by us under a config in 26.x's form, then
read by its own tools: `msprobe compare` (file and directory level, both directions, L0, L1 and
mix, forward and backward records), `msprobe overflow_check -i` and `msprobe graph_visualize`,
on a model of our own and on a Hugging Face GPT-2 (tiny, random). tools/test.sh runs these on
2.13 (`-m "not slow or msprobe26"`); where 26.2.0 is not installed they are skipped. Its other
features, one by one: tests/python/test_msprobe26_features.py."""
import csv
import json
import os
import pathlib
import sqlite3
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

from dist_runs import run_python
from msprobe_runs import msprobe_version, tool_imports
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
if sys.argv[4] == "gpt2":  # a zoo model: Hugging Face's GPT-2, tiny and random
    import transformers
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
else:
    model = Net()
if sys.argv[3] == "huge_weight":  # fc1's output overflows from clean inputs: the analyzer's case
    with torch.no_grad():
        model.fc1.weight.fill_(3e38)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = PrecisionDebugger(config_path=sys.argv[2])
for step in range(2):
    debugger.start(model)
    if sys.argv[4] == "gpt2":
        ids = torch.randint(0, 64, (2, 8))
        loss = model(input_ids=ids, labels=ids).loss
    else:
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
         model: str = "net", **top) -> pathlib.Path:
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
    done = run_python(["train.py", tool, "config.json", fault, model], cwd=folder, env=env, timeout=300,
                      preload=tool_imports(tool))
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


DUMPS: Dict[Tuple[str, str, str], Dict[str, pathlib.Path]] = {}


def dumps(tmp_path_factory, model: str, level: str, risk_level: str = "ALL") -> Dict[str, pathlib.Path]:
    """The step0 folders of one run dumped by each tool, every record (data_mode all); made once
    per module and kept for its tests."""
    key = (model, level, risk_level)
    if key not in DUMPS:
        root = tmp_path_factory.mktemp(f"{model}_{level}_{risk_level}")
        DUMPS[key] = {tool: dump(root / tool, tool, level=level, data_mode=("all",), model=model,
                                 risk_level=risk_level) for tool in ("msprobe", "ours")}
    return DUMPS[key]


def same(ours: str, theirs: str, scale: str) -> bool:
    """Equal, or within float32's rounding of a sum that cancels (a Mean of 1e-10 beside a Max of
    1e-2): 26.2.0's module hooks put autograd nodes of their own in the graph, which can change
    the order a gradient's parts are added in, at level mix."""
    if ours == theirs:
        return True
    try:
        return abs(float(ours) - float(theirs)) <= 1e-6 * abs(float(scale))
    except ValueError:
        return False


def assert_every_row_paired_with_equal_statistics(rows: List[Dict[str, str]]) -> None:
    assert rows
    unmatched = [r["NPU Name"] for r in rows if r["Bench Name"] in ("N/A", "")]
    assert unmatched == [], unmatched
    for stat in ("max", "min", "mean", "l2norm"):
        differ = [(r["NPU Name"], r[f"NPU {stat}"], r[f"Bench {stat}"]) for r in rows
                  if not same(r[f"NPU {stat}"], r[f"Bench {stat}"], r["Bench l2norm"])]
        assert differ == [], (stat, differ[:5])


@pytest.mark.parametrize("model,level", [("net", "L0"), ("net", "L1"), ("net", "mix"),
                                         ("gpt2", "L1"), ("gpt2", "mix")])
@pytest.mark.parametrize("direction", ["ours_against_theirs", "theirs_against_ours"])
def test_msprobe_compare_pairs_every_row_with_equal_statistics(tmp_path_factory, tmp_path, model, level,
                                                                direction):
    steps = dumps(tmp_path_factory, model, level)
    target, golden = ((steps["ours"], steps["msprobe"]) if direction == "ours_against_theirs"
                      else (steps["msprobe"], steps["ours"]))
    rows = compare_rows(target, golden, tmp_path / "compare")
    assert_every_row_paired_with_equal_statistics(rows)
    assert any(".backward." in r["NPU Name"] for r in rows)
    if level != "L1":
        assert any(".parameters_grad." in r["NPU Name"] for r in rows)
        assert any(".parameters.weight" in r["NPU Name"] for r in rows)


@pytest.mark.parametrize("direction", ["ours_against_theirs", "theirs_against_ours"])
def test_msprobe_compare_of_the_dump_json_files(tmp_path_factory, tmp_path, direction):
    steps = dumps(tmp_path_factory, "net", "mix")
    files = {tool: next(step.iterdir()) / "dump.json" for tool, step in steps.items()}
    target, golden = ((files["ours"], files["msprobe"]) if direction == "ours_against_theirs"
                      else (files["msprobe"], files["ours"]))
    out = tmp_path / "compare"
    out.mkdir()
    done = msprobe("compare", "-tp", str(target), "-gp", str(golden), "-o", str(out), cwd=out)
    results = sorted(out.glob("compare_result_*.csv"))
    assert results, done.stdout[-3000:] + done.stderr[-3000:]
    with open(results[0], newline="", encoding="utf-8-sig") as f:
        assert_every_row_paired_with_equal_statistics(list(csv.DictReader(f)))


@pytest.mark.parametrize("model", ["net", "gpt2"])
def test_construct_and_stack_json_name_the_same_calls_at_mix(tmp_path_factory, model):
    # 26.2.0's default risk_level: what it leaves out of dump.json, construct.json names all the same.
    steps = dumps(tmp_path_factory, model, "mix", risk_level="FOCUS")
    files = {}
    for tool, step in steps.items():
        rank = next(step.iterdir())
        stacks = json.loads((rank / "stack.json").read_text())
        # (construct.json as a mapping: 26.2.0's module hooks add autograd nodes of their own, which
        # can change when a backward is named in it; the parents are the same)
        files[tool] = (json.loads((rank / "construct.json").read_text()),
                       [group[0] for group in stacks.values()],
                       # (a module's parameters_grad record may come before or after its backward)
                       sorted(json.loads((rank / "dump.json").read_text())["data"]))
    assert files["ours"] == files["msprobe"]
    construct = files["ours"][0]
    assert "optimizer" in construct and "optimizer" in construct.values()


def graph_nodes(step: pathlib.Path, out: pathlib.Path) -> List[tuple]:
    done = msprobe("graph_visualize", "-tp", str(step), "-o", str(out), cwd=step)
    (db,) = out.glob("build_*.vis.db") or [None]
    assert db, done.stdout[-3000:] + done.stderr[-3000:]
    with sqlite3.connect(db) as con:
        return list(con.execute("select node_order, node_name, node_type, up_node, sub_nodes, precision_index, "
                                "overflow_level, input_data, output_data from tb_nodes order by node_order"))


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_graph_visualize_builds_the_same_graph(tmp_path_factory, tmp_path, level):
    steps = dumps(tmp_path_factory, "net", level)
    nodes = {tool: graph_nodes(step, tmp_path / tool) for tool, step in steps.items()}
    assert len(nodes["ours"]) > 5
    assert nodes["ours"] == nodes["msprobe"]


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
