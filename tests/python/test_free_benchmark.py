"""Task free_benchmark (msprobe 1.1.1's checking without a baseline), forward stage.

Fast tier, both torches, in this process: rows msprobe 1.1.1 wrote for the same calls (its run under
torch 2 with gloo world 1, written down below), outside torch.distributed too (kept difference 1);
the calls that are not run again (random ops, `out=`) and their one INFO line; in-place calls run
again on a copy taken before the call; training bit-identical under `check` in every mode (device
param); fix; scope and list; preheat's step 0; the config's errors; the on-line message; no
dump.json. "Kept difference N" is the N-th of docs/decisions.md's free_benchmark list.

Slow tier: msprobe 1.1.1 itself as the peer (torch 2; free_benchmark_worker.py, one process per run
through dist_runs.run_ranks, gloo world 1): the same CSV byte for byte in all six modes, with scope,
list, a step list and preheat; on small models trained a few steps, our flagged calls a subset of
msprobe's, the rest explained by the calls it runs again and we do not; real models trained
bit-identically under the task."""
import json
import logging
import pathlib
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dist_runs import Run, run_ranks
from peer_process import PEER_IMPORTS
from msprobe_runs import needs_msprobe
from gloo import needs_gloo
from testenv import TESTS, devices

WORKER = TESTS / "free_benchmark_worker.py"
MODES = ["improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu"]
HEADER = "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index"
# The statistics path ("cpu-generic") is not free_benchmark's business.
DEVICES = [d for d in devices() if d != "cpu-generic"]
# Our lines of msprobe's random ops, collectives and out= calls (kept difference 2).
RANDOM_SKIP = "a random op: a second run would draw other numbers"
OUT_SKIP = "it writes into its out= argument, which a second run would overwrite"
COLLECTIVE_SKIP = "a collective: a second run would wait for the other ranks, which make it once"
# The random ops our second run leaves alone (core/free_benchmark_rules.cpp, skip_reason).
RANDOM_OPS = {"dropout", "dropout_", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d",
              "rrelu", "rrelu_", "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "poisson", "rand",
              "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm", "uniform_", "exponential_",
              "geometric_", "cauchy_", "log_normal_", "random_", "gumbel_softmax", "native_dropout",
              "fused_dropout", "feature_dropout"}


# --- helpers ---------------------------------------------------------------------------------------

def section_for(mode: str, **section: Any) -> Dict[str, Any]:
    return {"pert_mode": mode, "fuzz_device": "cpu" if mode == "to_cpu" else "npu", **section}


def write_config(tmp_path: pathlib.Path, mode: str = "improve_precision", top: Optional[Dict[str, Any]] = None,
                 name: str = "config.json", **section: Any) -> pathlib.Path:
    cfg = {"task": "free_benchmark", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L1",
           **(top or {}), "free_benchmark": section_for(mode, **section)}
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def debugger(tmp_path: pathlib.Path, mode: str = "improve_precision", **kw: Any) -> msprobe_cpp.PrecisionDebugger:
    return msprobe_cpp.PrecisionDebugger(config_path=str(write_config(tmp_path, mode, **kw)))


def csv_rows(dump: pathlib.Path) -> List[str]:
    """The rows of dump/free_benchmark.csv (header checked, CRLF line ends); [] without the file."""
    path = dump / "free_benchmark.csv"
    if not path.exists():
        return []
    text = path.read_bytes().decode("utf-8")
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", ""), repr(text[:200])
    lines = text.split("\r\n")[:-1]
    assert lines[0] == HEADER
    return lines[1:]


def api_of(row: str) -> str:
    return row.split(",")[4]


def op_of(api_name: str) -> str:
    """"Tensor.add_.3.forward" -> "add_"; "Torch.linalg.norm.0.forward" -> "linalg.norm"."""
    return api_name.rsplit(".", 2)[0].split(".", 1)[1]


def in_place(api_name: str) -> bool:
    op = op_of(api_name)
    return (op.endswith("_") and not op.startswith("__")) or (op.startswith("__i") and op.endswith("__")) \
        or op == "__setitem__"


def random_op(api_name: str) -> bool:
    return op_of(api_name) in RANDOM_OPS


def skip_lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.startswith("msprobe_cpp: free_benchmark: ")
            and " is not checked: " in line]


def files_under(folder: pathlib.Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def run_steps(dbg: msprobe_cpp.PrecisionDebugger, body: Any, steps: int = 1) -> List[Any]:
    out = []
    for i in range(steps):
        dbg.start()
        out.append(body(i))
        dbg.stop()
        dbg.step()
    return out


# --- fast: msprobe's rows, without torch.distributed ----------------------------------------------

def known_calls() -> torch.Tensor:
    b, h = torch.bfloat16, torch.float16
    torch.mul(torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=b), 1.0)
    torch.max(torch.tensor([[1, 5, 2], [3, 1, 4]], dtype=b), dim=1)  # a tuple: values, int64 indices
    torch.add(torch.empty(0, dtype=b), 1.0)  # an empty output
    overflowed = torch.mul(torch.tensor([[60000.0, 1], [2, 3]], dtype=h), 2.0)  # float16 inf, float32 finite
    torch.sort(torch.tensor([3.0, 1.0, 2.0, 5.0], dtype=b))
    torch.add(torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=b), torch.tensor([[0.5]], dtype=b))
    torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=b).__mul__(2.0)
    torch.add(torch.arange(4), 1)  # integers: never run again
    return overflowed


# What msprobe 1.1.1 wrote for known_calls() (torch 2.13 CPU, gloo world 1).
MSPROBES_ROWS = {
    "change_value": ['0,change_value,forward,0,Torch.mul.0.forward,5.0,torch.bfloat16,"torch.Size([2, 3])",',
                     "0,change_value,forward,0,Torch.max.0.forward,0.3359375,torch.bfloat16,torch.Size([2]),0",
                     "0,change_value,forward,0,Torch.add.0.forward,-inf,torch.bfloat16,torch.Size([0]),",
                     '0,change_value,forward,0,Torch.add.1.forward,3.34375,torch.bfloat16,"torch.Size([2, 3])",',
                     "0,change_value,forward,0,Tensor.__mul__.0.forward,3.0,torch.bfloat16,torch.Size([4]),"],
    "bit_noise": ['0,bit_noise,forward,0,Torch.mul.0.forward,0.0078125,torch.bfloat16,"torch.Size([2, 3])",',
                  "0,bit_noise,forward,0,Torch.max.0.forward,0.0078125,torch.bfloat16,torch.Size([2]),0",
                  "0,bit_noise,forward,0,Torch.add.0.forward,-inf,torch.bfloat16,torch.Size([0]),",
                  "0,bit_noise,forward,0,Torch.sort.0.forward,0.0078125,torch.bfloat16,torch.Size([4]),0",
                  '0,bit_noise,forward,0,Torch.add.1.forward,0.0078125,torch.bfloat16,"torch.Size([2, 3])",',
                  "0,bit_noise,forward,0,Tensor.__mul__.0.forward,0.0078125,torch.bfloat16,torch.Size([4]),"],
    "add_noise": ["0,add_noise,forward,0,Torch.add.0.forward,-inf,torch.bfloat16,torch.Size([0]),"],
    "improve_precision": ["0,improve_precision,forward,0,Torch.add.0.forward,-inf,torch.bfloat16,torch.Size([0]),"],
    "to_cpu": ['0,to_cpu,forward,0,Torch.mul.1.forward,,torch.float16,"torch.Size([2, 2])",'],
    "no_change": ["0,no_change,forward,0,Torch.add.0.forward,-inf,torch.bfloat16,torch.Size([0]),"],
}


@pytest.mark.parametrize("mode", MODES)
def test_rows_are_msprobes_outside_torch_distributed_too(tmp_path, mode):
    """Kept difference 1: msprobe writes these rows only under torch.distributed (outside it,
    torch 2's get_rank raises ValueError, which it does not catch); we write them as rank 0."""
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    dbg = debugger(tmp_path, mode)
    overflowed = run_steps(dbg, lambda i: known_calls())[0]
    dbg._release()
    assert csv_rows(tmp_path / "dump") == MSPROBES_ROWS[mode]
    # Kept difference 4: to_cpu's comparison leaves the real output alone (msprobe writes 1 over its inf).
    assert torch.isinf(overflowed[0, 0]) and overflowed.dtype == torch.float16


def test_rows_are_appended_step_after_step_and_run_after_run(tmp_path):
    dbg = debugger(tmp_path, "change_value")
    run_steps(dbg, lambda i: torch.mul(torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=torch.bfloat16), 1.0), 3)
    dbg._release()
    row = '0,change_value,forward,{},Torch.mul.0.forward,5.0,torch.bfloat16,"torch.Size([2, 3])",'
    assert csv_rows(tmp_path / "dump") == [row.format(s) for s in range(3)]
    dbg = debugger(tmp_path, "change_value", name="again.json")  # the same dump_path: appended, one header
    run_steps(dbg, lambda i: torch.mul(torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=torch.bfloat16), 1.0))
    dbg._release()
    assert csv_rows(tmp_path / "dump") == [row.format(s) for s in (0, 1, 2, 0)]


def test_the_checker_is_the_sessions_and_goes_with_it(tmp_path):
    """Issue 54: the checker lived in a global slot of its own, beside the session, set and cleared
    by Python. It is the session's now: a debugger of another task that replaces it records the
    calls, and no row is written after that."""
    (tmp_path / "fb").mkdir()
    checking = debugger(tmp_path / "fb", "change_value")
    run_steps(checking, lambda i: known_calls())
    rows = csv_rows(tmp_path / "fb" / "dump")
    assert rows, "the free_benchmark debugger checked nothing"
    recording = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "stats"), level="L1")
    run_steps(recording, lambda i: known_calls())
    recording._release()
    assert csv_rows(tmp_path / "fb" / "dump") == rows
    data = json.loads((tmp_path / "stats" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Torch.mul.0.forward" in data


def test_each_task_registers_one_processor_that_the_session_makes(tmp_path):
    """Issue 54: free_benchmark and grad_probe are processors the session makes from one table of
    registrations (task_registry.cpp), not objects Python makes beside it; a recording task has
    none, and no processor can be made from Python."""
    from msprobe_cpp import _C
    kinds = {}
    for task in ("free_benchmark", "grad_probe", "statistics", "overflow_check"):
        dbg = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(tmp_path / task), level="L1")
        kinds[task] = type(dbg._session.task_processor).__name__
        dbg._release()
    assert kinds == {"free_benchmark": "FreeBenchmark", "grad_probe": "GradMonitor",
                     "statistics": "NoneType", "overflow_check": "NoneType"}
    with pytest.raises(TypeError):
        _C.FreeBenchmark()
    assert not hasattr(_C, "set_current_free_benchmark")


def test_a_list_entry_that_matched_no_call_is_said_as_free_benchmarks(tmp_path, capfd):
    """The session's selection is free_benchmark's: what it says of an entry that chose nothing
    names the free_benchmark section."""
    dbg = debugger(tmp_path, "change_value", list=["mul", "no_such_api"])
    run_steps(dbg, lambda i: known_calls())
    dbg._release()
    said = [line for line in capfd.readouterr().err.splitlines() if "matched no call" in line]
    assert len(said) == 1 and 'free_benchmark.list[1] "no_such_api" matched no call' in said[0], said
    assert csv_rows(tmp_path / "dump")


def test_the_step_list_and_the_window_choose_the_calls(tmp_path):
    dbg = debugger(tmp_path, "change_value", top={"step": [1, 3]})

    def body(i: int) -> None:
        torch.mul(torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=torch.bfloat16), 1.0)

    for i in range(5):
        body(i)  # before start(): not checked, not counted
        dbg.start()
        body(i)
        dbg.stop()
        body(i)
        dbg.step()
    dbg._release()
    assert [r.split(",")[3:5] for r in csv_rows(tmp_path / "dump")] == [["1", "Torch.mul.0.forward"],
                                                                      ["3", "Torch.mul.0.forward"]]


def test_a_rank_list_without_rank_0_checks_nothing_outside_torch_distributed(tmp_path):
    dbg = debugger(tmp_path, "change_value", top={"rank": [1]})
    run_steps(dbg, lambda i: known_calls())
    dbg._release()
    assert not (tmp_path / "dump").exists()


def test_scope_names_whole_calls_and_list_parts_of_names(tmp_path):
    b = torch.bfloat16

    def body(i: int) -> None:
        t = torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=b)
        torch.mul(t, 1.0)
        torch.mul(t, 1.0)
        t * 1.0  # Tensor.__mul__
        torch.add(t, 0.0)

    names = {}
    for what, section in [("scope", {"scope": ["Torch.mul.1.forward", "Torch.add.0.forward"]}),
                          ("scope_string", {"scope": "Torch.mul.1.forward"}),
                          ("list", {"list": ["mul"]}), ("list_upper", {"list": ["Tensor."]}),
                          ("scope_prefix", {"scope": ["Torch.mul"]}), ("all", {})]:
        dbg = debugger(tmp_path, "change_value", name=f"{what}.json", top={"dump_path": str(tmp_path / what)},
                       **section)
        run_steps(dbg, body)
        dbg._release()
        names[what] = [api_of(r) for r in csv_rows(tmp_path / what)]
    assert names["scope"] == ["Torch.mul.1.forward", "Torch.add.0.forward"]
    assert names["scope_string"] == ["Torch.mul.1.forward"]
    assert names["list"] == ["Torch.mul.0.forward", "Torch.mul.1.forward", "Tensor.__mul__.0.forward"]
    assert names["list_upper"] == ["Tensor.__mul__.0.forward"]
    assert names["scope_prefix"] == []  # a scope name is a whole call name
    assert names["all"] == ["Torch.mul.0.forward", "Torch.mul.1.forward", "Tensor.__mul__.0.forward",
                            "Torch.add.0.forward"]


def test_preheat_compares_nothing_in_step_0(tmp_path):
    """Step 0 only counts the calls; from step 1 on, rows against thresholds that start at 2.05."""
    dbg = debugger(tmp_path, "change_value", if_preheat=True, preheat_step=2, max_sample=2)
    run_steps(dbg, lambda i: known_calls(), 3)
    dbg._release()
    rows = csv_rows(tmp_path / "dump")
    assert rows and {r.split(",")[3] for r in rows} == {"1", "2"}
    # Against 2.05 in step 1: Torch.mul's ratio 6.0 is a row, Torch.max's 1.3359375 is not (it is
    # without preheat: 1.004).
    assert '0,change_value,forward,1,Torch.mul.0.forward,5.0,torch.bfloat16,"torch.Size([2, 3])",' in rows
    assert not any(",Torch.max.0.forward," in r for r in rows if r.split(",")[3] == "1")


def test_change_value_of_a_tensor_with_no_rows_is_not_an_error(tmp_path):
    """Kept difference 5: msprobe's change_value raises IndexError into the program for a [0, k]
    tensor; we leave it unchanged, and the empty output is the usual -inf row."""
    dbg = debugger(tmp_path, "change_value")
    out = run_steps(dbg, lambda i: torch.mul(torch.empty(0, 3), 2.0))[0]
    dbg._release()
    assert out.shape == (0, 3)
    assert csv_rows(tmp_path / "dump") == ['0,change_value,forward,0,Torch.mul.0.forward,-inf,torch.float32,'
                                           '"torch.Size([0, 3])",']


# --- fast: what the second run must not do ---------------------------------------------------------

def in_place_calls(device: str) -> List[torch.Tensor]:
    x = torch.ones(4, device=device)
    x.add_(torch.ones(4, device=device))
    y = torch.full((4,), 3.0, device=device)
    y += torch.full((4,), 0.5, device=device)
    z = torch.tensor([-1.0, 2.0, -3.0, 4.0], device=device)
    F.relu(z, inplace=True)
    w = torch.arange(6.0, device=device).reshape(2, 3)
    w[w > 2] = 7.0
    v = torch.linspace(1, 2, 5, device=device)
    twice = torch.mul(v, 3.0)  # out of place, on what v.mul_ is given next
    v.mul_(3.0).sub_(1.0)
    return [x, y, z, w, v, twice]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_an_in_place_call_writes_once_and_is_compared_on_what_it_was_given(tmp_path, device, mode):
    """Kept difference 3: the second run of x.add_(y) works on a copy of x taken before the call.
    msprobe runs it on the already-added x (no_change: x added twice; other modes: a false row
    max_rel 0.5 for every add_). So v.mul_(3.0) is judged as torch.mul(v, 3.0) is."""
    want = in_place_calls(device)
    dbg = debugger(tmp_path, mode)
    got = run_steps(dbg, lambda i: in_place_calls(device))[0]
    dbg._release()
    for a, b in zip(got, want):
        assert torch.equal(a, b), (a, b)
    assert [float(v) for v in got[0]] == [2.0] * 4 and [float(v) for v in got[1]] == [3.5] * 4
    rows = csv_rows(tmp_path / "dump")
    judged = {api_of(r): r.split(",", 5)[5] for r in rows}
    assert judged.get("Tensor.mul_.0.forward") == judged.get("Torch.mul.0.forward")
    if mode == "change_value":  # the first and last of v swapped: flagged, in place or not
        assert "Tensor.mul_.0.forward" in judged
    # Constant tensors: no perturbation can tell the two runs apart.
    assert [n for n in judged if n.startswith(("Tensor.add_.", "Tensor.__iadd__."))] == []


def random_calls(device: str, dtype: torch.dtype = torch.float32) -> List[float]:
    x = torch.ones(64, device=device, dtype=dtype)
    F.dropout(x, 0.5)
    F.dropout(x, 0.5)
    torch.bernoulli(torch.full((16,), 0.5, device=device, dtype=dtype))
    torch.normal(torch.zeros(8, device=device, dtype=dtype), 1.0)
    return torch.rand(8, device=device).tolist() + torch.randn(3).tolist()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_a_random_op_is_not_run_again_and_the_generator_goes_on_as_without_the_tool(tmp_path, capfd, device, mode):
    """Kept difference 2: msprobe runs dropout again, drawing twice, so the training after it
    draws other numbers. bfloat16 for improve_precision, which looks no further at a call it has
    nothing to upcast in."""
    dtype = torch.bfloat16 if mode == "improve_precision" else torch.float32
    torch.manual_seed(7)
    want = [random_calls(device, dtype) for _ in range(2)]
    capfd.readouterr()
    dbg = debugger(tmp_path, mode)
    torch.manual_seed(7)
    got = run_steps(dbg, lambda i: random_calls(device, dtype), 2)
    dbg._release()
    assert got == want
    assert skip_lines(capfd.readouterr().err) == [
        f"msprobe_cpp: free_benchmark: Functional.dropout is not checked: {RANDOM_SKIP}",
        f"msprobe_cpp: free_benchmark: Torch.bernoulli is not checked: {RANDOM_SKIP}",
        f"msprobe_cpp: free_benchmark: Torch.normal is not checked: {RANDOM_SKIP}"]
    assert [r for r in csv_rows(tmp_path / "dump") if random_op(api_of(r))] == []


def test_improve_precision_says_nothing_of_a_float32_random_op(tmp_path, capfd):
    """Nothing to upcast: the call is not looked at further, so there is nothing to skip."""
    capfd.readouterr()
    dbg = debugger(tmp_path, "improve_precision")
    run_steps(dbg, lambda i: random_calls("cpu"))
    dbg._release()
    assert skip_lines(capfd.readouterr().err) == []


def test_the_skip_lines_are_info_on_the_msprobe_cpp_logger(tmp_path):
    records: List[Tuple[int, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append((record.levelno, record.getMessage()))

    logger = logging.getLogger("msprobe_cpp")
    handler = Keep()
    logger.addHandler(handler)
    try:
        dbg = debugger(tmp_path, "add_noise")
        run_steps(dbg, lambda i: F.dropout(torch.ones(8), 0.5), 2)
        dbg._release()
    finally:
        logger.removeHandler(handler)
    said = [(level, text) for level, text in records if text.startswith("msprobe_cpp: free_benchmark: ")]
    assert said == [(logging.INFO, f"msprobe_cpp: free_benchmark: Functional.dropout is not checked: {RANDOM_SKIP}")]


def test_a_call_with_out_is_not_run_again(tmp_path, capfd):
    a, b = torch.tensor([1.0, 2.0], dtype=torch.bfloat16), torch.tensor([3.0, 4.0], dtype=torch.bfloat16)
    out = torch.empty(2, dtype=torch.bfloat16)
    capfd.readouterr()
    dbg = debugger(tmp_path, "change_value")
    got = run_steps(dbg, lambda i: torch.add(a, b, out=out))[0]
    torch.add(a, b, out=out)
    dbg._release()
    assert got is out and out.tolist() == [4.0, 6.0]
    assert skip_lines(capfd.readouterr().err) == [f"msprobe_cpp: free_benchmark: Torch.add is not checked: {OUT_SKIP}"]
    assert not (tmp_path / "dump").exists()


class Tricky(nn.Module):
    """What a second run could disturb: a dropout and a bernoulli draw (the global generator),
    ReLU(inplace=True), add_ and += on activations, a causal mask (-inf before a softmax), item
    assignment through a bool mask, a bfloat16 branch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.3)
        self.query = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 4)
        self.b16 = nn.Parameter(torch.randn(16).bfloat16())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = self.drop(h)
        h.add_(0.125)
        h += torch.full_like(h, 0.0625)
        scores = self.query(h).unsqueeze(2) * h.unsqueeze(1)  # [B, 16, 16]
        causal = torch.ones(16, 16, device=x.device).tril().bool()
        p = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        h = torch.bmm(p, h.unsqueeze(2)).squeeze(2)
        h = h + (h.detach().bfloat16() * self.b16).float()
        h[h.abs() < 1e-2] = 0.0
        h = h * (1 + 0.01 * torch.bernoulli(torch.full_like(h, 0.5)))
        return self.fc2(h)


def train_tricky(device: str, dbg: Any = None, steps: int = 3) -> Tuple[List[str], Dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Tricky().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 8, generator=g).to(device), torch.randint(0, 4, (6,), generator=g).to(device))
            for _ in range(steps)]
    torch.manual_seed(2)
    losses = []
    for x, y in data:
        if dbg is not None:
            dbg.start(model)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.item().hex())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_check_never_alters_training(tmp_path, device, mode):
    losses0, state0 = train_tricky(device)
    dbg = debugger(tmp_path, mode)
    losses, state = train_tricky(device, dbg)
    dbg._release()
    assert losses == losses0
    assert state.keys() == state0.keys()
    differ = [k for k in state if not (state[k].dtype == state0[k].dtype and torch.equal(state[k], state0[k]))]
    assert not differ, f"not bit-identical: {differ}"
    if mode == "no_change":  # every second run, in-place ones included, gives the first's bits
        assert csv_rows(tmp_path / "dump") == []


# Found by the zoo (resnet18): F.batch_norm in training mode updates running_mean and running_var,
# its 2nd and 3rd arguments, in place; the second run gets copies of them.
@pytest.mark.parametrize("mode", [m for m in MODES if m != "improve_precision"])  # float32: no second run
def test_batch_norm_running_statistics_are_updated_once(tmp_path, mode):
    def run(dbg: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
        bn = nn.BatchNorm1d(3)
        x = torch.arange(12.0).reshape(4, 3)
        if dbg is not None:
            dbg.start()
        bn(x)
        if dbg is not None:
            dbg.stop()
            dbg.step()
        return bn.running_mean.clone(), bn.running_var.clone()

    mean0, var0 = run()
    dbg = debugger(tmp_path, mode)
    mean, var = run(dbg)
    dbg._release()
    assert torch.equal(mean, mean0) and torch.equal(var, var0), (mean, mean0)


@pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"), reason="torch 2's")
def test_attention_with_dropout_is_a_random_op(tmp_path, capfd):
    """What Hugging Face's models call in training (attention_dropout > 0): no_change flags it,
    in every zoo model that has it."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))
    dbg = debugger(tmp_path, "no_change")
    run_steps(dbg, lambda i: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5))
    dbg._release()
    assert csv_rows(tmp_path / "dump") == []


# --- fast: fix --------------------------------------------------------------------------------------

FIX_LINE = ("msprobe_cpp: free_benchmark: fix: {api}'s outputs are those of its {mode} run, cast back to their "
            "dtype and device: the training differs from an unfixed run by design")


@pytest.mark.parametrize("mode", ["improve_precision", "to_cpu"])
@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_fix_puts_the_float32_result_cast_back_in_place(tmp_path, capfd, device, mode):
    """A float16 power computed in float16 differs from the float32 one rounded to float16 (both
    torches' CPU kernels); fix hands the program the latter, in the same tensor object, whose
    backward still follows the float16 graph."""
    g = torch.Generator().manual_seed(3)
    base = (torch.rand(64, generator=g) + 1.0).half().to(device)
    plain = torch.pow(base, 2.7)
    reference = torch.pow(base.float(), 2.7).half()
    if device == "cpu":
        assert not torch.equal(plain, reference)  # else the test could not tell the runs apart
    capfd.readouterr()
    dbg = debugger(tmp_path, mode, handler_type="fix")
    x = base.clone().requires_grad_(True)
    got = run_steps(dbg, lambda i: [torch.pow(x, 2.7), torch.pow(x, 2.7), torch.sum(torch.ones(3))], 2)
    dbg._release()
    for first, second, s in got:
        for out in (first, second):
            assert out.dtype == torch.float16 and out.device == base.device
            assert torch.equal(out, reference)
            assert out.grad_fn is not None and "Pow" in type(out.grad_fn).__name__
        assert s.item() == 3.0  # float32: nothing to upcast, left as it is
    got[0][0].float().sum().backward()
    assert torch.equal(x.grad, (2.7 * torch.pow(base, 1.7)).half())  # the float16 graph's gradient
    said = [line for line in capfd.readouterr().err.splitlines() if "free_benchmark: fix:" in line]
    # to_cpu runs the float32 sum again too (on the CPU): its output is replaced by equal numbers.
    assert said == [FIX_LINE.format(api=api, mode=mode) for api in ["Torch.pow", "Torch.sum"][:2 if mode == "to_cpu" else 1]]
    assert not (tmp_path / "dump").exists()  # fix writes no rows


class Pow16(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter((torch.rand(64) * 0.5 + 1.0).half())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.pow(self.w * x, 2.7).float().mean()


def train_pow16(dbg: Any = None) -> List[str]:
    torch.manual_seed(0)
    model = Pow16()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        x = (torch.rand(64, generator=g) + 1.0).half()
        if dbg is not None:
            dbg.start()
        optimizer.zero_grad()
        loss = model(x)
        loss.backward()
        optimizer.step()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.item().hex())
    return losses


@pytest.mark.parametrize("mode", ["improve_precision", "to_cpu"])
def test_fix_changes_the_training_and_check_does_not(tmp_path, mode):
    plain = train_pow16()
    dbg = debugger(tmp_path, mode, name="check.json")
    assert train_pow16(dbg) == plain
    dbg._release()
    dbg = debugger(tmp_path, mode, handler_type="fix", name="fix.json")
    fixed = train_pow16(dbg)
    dbg._release()
    assert fixed != plain


# --- fast: config -----------------------------------------------------------------------------------

BAD = [
    ({"pert_mode": "shuffle"}, {}, 'free_benchmark.pert_mode: expected one of improve_precision, add_noise, '
                                   'bit_noise, change_value, no_change, to_cpu, got "shuffle"'),
    ({"pert_mode": None}, {}, "free_benchmark.pert_mode: expected one of improve_precision, add_noise, "
                              "bit_noise, change_value, no_change, to_cpu, got null"),
    ({"pert_mode": "to_cpu"}, {}, 'free_benchmark.fuzz_device: expected "cpu" with pert_mode to_cpu, got "npu"'),
    ({"fuzz_device": "cpu"}, {},
     'free_benchmark.fuzz_device: expected "npu" ("cpu" goes with pert_mode to_cpu only), got "cpu"'),
    ({"fuzz_device": "gpu"}, {}, 'free_benchmark.fuzz_device: expected one of npu, cpu, got "gpu"'),
    ({"handler_type": "fix", "pert_mode": "add_noise"}, {},
     'free_benchmark.pert_mode: expected improve_precision or to_cpu with handler_type fix, got "add_noise"'),
    ({"handler_type": "fix", "fuzz_stage": "backward"}, {},
     'free_benchmark.fuzz_stage: expected "forward" with handler_type fix, got "backward"'),
    ({"handler_type": "fix", "if_preheat": True}, {},
     "free_benchmark.if_preheat: expected false with handler_type fix (no preheat), got true"),
    ({"handler_type": "preheat"}, {}, 'free_benchmark.handler_type: expected one of check, fix, got "preheat"'),
    ({"fuzz_level": "L2"}, {}, 'free_benchmark.fuzz_level: expected one of L1, got "L2"'),
    ({"fuzz_stage": "both"}, {}, 'free_benchmark.fuzz_stage: expected one of forward, backward, got "both"'),
    ({"if_preheat": "yes"}, {}, 'free_benchmark.if_preheat: expected true or false, got "yes"'),
    ({"if_preheat": True, "preheat_step": 0}, {}, "free_benchmark.preheat_step: expected an integer > 0, got 0"),
    ({"if_preheat": True, "preheat_step": 2.5}, {}, "free_benchmark.preheat_step: expected an integer > 0, got 2.5"),
    ({"if_preheat": True, "max_sample": "3"}, {}, 'free_benchmark.max_sample: expected an integer > 0, got "3"'),
    ({"if_preheat": True, "max_sample": True}, {}, "free_benchmark.max_sample: expected an integer > 0, got true"),
    ({"scope": ["Torch.add.0.forward"], "list": ["add"]}, {},
     'free_benchmark.list: expected [] when scope is given (msprobe takes one or the other), got ["add"]'),
    ({"scope": 3}, {}, "free_benchmark.scope: expected a call name or a list of call names, got 3"),
    ({"scope": [3]}, {}, "free_benchmark.scope[0]: expected a non-empty string, got 3"),
    ({"list": "add"}, {}, 'free_benchmark.list: expected a list of non-empty strings, got "add"'),
    ({"list": [1]}, {}, "free_benchmark.list[0]: expected a non-empty string, got 1"),
    ({"pert_mod": "add_noise"}, {}, 'free_benchmark.pert_mod: unknown key; did you mean "pert_mode"?'),
    ({}, {"level": "mix"}, 'level: expected "L1" with task free_benchmark (it checks API calls), got "mix"'),
    ({}, {"level": "L0"}, 'level: expected "L1" with task free_benchmark (it checks API calls), got "L0"'),
    ("x", {}, 'free_benchmark: expected an object, got "x"'),
]


@pytest.mark.parametrize("section,top,message", BAD, ids=[m.split(":")[0] + f"-{i}" for i, (_, _, m) in enumerate(BAD)])
def test_a_bad_free_benchmark_config_is_one_line_and_leaves_nothing(tmp_path, section, top, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "free_benchmark", "dump_path": str(tmp_path / "dump"), **top,
                                "free_benchmark": section}))
    with pytest.raises(msprobe_cpp.ConfigError) as e:
        msprobe_cpp.PrecisionDebugger(config_path=str(path))
    assert str(e.value) == f"{path}: {message}"
    assert msprobe_cpp.PrecisionDebugger._instance is None
    known_calls()
    assert not (tmp_path / "dump").exists()


def test_what_msprobe_checks_only_with_preheat_passes_without_it(tmp_path):
    """msprobe reads preheat_step and max_sample only when if_preheat is true; its BaseConfig keys
    pass too."""
    dbg = debugger(tmp_path, "change_value", if_preheat=False, preheat_step=0, max_sample=-1, data_mode=["all"],
                   file_format="npy", summary_mode="statistics", overflow_nums=1, check_mode="all")
    run_steps(dbg, lambda i: known_calls())
    dbg._release()
    assert csv_rows(tmp_path / "dump") == MSPROBES_ROWS["change_value"]


def test_run_ut_is_the_one_msprobe_task_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "run_ut", "dump_path": str(tmp_path / "dump")}))
    with pytest.raises(msprobe_cpp.ConfigError) as e:
        msprobe_cpp.PrecisionDebugger(config_path=str(path))
    assert str(e.value) == (f'{path}: task: "run_ut" is an msprobe task that msprobe_cpp does not support; '
                            "supported: statistics, tensor, overflow_check, grad_probe, free_benchmark, structure")


def test_defaults_are_improve_precision_check_forward(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "free_benchmark", "dump_path": str(tmp_path / "dump")}))
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    run_steps(dbg, lambda i: known_calls())
    dbg._release()
    assert csv_rows(tmp_path / "dump") == MSPROBES_ROWS["improve_precision"]


def test_the_on_line_names_the_csv_and_nothing_but_the_csv_is_written(tmp_path, capfd):
    """Kept difference 6: msprobe also writes an empty dump.json, stack.json and construct.json in
    step<N>/rank<R>/ at every step."""
    capfd.readouterr()
    dbg = debugger(tmp_path, "change_value")
    run_steps(dbg, lambda i: known_calls(), 2)
    dbg._release()
    err = capfd.readouterr().err
    on = [line for line in err.splitlines() if line.startswith("msprobe_cpp: on: ")]
    assert len(on) == 1, err
    assert re.fullmatch(r"msprobe_cpp: on: task free_benchmark, level L1; [1-9][0-9]{2,} torch APIs hooked; "
                        r"inconsistent calls are written to " + re.escape(str(tmp_path / "dump" / "free_benchmark.csv")),
                        on[0]), on[0]
    assert files_under(tmp_path / "dump") == ["free_benchmark.csv"]


# --- slow: msprobe 1.1.1 itself as the peer --------------------------------------------------------

_PEER_RUNS: Dict[str, Run] = {}


def peer_run(tmp_path_factory: Any, tool: str, case: str, mode: str, steps: int = 2,
             section: Optional[Dict[str, Any]] = None, top: Optional[Dict[str, Any]] = None,
             dist: bool = True, world: int = 1) -> Run:
    """One free_benchmark_worker.py run, a process per rank (cached per module): its Run, the CSV
    under OUT/dump."""
    key = json.dumps([tool, case, mode, steps, section, top, dist, world], sort_keys=True)
    if key not in _PEER_RUNS:
        out = tmp_path_factory.mktemp(f"{tool}_{case}_{mode}")
        path = out / "config.json"
        path.write_text(json.dumps({"task": "free_benchmark", "dump_path": str(out / "dump"), "rank": [],
                                    "step": [], "level": "L1", **(top or {}),
                                    "free_benchmark": section_for(mode, **(section or {}))}))
        args = ["--tool", tool, "--config", str(path), "--case", case, "--steps", str(steps)]
        run = run_ranks(out, world, args + (["--dist"] if dist else []), worker=WORKER, timeout=300,
                        preload=PEER_IMPORTS.get(tool, ()))
        assert run.returncodes == [0] * world, run.context()
        _PEER_RUNS[key] = run
    return _PEER_RUNS[key]


def csv_bytes(run: Run) -> Optional[bytes]:
    path = run.out / "dump" / "free_benchmark.csv"
    return path.read_bytes() if path.exists() else None


def assert_same_csv(ours: Run, theirs: Run) -> List[str]:
    a, b = csv_bytes(ours), csv_bytes(theirs)
    assert b is not None, theirs.context()
    assert a is not None, ours.context()
    assert a.decode().splitlines() == b.decode().splitlines()
    assert a == b
    return csv_rows(ours.out / "dump")


def outputs(run: Run) -> List[bytes]:
    """The bits of each output tensor of the calls case, as the program got them."""
    return [bytes(t.reshape(-1).view(torch.uint8).tolist()) + str((t.dtype, tuple(t.shape))).encode()
            for t in torch.load(run.out / "outputs_rank0.pt")]


@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("mode", MODES)
def test_rows_are_msprobes_byte_for_byte(tmp_path_factory, mode):
    """Deterministic CPU calls, two steps: float16 sums of many small values, large minus large,
    a float16 product, float16 and bfloat16 matmuls and normalizations, tuples with int indices,
    an empty output, a float16 overflow float32 does not have (to_cpu). The program gets the
    outputs it gets without a tool; from msprobe too, but for to_cpu's 1 over the inf (kept
    difference 4)."""
    ours = peer_run(tmp_path_factory, "ours", "calls", mode)
    theirs = peer_run(tmp_path_factory, "msprobe", "calls", mode)
    rows = assert_same_csv(ours, theirs)
    assert {r.split(",")[3] for r in rows} == {"0", "1"}
    names = {api_of(r) for r in rows}
    assert "Torch.add.0.forward" in names or mode == "to_cpu"  # the empty output: -inf
    if mode == "improve_precision":
        assert "Torch.prod.0.forward" in names  # float16's product drifts past 1.002
    if mode == "to_cpu":
        assert '0,to_cpu,forward,0,Torch.exp.1.forward,,torch.float16,"torch.Size([2, 2])",' in rows
        assert "0,to_cpu,forward,0,Torch.var_mean.0.forward,,,," in rows
    if mode == "change_value":
        assert any(",Torch.max.0.forward," in r and r.endswith(",0") for r in rows)
    bare = outputs(peer_run(tmp_path_factory, "none", "calls", "improve_precision"))
    assert outputs(ours) == bare
    differ = [i for i, (a, b) in enumerate(zip(outputs(theirs), bare)) if a != b]
    if mode == "to_cpu":
        inf = torch.load(theirs.out / "outputs_rank0.pt")[differ[0]]
        assert len(differ) == 2 and inf[0, 0].item() == 1.0  # exp(12) of both steps
    else:
        assert differ == []


@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("mode", ["improve_precision", "to_cpu"])
def test_fix_gives_msprobes_outputs(tmp_path_factory, mode):
    ours = peer_run(tmp_path_factory, "ours", "calls", mode, section={"handler_type": "fix"})
    theirs = peer_run(tmp_path_factory, "msprobe", "calls", mode, section={"handler_type": "fix"})
    bare = outputs(peer_run(tmp_path_factory, "none", "calls", "improve_precision"))
    assert csv_bytes(ours) is None and csv_bytes(theirs) is None
    fixed = outputs(ours)
    assert fixed == outputs(theirs)
    assert fixed != bare  # the float16 product and power, at least


SELECTIONS = {
    "list": ("change_value", {"list": ["sum", "max", "Tensor.__"]}, {}),
    "scope": ("change_value", {"scope": ["Torch.exp.1.forward", "Torch.sum.0.forward", "Torch.max.0.forward"]}, {}),
    "scope_string": ("bit_noise", {"scope": "Torch.sub.0.forward"}, {}),
    "steps": ("bit_noise", {}, {"step": [0, 2]}),
}


@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("what", list(SELECTIONS))
def test_scope_list_and_steps_select_as_msprobe(tmp_path_factory, what):
    mode, section, top = SELECTIONS[what]
    rows = assert_same_csv(peer_run(tmp_path_factory, "ours", "calls", mode, 3, section, top),
                           peer_run(tmp_path_factory, "msprobe", "calls", mode, 3, section, top))
    everything = csv_rows(peer_run(tmp_path_factory, "ours", "calls", mode, 3).out / "dump")
    assert rows and len(rows) < len(everything)
    if what == "steps":
        assert {r.split(",")[3] for r in rows} == {"0", "2"}
        assert rows == [r for r in everything if r.split(",")[3] != "1"]
    if what == "scope":
        assert {api_of(r) for r in rows} <= set(section["scope"])


# msprobe's preheat handler compares by ratio whatever fuzz_device (to_cpu too), and samples.
@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("mode", ["change_value", "add_noise", "improve_precision", "bit_noise", "to_cpu"])
def test_preheat_is_msprobes(tmp_path_factory, mode):
    section = {"if_preheat": True, "preheat_step": 2, "max_sample": 2}
    if mode == "bit_noise":
        section = {"if_preheat": True, "preheat_step": 3, "max_sample": 1}
    rows = assert_same_csv(peer_run(tmp_path_factory, "ours", "calls", mode, 5, section),
                           peer_run(tmp_path_factory, "msprobe", "calls", mode, 5, section))
    assert "0" not in {r.split(",")[3] for r in rows}  # step 0 counts the calls
    plain = csv_rows(peer_run(tmp_path_factory, "ours", "calls", mode, 5).out / "dump")
    assert rows != [r for r in plain if r.split(",")[3] != "0"]


@pytest.mark.slow
@needs_gloo
@needs_msprobe
def test_outside_torch_distributed_ours_are_msprobes_rows_under_it_and_msprobe_writes_none(tmp_path_factory):
    """Kept difference 1."""
    ours = peer_run(tmp_path_factory, "ours", "calls", "change_value", dist=False)
    theirs = peer_run(tmp_path_factory, "msprobe", "calls", "change_value")
    assert_same_csv(ours, theirs)
    alone = peer_run(tmp_path_factory, "msprobe", "calls", "change_value", dist=False)
    assert csv_bytes(alone) is None
    assert "Default process group has not been initialized" in alone.logs[0]


@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("ranks", [[], [1]])
def test_two_ranks_append_to_one_file_as_msprobes_do(tmp_path_factory, ranks):
    top = {"rank": ranks}
    ours = peer_run(tmp_path_factory, "ours", "calls", "bit_noise", top=top, world=2)
    theirs = peer_run(tmp_path_factory, "msprobe", "calls", "bit_noise", top=top, world=2)
    a, b = csv_rows(ours.out / "dump"), csv_rows(theirs.out / "dump")
    # The ranks' rows interleave as they come. msprobe's own appends race when both ranks create
    # the file at once, and it has lost a row there (seen in CI); ours keep every row (one header,
    # one O_APPEND write a row: tests/cpp/test_output_files.cpp), so msprobe's rows are among ours.
    assert set(b) <= set(a) and len(b) >= len(a) - 2, (sorted(set(a) - set(b)), sorted(set(b) - set(a)))
    one = csv_rows(peer_run(tmp_path_factory, "ours", "calls", "bit_noise").out / "dump")
    for r in ranks or [0, 1]:
        assert [row for row in a if row.startswith(f"{r},")] == [f"{r}," + row.split(",", 1)[1] for row in one]
    assert {row.split(",")[0] for row in a} == {str(r) for r in ranks or [0, 1]}


@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("mode", ["add_noise", "change_value", "no_change", "to_cpu"])
def test_what_msprobe_runs_again_and_we_do_not(tmp_path_factory, mode):
    """Kept differences 2 and 3, on msprobe itself: it flags every add_ and += (max_rel 0.5 and
    1/3: run again on the already-added tensor), adds twice under no_change (and under to_cpu, whose
    float32 CPU 'copy' is the tensor itself), and draws twice for dropout and bernoulli; to_cpu
    flags them. We write no row, and x, y and the numbers torch.rand draws after are a run's
    without the tool; one line per API says what is not checked, the collective's too."""
    ours = peer_run(tmp_path_factory, "ours", "explained", mode)
    theirs = peer_run(tmp_path_factory, "msprobe", "explained", mode)
    bare = peer_run(tmp_path_factory, "none", "explained", mode)
    assert csv_bytes(ours) is None
    assert ours.results[0]["values"] == bare.results[0]["values"]
    assert theirs.results[0]["values"] != bare.results[0]["values"]
    x_y = [float.fromhex(v) for v in theirs.results[0]["values"][:8]]
    if mode in ("no_change", "to_cpu"):
        assert x_y == [3.0] * 4 + [2.0] * 4  # added twice
    else:
        assert x_y == [2.0] * 4 + [1.5] * 4
    theirs_rows = csv_rows(theirs.out / "dump")
    assert all(in_place(api_of(r)) or random_op(api_of(r)) for r in theirs_rows)
    assert bool(theirs_rows) == (mode != "no_change")  # no_change: the same tensor twice, so equal
    if mode in ("add_noise", "change_value"):
        assert "0,{},forward,0,Tensor.add_.0.forward,0.5,torch.float32,torch.Size([4]),".format(mode) in theirs_rows
    if mode == "to_cpu":
        assert {op_of(api_of(r)) for r in theirs_rows} == {"dropout", "bernoulli"}
    said = skip_lines(ours.logs[0])
    assert said == [f"msprobe_cpp: free_benchmark: Functional.dropout is not checked: {RANDOM_SKIP}",
                    f"msprobe_cpp: free_benchmark: Torch.bernoulli is not checked: {RANDOM_SKIP}",
                    f"msprobe_cpp: free_benchmark: Distributed.all_reduce is not checked: {COLLECTIVE_SKIP}"]


MODEL_RUNS = [("mlp32", "add_noise"), ("mlp32", "bit_noise"), ("mlp32", "change_value"),
              ("bf16", "improve_precision"), ("bf16", "add_noise"), ("bf16", "bit_noise"), ("bf16", "change_value")]


def flagged(rows: Sequence[str]) -> Set[Tuple[str, str]]:
    return {(api_of(r), r.rsplit(",", 1)[1]) for r in rows}


@pytest.mark.slow
@needs_gloo
@needs_msprobe
@pytest.mark.parametrize("case,mode", MODEL_RUNS)
def test_a_small_models_flagged_calls_are_a_subset_of_msprobes(tmp_path_factory, case, mode):
    """A float32 and a bfloat16 model, four SGD steps: every (api_name, output_index) we flag,
    msprobe flags; what only msprobe flags is an in-place call (run again on its own output) or a
    random one (drawn again); every other row is msprobe's, byte for byte. The step's one dropout
    draws first in both, and the generator is seeded at each step's start, so both tools train
    as a run without a tool does."""
    ours = peer_run(tmp_path_factory, "ours", case, mode, 4)
    theirs = peer_run(tmp_path_factory, "msprobe", case, mode, 4)
    bare = peer_run(tmp_path_factory, "none", case, "improve_precision", 4)
    for run in (ours, theirs):
        assert run.results[0]["losses"] == bare.results[0]["losses"]
        state, state0 = run.state(0), bare.state(0)
        assert all(torch.equal(state[k], state0[k]) for k in state0)
    a, b = csv_rows(ours.out / "dump"), csv_rows(theirs.out / "dump")
    assert flagged(a) <= flagged(b)
    only_theirs = {name for name, _ in flagged(b) - flagged(a)}
    assert only_theirs and all(in_place(n) or random_op(n) for n in only_theirs), sorted(only_theirs)
    assert not any(random_op(api_of(r)) for r in a)
    plain = lambda rows: [r for r in rows if not (in_place(api_of(r)) or random_op(api_of(r)))]  # noqa: E731
    assert plain(a) == plain(b)
    if mode in ("bit_noise", "change_value"):
        assert plain(a)  # calls were compared and flagged, not only in-place ones


# --- slow: real models train bit-identically --------------------------------------------------------

ZOO = ["resnet18", "vit", "hf_gpt2", "hf_bert_mlm"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["improve_precision", "add_noise"])
@pytest.mark.parametrize("name", ZOO)
def test_a_real_model_trains_bit_identically_under_check(tmp_path, name, mode, request):
    import real_models
    pytest.importorskip(real_models.MODELS[name].requires)
    losses0, state0, _ = real_models.run(name)
    dbg = debugger(tmp_path, mode)
    losses, state, _ = real_models.run(name, debugger=dbg)
    dbg._release()
    assert losses == losses0
    assert state.keys() == state0.keys()
    differ = [k for k in state if not torch.equal(state[k], state0[k])]
    assert not differ, f"{len(differ)} of {len(state)} state_dict tensors differ: {differ[:5]}"
