"""Task grad_probe (msprobe 1.1.1's gradient monitor) and `msprobe-cpp grad-compare`.

Fast tier, both torches: each summary CSV and direction .npy equals, byte for byte, what msprobe's
own formulas (GradStatCsv, save_grad_direction, write_csv; restated below as `expected_summary` and
`expected_direction`) make of the gradients the test reads itself right before optimizer.step();
which optimizer steps are counted and written; main_grad; the config's errors; grad-compare on
hand-built runs. Slow tier: msprobe 1.1.1 itself as a peer (torch 2), its GradComparator against
ours, real models trained bit-identically under the task, DDP on gloo.

Every process that runs msprobe, or a torch.distributed rank, is its own
(grad_probe_worker.py, started by dist_runs.run_ranks with a timeout): msprobe's optimizer hook is
global and never removed, and its PrecisionDebugger is a singleton."""
import csv
import hashlib
import io
import json
import math
import pathlib
import subprocess
import sys
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim.optimizer as optimizer_module  # torch 1.13's torch.optim deletes the name

import msprobe_cpp
from dist_runs import run_ranks
from peer_process import PEER_IMPORTS
from msprobe_runs import needs_msprobe
from gloo import needs_gloo
from grad_probe_worker import Edge
from testenv import TESTS, devices

WORKER = TESTS / "grad_probe_worker.py"
DEFAULT_BOUNDS = [-1, 0, 1]
BOUNDS = [-1, 0, 0.001, 1]


# --- msprobe 1.1.1's formulas ---------------------------------------------------------------------

def header(level: str, bounds: Sequence[float]) -> List[str]:
    """GradStatCsv.generate_csv_header: with no bounds, "=0" alone (msprobe's quirk, kept)."""
    head = ["param_name"]
    if level == "L0":
        head.append("MD5")
    if level == "L2":
        if bounds:
            head.append(f"(-inf, {bounds[0]}]")
            head += [f"({bounds[i - 1]}, {bounds[i]}]" for i in range(1, len(bounds))]
            head.append(f"({bounds[-1]}, inf)")
        head.append("=0")
    return head + ["max", "min", "norm", "shape"]


def row(name: str, grad: torch.Tensor, level: str, bounds: Sequence[float]) -> List[Any]:
    """GradStatCsv.generate_csv_line. A gradient with no elements: max and min nan (msprobe's
    torch.max raises there), norm 0.0."""
    line: List[Any] = [name]
    if level == "L0":
        line.append(hashlib.md5(grad.cpu().detach().float().numpy().tobytes()).hexdigest())
    if level == "L2":
        g = grad.cpu().detach()
        if g.dtype == torch.bfloat16:
            g = g.to(torch.float32)
        n = g.numel()
        zeros = (g == 0).sum().item()
        bound = torch.Tensor(list(bounds))
        with warnings.catch_warnings():  # torch 2's note on a non-contiguous input (Edge.wt)
            warnings.simplefilter("ignore")
            buckets = torch.bucketize(g, bound)
        counts = [(buckets == i).sum().item() for i in range(len(bound) + 1)] + [zeros]
        line += [c / n if n != 0 else 0 for c in counts]
    if grad.numel() == 0:
        line += [math.nan, math.nan]
    else:
        line += [torch.max(grad).cpu().detach().float().numpy().tolist(),
                 torch.min(grad).cpu().detach().float().numpy().tolist()]
    line.append(torch.norm(grad).cpu().detach().float().numpy().tolist())
    line.append(list(grad.shape))
    return line


def expected_summary(grads: Sequence[Tuple[str, torch.Tensor]], level: str,
                     bounds: Sequence[float] = DEFAULT_BOUNDS) -> bytes:
    """The bytes of grad_summary_<step>.csv: write_csv's utf-8-sig and csv.writer's CRLF."""
    buf = io.StringIO()
    csv.writer(buf).writerows([header(level, bounds)] + [row(n, g, level, bounds) for n, g in grads])
    return buf.getvalue().encode("utf-8-sig")


def expected_direction(grad: torch.Tensor) -> bytes:
    """GradientMonitor.save_grad_direction's file: np.save of (grad > 0)."""
    buf = io.BytesIO()
    np.save(buf, (grad.clone().detach() > 0).cpu().numpy())
    return buf.getvalue()


# --- runs in this process ---------------------------------------------------------------------------

def write_config(tmp_path: pathlib.Path, level: Optional[str] = "L1", top: Optional[Dict[str, Any]] = None,
                 name: str = "config.json", **section: Any) -> pathlib.Path:
    grad_probe = dict(section)
    if level is not None:
        grad_probe["grad_level"] = level
    cfg = {"task": "grad_probe", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], **(top or {}),
           "grad_probe": grad_probe}
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


Grads = List[Tuple[str, torch.Tensor]]


def read_grads(model: nn.Module) -> Grads:
    """(name, gradient) as msprobe reads them: main_grad where there is one, grad-less ones left
    out, in named_parameters order."""
    out = []
    for name, p in model.named_parameters():
        grad = p.main_grad if hasattr(p, "main_grad") else p.grad
        if grad is not None:
            out.append((name, grad.detach().clone()))
    return out


def train(model: nn.Module, steps: int, device: str = "cpu", optimizer: Any = None,
          before_step: Any = None) -> List[Grads]:
    """`steps` iterations of zero_grad, forward, backward, SGD step; each step's gradients as
    read right before optimizer.step() (after before_step(model, i), which may set main_grad)."""
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    seen = []
    for i in range(steps):
        x, y = torch.randn(6, 4, generator=g).to(device), torch.randint(0, 3, (6,), generator=g).to(device)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if before_step is not None:
            before_step(model, i)
        seen.append(read_grads(model))
        optimizer.step()
    return seen


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def edge(device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    return Edge().to(device)


def monitored(config: pathlib.Path, *models: nn.Module) -> msprobe_cpp.PrecisionDebugger:
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(config))
    for m in models:
        dbg.monitor(m)
    return dbg


def files_under(folder: pathlib.Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def assert_step(rank_dir: pathlib.Path, step: int, grads: Grads, level: str,
                bounds: Sequence[float] = DEFAULT_BOUNDS) -> None:
    """grad_summary_<step>.csv and step<step>/ hold exactly msprobe's bytes for `grads`."""
    assert (rank_dir / f"grad_summary_{step}.csv").read_bytes() == expected_summary(grads, level, bounds)
    folder = rank_dir / f"step{step}"
    if level == "L0":
        assert not folder.exists()
        return
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.npy" for n, _ in grads)
    for name, grad in grads:
        written = (folder / f"{name}.npy").read_bytes()
        assert written == expected_direction(grad), name


def nothing_hooked() -> Tuple[int, bool]:
    """The optimizer hooks a debugger could have left: torch 2's global step pre-hooks, and
    torch 1.13's wrapped SGD.step."""
    hooks = getattr(optimizer_module, "_global_optimizer_pre_hooks", {})
    return len(hooks), bool(getattr(torch.optim.SGD.step, "_msprobe_cpp_guard", False))


# --- fast: the files, against msprobe's formulas ---------------------------------------------------

@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
@pytest.mark.parametrize("device", devices(), indirect=True)
def test_each_summary_is_msprobes_formula_of_the_gradients_the_optimizer_sees(tmp_path, device, level):
    """A transposed, a 0-d, a float16, a bfloat16 and an unused (grad None: no row, no file)
    parameter among plain ones; every optimizer step written."""
    model = edge(device)
    dbg = monitored(write_config(tmp_path, level, bounds=BOUNDS), model)
    seen = train(model, 3, device)
    dbg._task.drain()
    rank = tmp_path / "dump" / "rank0"
    assert sorted(p.name for p in rank.glob("*.csv")) == [f"grad_summary_{i}.csv" for i in range(3)]
    for i, grads in enumerate(seen):
        assert "unused" not in [n for n, _ in grads]
        assert_step(rank, i, grads, level, BOUNDS)


def test_a_transposed_gradient_is_saved_as_numpy_saves_it(tmp_path):
    model = edge()
    dbg = monitored(write_config(tmp_path, "L1"), model)
    grads = dict(train(model, 1)[0])
    dbg._task.drain()
    assert (tmp_path / "dump" / "rank0" / "step0" / "wt.npy").read_bytes() == expected_direction(grads["wt"])


def test_defaults_are_level_L1_and_bounds_minus_one_zero_one(tmp_path):
    model = mlp()
    dbg = monitored(write_config(tmp_path, level=None), model)  # an empty grad_probe section
    grads = train(model, 1)[0]
    dbg._task.drain()
    assert_step(tmp_path / "dump" / "rank0", 0, grads, "L1")
    path = write_config(tmp_path, level="L2", name="l2.json", top={"dump_path": str(tmp_path / "dump2")})
    model = mlp()
    dbg = monitored(path, model)
    grads = train(model, 1)[0]
    dbg._task.drain()
    written = (tmp_path / "dump2" / "rank0" / "grad_summary_0.csv").read_bytes()
    assert written.startswith('\ufeffparam_name,"(-inf, -1]","(-1, 0]","(0, 1]","(1, inf)",=0,max,min,norm,shape\r\n'
                              .encode("utf-8"))
    assert written == expected_summary(grads, "L2", DEFAULT_BOUNDS)


def test_bounds_are_written_as_python_writes_the_numbers_read_from_json(tmp_path):
    """Each bound's text is Python's str() of what json.loads makes of it (msprobe's f-string):
    1E-3 is 0.001, 2e2 is 200.0, 1.50 is 1.5, an integer stays one."""
    text = "[-1e-7, 0, 1E-3, 1.50, 2e2, 123456789012, 9223372036854775807]"
    (tmp_path / "config.json").write_text('{"task": "grad_probe", "dump_path": "%s", "grad_probe": '
                                          '{"grad_level": "L2", "bounds": %s}}' % (tmp_path / "dump", text))
    model = mlp()
    dbg = monitored(tmp_path / "config.json", model)
    grads = train(model, 1)[0]
    dbg._task.drain()
    bounds = json.loads(text)
    written = (tmp_path / "dump" / "rank0" / "grad_summary_0.csv").read_bytes()
    assert b'"(-inf, -1e-07]","(-1e-07, 0]","(0, 0.001]","(0.001, 1.5]","(1.5, 200.0]"' in written
    assert written == expected_summary(grads, "L2", bounds)


def test_empty_bounds_keep_msprobes_header_of_one_column_less(tmp_path):
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L2", bounds=[]), model)
    grads = train(model, 1)[0]
    dbg._task.drain()
    lines = (tmp_path / "dump" / "rank0" / "grad_summary_0.csv").read_bytes().decode("utf-8-sig").splitlines()
    assert lines[0] == "param_name,=0,max,min,norm,shape"
    assert all(len(next(csv.reader([line]))) == 7 for line in lines[1:])  # one interval more than the header
    assert (tmp_path / "dump" / "rank0" / "grad_summary_0.csv").read_bytes() == expected_summary(grads, "L2", [])


class WithEmpty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.empty = nn.Parameter(torch.zeros(0, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.empty.sum()


@pytest.mark.parametrize("level", ["L0", "L2"])
def test_a_gradient_without_elements_has_nan_max_and_min_and_norm_zero(tmp_path, level):
    torch.manual_seed(0)
    model = WithEmpty()
    dbg = monitored(write_config(tmp_path, level), model)
    grads = train(model, 1)[0]
    dbg._task.drain()
    rank = tmp_path / "dump" / "rank0"
    lines = (rank / "grad_summary_0.csv").read_bytes().decode("utf-8-sig").splitlines()
    empty = next(csv.reader([lines[1]]))
    assert empty[0] == "empty" and empty[-4:] == ["nan", "nan", "0.0", "[0, 3]"]
    if level == "L0":
        assert empty[1] == hashlib.md5(b"").hexdigest()
    else:
        assert empty[1:6] == ["0"] * 5  # msprobe's fractions of no elements: the integer 0
    assert_step(rank, 0, grads, level)


def test_param_list_names_the_parameters_and_monitor_takes_each_once(tmp_path):
    a, b = mlp(), edge()
    dbg = monitored(write_config(tmp_path, "L1", param_list=["0.weight", "fc.bias", "unused", "nope"]), a, b, a)
    opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
    opt.zero_grad()
    (F.cross_entropy(a(x), y) + F.cross_entropy(b(x), y)).backward()
    grads = [("0.weight", a[0].weight.grad.clone()), ("fc.bias", b.fc.bias.grad.clone())]
    opt.step()
    dbg._task.drain()
    assert_step(tmp_path / "dump" / "rank0", 0, grads, "L1")


def test_a_parameter_list_that_matches_nothing_writes_the_header_alone(tmp_path):
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L1", param_list=["nope"]), model)
    train(model, 1)
    dbg._task.drain()
    assert files_under(tmp_path / "dump") == ["rank0/grad_summary_0.csv"]
    assert (tmp_path / "dump" / "rank0" / "grad_summary_0.csv").read_bytes() == expected_summary([], "L1")


# --- fast: which steps ---------------------------------------------------------------------------

def test_the_step_list_selects_optimizer_steps(tmp_path):
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L1", top={"step": [1, "3-4"]}), model)
    seen = train(model, 6)
    dbg._task.drain()
    rank = tmp_path / "dump" / "rank0"
    assert sorted(p.name for p in rank.iterdir()) == ["grad_summary_1.csv", "grad_summary_3.csv",
                                                      "grad_summary_4.csv", "step1", "step3", "step4"]
    for i in (1, 3, 4):
        assert_step(rank, i, seen[i], "L1")


def test_two_optimizers_are_two_steps_each_of_every_watched_parameter(tmp_path):
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L0"), model)
    first = torch.optim.SGD(model[0].parameters(), lr=0.1)
    second = torch.optim.Adam(model[2].parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(2):
        x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
        first.zero_grad()
        second.zero_grad()
        F.cross_entropy(model(x), y).backward()
        seen.append(read_grads(model))
        first.step()
        second.step()
    dbg._task.drain()
    rank = tmp_path / "dump" / "rank0"
    assert sorted(p.name for p in rank.iterdir()) == [f"grad_summary_{i}.csv" for i in range(4)]
    for i in range(4):
        assert_step(rank, i, seen[i // 2], "L0")  # an optimizer's step leaves the gradients as they were
    assert (rank / "grad_summary_0.csv").read_bytes() != (rank / "grad_summary_2.csv").read_bytes()


@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"), reason="torch.amp.GradScaler('cpu') is torch 2.x's")
def test_a_step_the_grad_scaler_skips_is_not_counted(tmp_path):
    """The scaler skips iteration 1 (an inf loss): no optimizer.step, no step number. Iteration 2
    is step 1, summarized unscaled, as the optimizer sees it."""
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L1"), model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    g = torch.Generator().manual_seed(1)
    seen = []
    for i in range(3):
        x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y) * (math.inf if i == 1 else 1.0)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if i != 1:
            seen.append(read_grads(model))
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 512.0  # the scaler did skip one step
    dbg._task.drain()
    rank = tmp_path / "dump" / "rank0"
    assert sorted(p.name for p in rank.glob("*.csv")) == ["grad_summary_0.csv", "grad_summary_1.csv"]
    for i, grads in enumerate(seen):
        assert_step(rank, i, grads, "L1")


@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"), reason="torch.amp.GradScaler('cpu') is torch 2.x's")
def test_a_fused_optimizers_step_is_counted_as_the_scaler_calls_it(tmp_path):
    """msprobe's quirk, kept: the scaler calls a fused optimizer's step even on the step it skips,
    and never unscales its gradients itself. Both steps are summarized as called: scaled, and NaN."""
    model = mlp()
    try:
        opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
    except RuntimeError as e:
        pytest.skip(f"no fused Adam on the CPU here: {e}")
    dbg = monitored(write_config(tmp_path, "L1"), model)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    g = torch.Generator().manual_seed(1)
    seen = []
    for i in range(2):
        x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
        opt.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) * (math.inf if i == 1 else 1.0)).backward()
        seen.append(read_grads(model))
        scaler.step(opt)
        scaler.update()
    dbg._task.drain()
    rank = tmp_path / "dump" / "rank0"
    assert sorted(p.name for p in rank.glob("*.csv")) == ["grad_summary_0.csv", "grad_summary_1.csv"]
    for i, grads in enumerate(seen):
        assert_step(rank, i, grads, "L1")
    assert "0.weight,nan,nan,nan," in (rank / "grad_summary_1.csv").read_text(encoding="utf-8-sig")


def test_main_grad_is_read_where_a_parameter_has_one(tmp_path):
    """Megatron's fp32 copy: read instead of .grad, and even where .grad is None."""
    model = edge()

    def set_main_grad(m: nn.Module, i: int) -> None:
        m.fc.weight.main_grad = torch.full_like(m.fc.weight, -0.25 * (i + 1))
        m.fc.weight.main_grad[0, 0] = 3.0
        m.unused.main_grad = torch.arange(4.0).reshape(2, 2) - 1.5

    dbg = monitored(write_config(tmp_path, "L2"), model)
    seen = train(model, 2, before_step=set_main_grad)
    dbg._task.drain()
    for i, grads in enumerate(seen):
        names = dict(grads)
        assert names["fc.weight"][0, 0].item() == 3.0 and names["fc.weight"][0, 1].item() == -0.25 * (i + 1)
        assert "unused" in names and model.unused.grad is None
        assert_step(tmp_path / "dump" / "rank0", i, grads, "L2")


def test_start_stop_and_step_do_nothing_under_grad_probe(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(write_config(tmp_path, "L1")))
    for _ in range(3):
        dbg.start(model)
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()  # not monitored yet: not counted
        dbg.stop()
        dbg.step()
    dbg._task.drain()
    assert not (tmp_path / "dump").exists()
    dbg.monitor(model)
    dbg.step()
    seen = train(model, 1, optimizer=opt)
    dbg._task.drain()
    assert files_under(tmp_path / "dump") == ["rank0/grad_summary_0.csv", "rank0/step0/0.bias.npy",
                                              "rank0/step0/0.weight.npy", "rank0/step0/2.bias.npy",
                                              "rank0/step0/2.weight.npy"]
    assert_step(tmp_path / "dump" / "rank0", 0, seen[0], "L1")


def test_monitor_under_another_task_warns_once_and_does_nothing(tmp_path, capfd):
    model = mlp()
    dbg = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "dump"), step=[100])
    dbg.monitor(model)
    dbg.monitor(model)
    train(model, 2)
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("msprobe_cpp: warning: ")]
    assert said == ["msprobe_cpp: warning: monitor() does nothing under task statistics: it is grad_probe's"]
    assert files_under(tmp_path / "dump") == []


def test_monitor_takes_a_module(tmp_path):
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(write_config(tmp_path)))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got Tensor"):
        dbg.monitor(torch.zeros(2))


def test_a_rank_list_outside_torch_distributed_is_not_applied(tmp_path):
    """As msprobe: its GradientMonitor looks at the rank list only under torch.distributed."""
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L0", top={"rank": [1]}), model)
    seen = train(model, 1)
    dbg._task.drain()
    assert_step(tmp_path / "dump" / "rank0", 0, seen[0], "L0")


def test_release_writes_every_handed_over_step(tmp_path):
    """Files are written by a thread; the debugger's release waits for them."""
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L2"), model)
    seen = train(model, 20)
    dbg._release()
    msprobe_cpp.PrecisionDebugger._instance = None
    for i, grads in enumerate(seen):
        assert_step(tmp_path / "dump" / "rank0", i, grads, "L2")


# --- fast: bad configs ----------------------------------------------------------------------------

BAD = [
    ({"grad_level": "L3"}, 'grad_probe.grad_level: expected one of L0, L1, L2, got "L3"'),
    ({"bounds": [1, 0]}, "grad_probe.bounds[1]: expected a number above the one before it (bounds ascend), got 0"),
    ({"bounds": [-1, 0.5, 0.5]},
     "grad_probe.bounds[2]: expected a number above the one before it (bounds ascend), got 0.5"),
    ({"bounds": ["1"]}, 'grad_probe.bounds[0]: expected a number from -2**63 to 2**63-1, got "1"'),
    ({"bounds": [2 ** 63]}, "grad_probe.bounds[0]: expected a number from -2**63 to 2**63-1, got 9223372036854775808"),
    ({"bounds": [True]}, "grad_probe.bounds[0]: expected a number from -2**63 to 2**63-1, got true"),
    ({"param_list": "fc.weight"}, 'grad_probe.param_list: expected a list of non-empty strings, got "fc.weight"'),
    ({"grad_levle": "L1"}, 'grad_probe.grad_levle: unknown key; did you mean "grad_level"?'),
    # Below int64, JSON's integer arrives as the double -2**63: refused, as msprobe refuses it.
    ({"bounds": [-2 ** 63 - 1]}, "grad_probe.bounds[0]: expected a number from -2**63 to 2**63-1, got "
                                 "-9.223372036854776e+18"),
]


@pytest.mark.parametrize("section,message", BAD)
def test_a_bad_grad_probe_section_is_one_line_and_leaves_nothing(tmp_path, section, message):
    before = nothing_hooked()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "dump"), "grad_probe": section}))
    with pytest.raises(msprobe_cpp.ConfigError) as e:
        msprobe_cpp.PrecisionDebugger(config_path=str(path))
    assert str(e.value) == f"{path}: {message}"
    assert isinstance(e.value, ValueError) and msprobe_cpp.ConfigError is msprobe_cpp._C.ConfigError
    assert msprobe_cpp.PrecisionDebugger._instance is None
    assert nothing_hooked() == before
    train(mlp(), 1)
    assert not (tmp_path / "dump").exists()


def test_msprobes_other_keys_and_every_level_are_accepted(tmp_path):
    """A pasted msprobe config: BaseConfig's keys in the section, any top-level level."""
    section = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics", "file_format": "npy",
               "overflow_nums": 1, "check_mode": "all", "grad_level": "L0"}
    for level in ["L0", "L1", "L2", "mix"]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / level), "level": level,
                                    "grad_probe": section}))
        model = mlp()
        dbg = monitored(path, model)
        seen = train(model, 1)
        dbg._release()
        assert_step(tmp_path / level / "rank0", 0, seen[0], "L0")


# --- fast: grad-compare on hand-built runs --------------------------------------------------------

def hand_built_run(root: pathlib.Path, part_at: Dict[int, int], steps: int = 4) -> pathlib.Path:
    """rank<r>/step<s>/{fc.weight,fc.bias}.npy and one summary CSV per rank; from step part_at[r]
    on, rank r's fc.weight has 15 of its 20 directions flipped."""
    for r, at in part_at.items():
        for s in range(steps):
            folder = root / f"rank{r}" / f"step{s}"
            folder.mkdir(parents=True)
            weight = np.zeros((4, 5), bool)
            if s >= at:
                weight[:3] = True
            np.save(folder / "fc.weight.npy", weight)
            np.save(folder / "fc.bias.npy", np.ones(3, bool))
        summary = 'param_name,max,min,norm,shape\r\nfc.weight,1,1,1,"[4, 5]"\r\nfc.bias,1,1,1,[3]\r\n'
        (root / f"rank{r}" / "grad_summary_0.csv").write_bytes(summary.encode("utf-8-sig"))
    return root


def grad_compare(cli: pathlib.Path, *args: Any) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), "grad-compare", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_grad_compare_names_the_step_where_runs_part_ways(cli, tmp_path):
    same = hand_built_run(tmp_path / "a", {0: 99, 1: 99})
    other = hand_built_run(tmp_path / "b", {0: 99, 1: 2})
    r = grad_compare(cli, same, other, "-o", tmp_path / "out")
    assert r.returncode == 1, r.stderr
    assert ("rank 0: 4 steps compared (0 to 3); summary similarity stays at or above 0.9 (lowest 1.0, at step 0)"
            in r.stdout)
    assert ("rank 1: 4 steps compared (0 to 3); the gradients part ways at step 2: summary similarity "
            "0.34782608695652173 < 0.9" in r.stdout)
    # msprobe's _save_similarities: the summary's order of parameters, then "summary"; 8 of 23 agree.
    assert (tmp_path / "out" / "rank1" / "similarities.csv").read_bytes() == (
        "\ufeffstep,0,1,2,3\r\nfc.weight,1.0,1.0,0.25,0.25\r\nfc.bias,1.0,1.0,1.0,1.0\r\n"
        "summary,1.0,1.0,0.34782608695652173,0.34782608695652173\r\n").encode("utf-8")
    assert (tmp_path / "out" / "rank0" / "similarities.csv").read_bytes() == (
        "\ufeffstep,0,1,2,3\r\nfc.weight,1.0,1.0,1.0,1.0\r\nfc.bias,1.0,1.0,1.0,1.0\r\n"
        "summary,1.0,1.0,1.0,1.0\r\n").encode("utf-8")
    pictures = tmp_path / "out" / "rank1" / "similarities_picture"
    assert sorted(p.name for p in pictures.iterdir()) == ["fc.bias_similarities.svg", "fc.weight_similarities.svg",
                                                          "summary_similarities.svg"]
    assert all(p.read_text().lstrip().startswith(("<svg", "<?xml")) for p in pictures.iterdir())

    r = grad_compare(cli, same, other, "-o", tmp_path / "out2", "--threshold", "0.3")
    assert r.returncode == 0, r.stderr
    assert "rank 1: 4 steps compared (0 to 3); summary similarity stays at or above 0.3 " \
           "(lowest 0.34782608695652173, at step 2)" in r.stdout
    r = grad_compare(cli, same, same, "-o", tmp_path / "out3")
    assert r.returncode == 0 and "part ways" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("args,message", [
    (["RUN1", "RUN2"], "msprobe-cpp grad-compare: -o OUT is required"),
    (["RUN1", "RUN2", "-o", "OUT", "--threshold", "abc"],
     'msprobe-cpp grad-compare: --threshold: expected a number from 0 to 1, got "abc"'),
    (["RUN1", "RUN2", "-o", "OUT", "--threshold", "1.5"],
     'msprobe-cpp grad-compare: --threshold: expected a number from 0 to 1, got "1.5"'),
    (["RUN1", "-o", "OUT"], "msprobe-cpp grad-compare: two runs are needed, got 1"),
    (["RUN1", "RUN2", "-o", "OUT", "--bogus"], "msprobe-cpp grad-compare: unknown option --bogus"),
    (["RUN1", "NOPE", "-o", "OUT"], "msprobe-cpp grad-compare: NOPE: not a folder"),
    (["RUN1", "OTHER_RANKS", "-o", "OUT"],
     "msprobe-cpp grad-compare: RUN1 and OTHER_RANKS: no rank<N> folder in both; give the dump_path of each "
     "grad_probe run"),
])
def test_grad_compare_bad_arguments_exit_2_with_one_message(cli, tmp_path, args, message):
    hand_built_run(tmp_path / "RUN1", {0: 99})
    hand_built_run(tmp_path / "RUN2", {0: 99})
    hand_built_run(tmp_path / "OTHER_RANKS", {3: 99})
    r = subprocess.run([str(cli), "grad-compare", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines()[0] == message
    assert not (tmp_path / "OUT").exists()


def test_grad_compare_of_L0_runs_says_they_have_no_directions(cli, tmp_path):
    for run in ("a", "b"):
        model = mlp()
        dbg = monitored(write_config(tmp_path, "L0", name=f"{run}.json",
                                     top={"dump_path": str(tmp_path / run)}), model)
        train(model, 1)
        dbg._release()
    r = grad_compare(cli, tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out")
    assert r.returncode == 2 and "no step folder" in r.stderr and "(L1 or L2)" in r.stderr, r.stderr


# --- slow: msprobe 1.1.1 itself as the peer --------------------------------------------------------


PEER_CONFIGS = {
    "L0": ("L0", {}, {}),
    "L1": ("L1", {}, {}),
    "L2": ("L2", {"bounds": BOUNDS}, {}),
    "L2_listed": ("L2", {"bounds": [-0.5, 1e-3, 2.5], "param_list": ["fc.weight", "h16", "b16", "scale", "unused"]},
                  {"step": [0, 2]}),
}
_PEER_RUNS: Dict[Tuple[str, str, str, int], pathlib.Path] = {}


def peer_run(tmp_path_factory: Any, tool: str, config: str, model: str = "edge", seed: int = 0,
             world: int = 1, top: Optional[Dict[str, Any]] = None) -> Any:
    """One grad_probe_worker.py run (each rank a process of its own; cached per module): its OUT."""
    key = (tool, config, model, seed, world, json.dumps(top))
    if key not in _PEER_RUNS:
        out = tmp_path_factory.mktemp(f"{tool}_{config}_{model}_{seed}_{world}")
        level, section, extra = PEER_CONFIGS[config]
        path = out / "config.json"
        path.write_text(json.dumps({"task": "grad_probe", "dump_path": str(out / "dump"), "rank": [], "step": [],
                                    **extra, **(top or {}), "grad_probe": {"grad_level": level, **section}}))
        args = ["--tool", tool, "--config", str(path), "--model", model, "--seed", str(seed)]
        run = run_ranks(out, world, args + (["--ddp"] if world > 1 else []), worker=WORKER, timeout=240,
                        preload=PEER_IMPORTS.get(tool, ()))
        assert run.returncodes == [0] * world, run.context()
        _PEER_RUNS[key] = run
    return _PEER_RUNS[key]


def assert_same_files(ours: pathlib.Path, theirs: pathlib.Path) -> None:
    names = files_under(ours)
    assert names and names == files_under(theirs)
    for name in names:
        a, b = (ours / name).read_bytes(), (theirs / name).read_bytes()
        assert a == b, name


@pytest.mark.slow
@needs_msprobe
@pytest.mark.parametrize("config", list(PEER_CONFIGS))
def test_every_file_is_byte_identical_to_msprobes(tmp_path_factory, config):
    ours = peer_run(tmp_path_factory, "ours", config)
    theirs = peer_run(tmp_path_factory, "msprobe", config)
    assert ours.results[0]["losses"] == theirs.results[0]["losses"]
    assert_same_files(ours.out / "dump", theirs.out / "dump")
    for name in files_under(ours.out / "dump"):
        assert not name.endswith("unused.npy")
    csv_text = (ours.out / "dump" / "rank0" / "grad_summary_0.csv").read_text(encoding="utf-8-sig")
    assert "\nunused," not in csv_text and "\nh16," in csv_text and "\nb16," in csv_text
    assert "grad is None: unused" in theirs.logs[0]
    if config == "L2_listed":
        assert sorted(p.name for p in (ours.out / "dump" / "rank0").iterdir()) == [
            "grad_summary_0.csv", "grad_summary_2.csv", "step0", "step2"]
    # Our files are msprobe's formulas of the gradients the worker read before each step.
    level, section, _ = PEER_CONFIGS[config]
    grads = torch.load(ours.out / "grads_rank0.pt")
    listed = section.get("param_list")
    for step, named in enumerate(grads):
        path = ours.out / "dump" / "rank0" / f"grad_summary_{step}.csv"
        if path.exists():
            rows = [(n, g) for n, g in named.items() if not listed or n in listed]
            assert path.read_bytes() == expected_summary(rows, level, section.get("bounds", DEFAULT_BOUNDS))


@pytest.mark.slow
@needs_msprobe
def test_msprobe_writes_a_transposed_gradients_directions_in_fortran_order_and_so_do_we(tmp_path_factory):
    ours = peer_run(tmp_path_factory, "ours", "L1")
    theirs = peer_run(tmp_path_factory, "msprobe", "L1")
    name = "rank0/step0/wt.npy"
    assert (ours.out / "dump" / name).read_bytes() == (theirs.out / "dump" / name).read_bytes()


COMPARE_WITH_MSPROBE = """
import sys
from msprobe.core.grad_probe.grad_compare import GradComparator
GradComparator.compare_distributed(sys.argv[1], sys.argv[2], sys.argv[3])
"""


def msprobe_compare(a: pathlib.Path, b: pathlib.Path, out: pathlib.Path) -> None:
    r = subprocess.run([sys.executable, "-c", COMPARE_WITH_MSPROBE, str(a), str(b), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.slow
@needs_msprobe
def test_msprobes_grad_comparator_and_ours_agree_on_both_tools_runs(cli, tmp_path_factory, tmp_path):
    """Two runs of different seeds: msprobe's GradComparator on our dumps writes our
    similarities.csv, and ours on msprobe's dumps reads the same numbers."""
    ours = [peer_run(tmp_path_factory, "ours", "L2", model="mlp", seed=s).out / "dump" for s in (0, 1)]
    theirs = [peer_run(tmp_path_factory, "msprobe", "L2", model="mlp", seed=s).out / "dump" for s in (0, 1)]
    msprobe_compare(ours[0], ours[1], tmp_path / "msprobe_on_ours")
    r = grad_compare(cli, ours[0], ours[1], "-o", tmp_path / "ours_on_ours", "--threshold", "0")
    assert r.returncode == 0, r.stderr
    r = grad_compare(cli, theirs[0], theirs[1], "-o", tmp_path / "ours_on_theirs", "--threshold", "0")
    assert r.returncode == 0, r.stderr
    expected = (tmp_path / "msprobe_on_ours" / "rank0" / "similarities.csv").read_bytes()
    rows = expected.decode("utf-8-sig").splitlines()
    assert rows[0] == "step,0,1,2" and [l.split(",")[0] for l in rows[1:]] == [
        "0.weight", "0.bias", "2.weight", "2.bias", "summary"]
    assert any(float(v) < 1 for v in rows[-1].split(",")[1:])  # the seeds' runs differ
    assert (tmp_path / "ours_on_ours" / "rank0" / "similarities.csv").read_bytes() == expected
    assert (tmp_path / "ours_on_theirs" / "rank0" / "similarities.csv").read_bytes() == expected
    assert sorted(p.stem for p in (tmp_path / "ours_on_ours" / "rank0" / "similarities_picture").iterdir()) == \
        sorted(p.stem for p in (tmp_path / "msprobe_on_ours" / "rank0" / "similarities_picture").iterdir())


@pytest.mark.slow
@needs_msprobe
def test_grad_compare_reads_msprobes_fortran_ordered_directions(cli, tmp_path_factory, tmp_path):
    theirs = [peer_run(tmp_path_factory, "msprobe", "L1", seed=s).out / "dump" for s in (0, 1)]
    msprobe_compare(theirs[0], theirs[1], tmp_path / "msprobe")
    r = grad_compare(cli, theirs[0], theirs[1], "-o", tmp_path / "ours", "--threshold", "0")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ours" / "rank0" / "similarities.csv").read_bytes() == \
        (tmp_path / "msprobe" / "rank0" / "similarities.csv").read_bytes()


# --- slow: DDP on gloo -----------------------------------------------------------------------------

@pytest.mark.slow
@needs_gloo
def test_ddp_ranks_each_write_the_averaged_gradients(tmp_path_factory):
    run = peer_run(tmp_path_factory, "ours", "L2", model="mlp", world=2)
    dump = run.out / "dump"
    assert sorted(p.name for p in dump.iterdir()) == ["rank0", "rank1"]
    assert run.results[0]["losses"] != run.results[1]["losses"]  # each rank its own batches
    assert files_under(dump / "rank0") == files_under(dump / "rank1")
    for name in files_under(dump / "rank0"):
        assert (dump / "rank0" / name).read_bytes() == (dump / "rank1" / name).read_bytes(), name
    for r in range(2):
        for step, named in enumerate(torch.load(run.out / f"grads_rank{r}.pt")):
            assert_step(dump / f"rank{r}", step, list(named.items()), "L2", BOUNDS)


@pytest.mark.slow
@needs_gloo
def test_ddp_ranks_outside_the_rank_list_write_nothing(tmp_path_factory):
    run = peer_run(tmp_path_factory, "ours", "L1", model="mlp", world=2, top={"rank": [1]})
    assert sorted(p.name for p in (run.out / "dump").iterdir()) == ["rank1"]
    assert len(list((run.out / "dump" / "rank1").glob("grad_summary_*.csv"))) == 3


@pytest.mark.slow
@needs_gloo
@needs_msprobe
def test_ddp_files_are_byte_identical_to_msprobes(tmp_path_factory):
    ours = peer_run(tmp_path_factory, "ours", "L2", model="mlp", world=2)
    theirs = peer_run(tmp_path_factory, "msprobe", "L2", model="mlp", world=2)
    assert_same_files(ours.out / "dump", theirs.out / "dump")


# --- slow: real models train bit-identically ------------------------------------------------------

ZOO = ["resnet18", "mobilenet_v3_small", "vit", "hf_gpt2", "hf_llama_sdpa", "hf_bert_mlm"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_a_real_model_trains_bit_identically_under_grad_probe(tmp_path, name):
    import real_models
    pytest.importorskip(real_models.MODELS[name].requires)
    losses0, state0, _ = real_models.run(name)
    model, make_batch, make_optimizer = real_models.build(name)
    dbg = monitored(write_config(tmp_path, "L2", bounds=BOUNDS), model)
    losses = real_models.train(model, real_models.batches(make_batch), make_optimizer, debugger=dbg)
    dbg._release()
    state = real_models.state_of(model)
    assert losses == losses0
    assert state.keys() == state0.keys()
    differ = [k for k in state if not torch.equal(state[k], state0[k])]
    assert not differ, f"{len(differ)} of {len(state)} state_dict tensors differ: {differ[:5]}"
    rank = tmp_path / "dump" / "rank0"
    steps = real_models.STEPS
    assert sorted(p.name for p in rank.glob("*.csv")) == [f"grad_summary_{i}.csv" for i in range(steps)]
    # The last step's gradients are still on the parameters (the optimizers step out of place).
    assert_step(rank, steps - 1, read_grads(model), "L2", BOUNDS)


class DoublingSGD(torch.optim.Optimizer):
    """Plain SGD that writes into the gradients during its step (as a fused optimizer unscales
    them), without saying so in its defaults. Its own step, not SGD's through super(): torch 2 calls
    the global step hooks around each class's step, so a nested SGD.step would be a second step."""

    def __init__(self, params: Any, lr: float) -> None:
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(2)
                    p.add_(p.grad, alpha=-group["lr"])
        return None


def test_gradients_are_read_while_the_optimizer_steps_and_copied_once_it_writes_into_them(tmp_path, capfd):
    """The gradients are read by a thread of their own during the optimizer step, which waits at its
    end for them. An optimizer that writes into them meanwhile is found out at the step's end (their
    version moved): said once, and the gradients are copied before every later step, whose
    summaries are then of the gradients the step was given."""
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L1"), model)
    seen = train(model, 4, optimizer=DoublingSGD(model.parameters(), lr=0.1))
    dbg._task.drain()
    err = capfd.readouterr().err
    assert err.count("wrote into") == 1, err
    for step in range(1, 4):  # copied before the step: the gradients as the step was given them
        assert_step(tmp_path / "dump" / "rank0", step, seen[step], "L1", [-1, 0, 1])
    dbg._release()


def test_a_fused_optimizers_gradients_are_copied_before_its_step(tmp_path, capfd):
    model = mlp()
    dbg = monitored(write_config(tmp_path, "L1"), model)
    opt = DoublingSGD(model.parameters(), lr=0.1)
    opt.defaults["maximize"] = True  # what _writes_gradients looks at (fused, maximize, differentiable)
    for group in opt.param_groups:
        group["maximize"] = False  # the step itself as before
    seen = train(model, 2, optimizer=opt)
    dbg._task.drain()
    assert "wrote into" not in capfd.readouterr().err
    for step in range(2):
        assert_step(tmp_path / "dump" / "rank0", step, seen[step], "L1", [-1, 0, 1])
    dbg._release()
