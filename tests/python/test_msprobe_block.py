"""Our dumps of msprobe's own block model (tests/data/msprobe-1.1.1/block_model.py) against msprobe
1.1.1's dumps of it, file for file: the same call names in the same order, the same keys and value
kinds in every entry, the same data_names and .pt files, md5 equal, Max/Min equal, Mean/Norm within
rtol 1e-5, and every .pt torch.equal to msprobe's.

Computed values depend on the BLAS bit for bit, so each dump runs in a process of its own
(block_dump.py) with the BLAS the test chooses, and is compared with the fixture set of the BLAS
that process reports it loaded: Debian's reference BLAS (tests/data/msprobe-1.1.1/block_*) or
OpenBLAS (.../openblas/block_*). The fixtures were made on Debian's torch; on another torch (the
torch 2 venv), msprobe 1.1.1 itself dumps the same model in the same environment instead.

The documented exceptions (README, "Files msprobe would have written"): the inputs of in-place
calls (the tensor the call overwrites: we record it before the call, msprobe after it), and Mean/Norm, which we accumulate in
float64 (msprobe in the tensor's dtype)."""
import json
import math
import os
import pathlib
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

import msprobe_cpp
from dist_runs import run_python
from dumps import data_names, load
from msprobe_runs import tool_imports
from testenv import FIXTURES, PACKAGE_ROOT, TESTS, devices

pytestmark = pytest.mark.slow  # tools/test.sh --fast leaves it out

# The torch the fixtures were made with (their README): Debian 12's python3-torch.
FIXTURE_TORCH = "1.13.0a0"
ON_FIXTURE_TORCH = torch.__version__ == FIXTURE_TORCH

LIBS = pathlib.Path("/usr/lib/x86_64-linux-gnu")
# The folders that make the dynamic loader take each BLAS (and a LAPACK that does not bring the
# other one in) whichever one Debian's alternatives made the default.
BLAS_PATHS = {"reference": [LIBS / "blas", LIBS / "lapack"], "openblas": [LIBS / "openblas-pthread"]}
# Debian's OpenBLAS picks its kernels by CPU at load time, and its AVX-512 kernels (SkylakeX, picked
# on AVX-512 machines, AMD's Zen 4 included) round differently from the AVX2 ones the fixtures were
# made with (Haswell and Zen give the same bits). The dumps pin the kernel so that every machine
# computes what the fixtures hold.
OPENBLAS_KERNEL = {"OPENBLAS_CORETYPE": "Haswell"}

# The fixture folders: name -> (task, level, summary_mode).
CONFIGS = {
    "block_stat_L1": ("statistics", "L1", "statistics"),
    "block_stat_mix": ("statistics", "mix", "statistics"),
    "block_md5_L1": ("statistics", "L1", "md5"),
    "block_tensor_L1": ("tensor", "L1", None),
}

STATISTICS = ("Max", "Min", "Mean", "Norm", "Max_except_inf_nan", "Min_except_inf_nan")
# msprobe computes a 16-bit tensor's Mean and Norm in its dtype: they are rounded to its epsilon.
EPSILON = {"torch.bfloat16": 2.0 ** -7, "torch.float16": 2.0 ** -10}


def msprobe_importable() -> bool:
    return subprocess.run([sys.executable, "-c", "import msprobe.pytorch"], capture_output=True).returncode == 0


def dump(folder: pathlib.Path, tool: str, fixture: str, blas: Optional[str]) -> Tuple[pathlib.Path, str]:
    """Dumps the block model as `fixture` was made, with `tool` ("ours" or "msprobe"), in a process
    whose loader prefers `blas`. Returns the step folder and the BLAS the process reports."""
    task, level, summary_mode = CONFIGS[fixture]
    section: Dict[str, Any] = {"scope": [], "list": [], "data_mode": ["all"]}
    if summary_mode:
        section["summary_mode"] = summary_mode
    folder.mkdir(parents=True)
    config = folder / "config.json"
    config.write_text(json.dumps({"task": task, "dump_path": str(folder / "dump"), "rank": [], "step": [0],
                                  "level": level, task: section}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]))
    if blas:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(p) for p in BLAS_PATHS[blas]] +
                                                 [os.environ.get("LD_LIBRARY_PATH", "")])
        env.update(OPENBLAS_KERNEL)
    done = run_python([str(TESTS / "block_dump.py"), tool, str(config)], env=env, timeout=600,
                      preload=tool_imports(tool))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])  # msprobe logs to stdout before it
    # The fixtures' loss: the dump did not change the training.
    assert report["losses"][0] == pytest.approx(1.6760698556900024, rel=1e-6)
    return folder / "dump" / "step0" / "rank", report["blas"]


class Pair:
    """Our step folder and msprobe's, of the same model, configuration, torch and BLAS."""

    def __init__(self, ours: pathlib.Path, theirs: pathlib.Path, skip_theirs: Tuple[str, ...] = ()):
        self.ours, self.theirs = ours, theirs
        self.skip_theirs = skip_theirs

    def data(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        theirs = load(self.theirs, "dump.json")["data"]
        return load(self.ours, "dump.json")["data"], {n: v for n, v in theirs.items()
                                                      if not n.startswith(self.skip_theirs)}


# msprobe on torch 2.x records the view_as calls that torch's full backward hooks (which it
# registers on every module at mix/L0) make: its own machinery, which we do not have (README).
MSPROBE_HOOK_ARTIFACTS = ("Tensor.view_as.",)


def params(*fixtures: str) -> List[Any]:
    if ON_FIXTURE_TORCH:
        return [pytest.param((f, b), id=f"{f}-{b}") for b in BLAS_PATHS for f in fixtures]
    return [pytest.param((f, None), id=f"{f}-msprobe-here") for f in fixtures]


_made: Dict[Tuple[str, Optional[str]], Pair] = {}  # each dump once per module, whichever test asks


def make_pair(param: Tuple[str, Optional[str]], tmp_path_factory) -> Pair:
    if param not in _made:
        _made[param] = dump_pair(*param, tmp_path_factory.mktemp(param[0]))
    return _made[param]


def dump_pair(fixture: str, blas: Optional[str], folder: pathlib.Path) -> Pair:
    if ON_FIXTURE_TORCH:
        missing = [str(p) for p in BLAS_PATHS[blas] if not p.is_dir()]
        if missing:
            pytest.skip(f"{blas} BLAS is not installed (no {', '.join(missing)})")
        ours, loaded = dump(folder / "ours", "ours", fixture, blas)
        assert loaded == blas  # the run is the one this case is about
        return Pair(ours, FIXTURES / ("openblas" if loaded == "openblas" else "") / fixture / "step0" / "rank")
    if not msprobe_importable():
        pytest.skip(f"the fixtures were made on torch {FIXTURE_TORCH} and msprobe 1.1.1 is not installed here")
    ours, _ = dump(folder / "ours", "ours", fixture, None)
    theirs, _ = dump(folder / "theirs", "msprobe", fixture, None)
    return Pair(ours, theirs, MSPROBE_HOOK_ARTIFACTS)


@pytest.fixture(scope="module", params=params(*CONFIGS))
def pair(request, tmp_path_factory) -> Pair:
    return make_pair(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=params("block_tensor_L1"))
def tensor_pair(request, tmp_path_factory) -> Pair:
    return make_pair(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=params("block_md5_L1"))
def md5_pair(request, tmp_path_factory) -> Pair:
    return make_pair(request.param, tmp_path_factory)


def in_place(name: str) -> bool:
    api = name.split(".")[1]
    return api.endswith("_") and not api.endswith("__")


class Tally:
    def __init__(self) -> None:
        self.exact = self.close = self.md5 = self.nonfinite = self.skipped = 0


def compare(a: Any, b: Any, where: str, tally: Tally, values: bool) -> None:
    """`a` ours, `b` msprobe's: the same structure, keys in the same order, the same kinds; the
    values too unless `values` is False (the tensor an in-place call overwrote)."""
    if isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, f"{where}[{i}]", tally, values)
        return
    if isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), (where, list(a), list(b))
        for key, y in b.items():
            x = a[key]
            if isinstance(y, (dict, list)):
                compare(x, y, f"{where}.{key}", tally, values)
                continue
            assert type(x) is type(y), (where, key, x, y)
            if not values and key in STATISTICS + ("md5",):
                tally.skipped += 1
            elif isinstance(y, float) and not math.isfinite(y):
                assert math.isnan(x) if math.isnan(y) else x == y, (where, key, x, y)
                tally.nonfinite += 1
            elif key in ("Mean", "Norm") and isinstance(y, float):
                # Our sums are float64, msprobe's in the tensor's dtype: an error of its epsilon
                # times the largest magnitude, which a Mean near zero shows beside rtol.
                rtol = EPSILON.get(b.get("dtype"), 1e-5)
                scale = max(abs(b.get("Max") or 0.0), abs(b.get("Min") or 0.0))
                slack = rtol * abs(y) + (1e-6 * scale if key == "Mean" else 0.0)
                assert abs(x - y) <= slack, (where, key, x, y)
                tally.close += 1
            else:
                assert x == y, (where, key, x, y)
                tally.md5 += key == "md5"
                tally.exact += key in STATISTICS
        return
    assert type(a) is type(b) and (a == b or (a != a and b != b)), (where, a, b)


def test_the_same_calls_in_the_same_order(pair):
    ours, theirs = pair.data()
    assert len(theirs) > 80
    assert list(ours) == list(theirs)


def test_every_entry_as_msprobe_wrote_it(pair):
    ours, theirs = pair.data()
    tally = Tally()
    for name, record in theirs.items():
        for side, entries in record.items():
            if in_place(name) and side == "input_args":  # the tensor the call overwrote aside
                assert len(ours[name][side]) == len(entries), name
                compare(ours[name][side][0], entries[0], f"{name}.{side}[0]", tally, values=False)
                compare(ours[name][side][1:], entries[1:], f"{name}.{side}[1:]", tally, values=True)
            else:
                compare(ours[name][side], entries, f"{name}.{side}", tally, values=True)
    header, their_header = load(pair.ours, "dump.json"), load(pair.theirs, "dump.json")
    assert (header["task"], header["level"]) == (their_header["task"], their_header["level"])
    if any("md5" in e for e in _entries(theirs)):
        assert tally.md5 > 200
    assert tally.exact > 400 and tally.close > 300
    # masked_fill's -inf value, and Min, Mean and Norm of the masked attention scores (masked_fill's
    # output, softmax's input).
    assert tally.nonfinite == 7
    assert tally.skipped > 0  # the optimizer's add_ calls


def _entries(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    found: List[Dict[str, Any]] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if v.get("type") == "torch.Tensor":
                found.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(data)
    return found


def test_every_tensor_file_equal_to_msprobes(tensor_pair):
    pair = tensor_pair
    ours, theirs = pair.data()
    assert data_names(ours) == data_names(theirs)
    assert "Functional.cross_entropy.0.forward.kwargs.weight.pt" in data_names(ours)
    files = sorted(p.name for p in (pair.theirs / "dump_tensor_data").iterdir()
                   if not p.name.startswith(pair.skip_theirs))
    assert sorted(p.name for p in (pair.ours / "dump_tensor_data").iterdir()) == files
    assert sorted(data_names(ours)) == files
    equal = 0
    for name in files:
        if in_place(name) and ".forward.input.0." in name:  # overwritten by the call
            continue
        a = torch.load(pair.ours / "dump_tensor_data" / name)
        b = torch.load(pair.theirs / "dump_tensor_data" / name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
        equal += 1
    assert equal > 200


def test_construct_and_stack_as_msprobes(pair):
    ours, theirs = pair.data()
    construct = {n: p for n, p in load(pair.theirs, "construct.json").items() if not n.startswith(pair.skip_theirs)}
    assert load(pair.ours, "construct.json") == construct
    # A stack entry for each forward record, none for a backward one, in msprobe's order.
    their_stack = [n for n in load(pair.theirs, "stack.json") if not n.startswith(pair.skip_theirs)]
    assert list(load(pair.ours, "stack.json")) == their_stack == [n for n in theirs if ".backward" not in n]


def test_bfloat16_md5_through_float32(md5_pair):
    """numpy has no bfloat16: both tools hash the float32 copy `.float()` makes of the same values,
    so torch.mul's bf16 output and Tensor.mean's float32 input have one md5."""
    ours, theirs = md5_pair.data()
    for dump in (ours, theirs):
        assert dump["Torch.mul.0.forward"]["output"][0]["dtype"] == "torch.bfloat16"
        assert dump["Torch.mul.0.forward"]["output"][0]["md5"] == dump["Tensor.mean.0.forward"]["input_args"][0]["md5"]


def test_the_two_blas_sets_differ():
    """Why the set is chosen by BLAS: the same step gives other bits from the first linear on."""
    reference = load(FIXTURES / "block_md5_L1" / "step0" / "rank", "dump.json")["data"]
    openblas = load(FIXTURES / "openblas" / "block_md5_L1" / "step0" / "rank", "dump.json")["data"]
    assert list(reference) == list(openblas)
    differ = [n for n in reference if reference[n] != openblas[n]]
    assert len(differ) > 50 and "Functional.linear.0.forward" in differ
    assert reference["Functional.linear.0.forward"]["input_args"] == openblas["Functional.linear.0.forward"]["input_args"]


def test_masked_fill_keeps_its_finite_minimum(tmp_path):
    """The masked scores: Min is -inf, Min_except_inf_nan the finite minimum of its input."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("block_model", FIXTURES / "block_model.py")
    bm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bm)
    model, opt, x, y = bm.make()
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=[0], model=model)
    dbg.start()
    bm.train_step(model, opt, x, y)
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    data = load(tmp_path / "step0" / "rank", "dump.json")["data"]
    out = data["Tensor.masked_fill.0.forward"]["output"][0]
    assert list(out)[-1] == "Min_except_inf_nan" and out["Min"] == float("-inf")
    assert out["Min_except_inf_nan"] == pytest.approx(data["Tensor.masked_fill.0.forward"]["input_args"][0]["Min"],
                                                      rel=1e-6)


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_except_inf_nan_values(tmp_path, device):
    x = torch.tensor([1.0, float("inf"), -2.0, float("nan")] * 600, device=device)
    all_nan = torch.full((3000,), float("nan"), device=device)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=[0])
    dbg.start()
    torch.clone(x)
    torch.clone(all_nan)
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    data = load(tmp_path / "step0" / "rank", "dump.json")["data"]
    e = data["Torch.clone.0.forward"]["input_args"][0]
    assert (e["Max_except_inf_nan"], e["Min_except_inf_nan"]) == (1.0, -2.0)
    e = data["Torch.clone.1.forward"]["input_args"][0]
    assert e["Max_except_inf_nan"] != e["Max_except_inf_nan"] and e["Min_except_inf_nan"] != e["Min_except_inf_nan"]
