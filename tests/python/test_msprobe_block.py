"""Our dumps of msprobe's own block model (shared/fixtures/msprobe-1.1.1/block_model.py, copied to
tests/data) against msprobe 1.1.1's dumps of it: the file names msprobe's compare matches rows by,
construct.json, stack.json, md5 and the *_except_inf_nan fields.

The wrap lists still differ (ours records Tensor.split/view/to/float, which msprobe 1.1.1's tensor
section lacks), so records are compared where both have them. Values computed after the first
matmul depend on the BLAS the run used (msprobe's fixture was made with another one), so md5s are
compared on the tensors the step starts from and by the rule msprobe follows.
"""
import importlib.util
import json
import math
import pathlib
from typing import Any, Dict, Tuple

import pytest
import torch

import msprobe_cpp
from dumps import data_names, load
from testenv import FIXTURES, devices


def block_model():
    spec = importlib.util.spec_from_file_location("block_model", FIXTURES / "block_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(tmp_path: pathlib.Path, task: str, level: str, md5: bool = False) -> pathlib.Path:
    """The fixture's step under our debugger, configured as the fixture was."""
    bm = block_model()
    model, opt, x, y = bm.make()
    config: Dict[str, Any] = {"task": task, "dump_path": str(tmp_path / "dump"), "level": level, "step": [0]}
    if md5:
        config["statistics"] = {"summary_mode": "md5"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path), model=model)
    for _ in range(2):
        dbg.start()
        bm.train_step(model, opt, x, y)
        dbg.stop()
        dbg.step()
    return tmp_path / "dump" / "step0" / "rank"


# torch 2.x's SGD starts a momentum buffer with `grad.detach().clone()` where 1.13's (the fixture's
# torch) calls `torch.clone(d_p).detach()`: the same call, named as the running torch makes it.
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def this_torchs(name: str) -> str:
    return name.replace("Torch.clone.", "Tensor.clone.") if TORCH2 else name


def recorded_here(theirs: Dict[str, Any]) -> Dict[str, Any]:
    """The fixture's records that msprobe's wrap list records on this torch: the optimizer's clones
    are torch.clone calls on 1.13 (recorded) but Tensor.clone on 2.x, which the list lacks."""
    return {n: v for n, v in theirs.items() if not (TORCH2 and n.startswith("Torch.clone."))}


def both(ours: Dict[str, Any], theirs: Dict[str, Any]) -> Tuple[str, ...]:
    return tuple(n for n in theirs if this_torchs(n) in ours)


def test_tensor_file_names_are_msprobes(tmp_path):
    folder = run(tmp_path, "tensor", "L1")
    ours, theirs = load(folder, "dump.json")["data"], load(FIXTURES / "block_tensor_L1", "dump.json")["data"]
    common = both(ours, theirs)
    assert len(common) == len(recorded_here(theirs))  # every msprobe record is ours too
    for name in common:
        assert data_names(ours[this_torchs(name)]) == [this_torchs(n) for n in data_names(theirs[name])], name
    assert "Functional.cross_entropy.0.forward.kwargs.weight.pt" in data_names(ours["Functional.cross_entropy.0.forward"])
    on_disk = {p.name for p in (folder / "dump_tensor_data").iterdir()}
    here = recorded_here(theirs)
    theirs_on_disk = {this_torchs(p.name) for p in (FIXTURES / "block_tensor_L1" / "dump_tensor_data").iterdir()
                      if p.name.split(".forward")[0].split(".backward")[0] + ".forward" in here}
    # The same wrap list: the same files, nothing more.
    assert on_disk == theirs_on_disk
    # Every saved tensor loads, and the batch and weights the step starts from are msprobe's.
    for name in ("Functional.linear.0.forward.input.0.pt", "Functional.linear.0.forward.input.1.pt",
                 "Functional.cross_entropy.0.forward.kwargs.weight.pt"):
        assert torch.equal(torch.load(folder / "dump_tensor_data" / name),
                           torch.load(FIXTURES / "block_tensor_L1" / "dump_tensor_data" / name)), name


def test_construct_and_stack_are_msprobes(tmp_path):
    folder = run(tmp_path, "statistics", "mix")
    ours, theirs = load(folder, "construct.json"), load(FIXTURES / "block_stat_mix", "construct.json")
    common = both(ours, theirs)
    assert len(common) == len(recorded_here(theirs))
    assert {n: ours[this_torchs(n)] for n in common} == recorded_here(theirs)
    assert ours["Module.mlp.0.Linear.backward.0"] == "Module.mlp.Sequential.backward.0"
    assert ours["Functional.linear.6.backward"] is None
    data = load(folder, "dump.json")["data"]
    backward = {n for n in data if n.endswith(".backward") or ".backward." in n}
    assert set(load(folder, "stack.json")) == set(data) - backward
    assert set(load(FIXTURES / "block_stat_mix", "stack.json")) == set(theirs) - backward


def test_md5_as_msprobe_computes_it(tmp_path):
    folder = run(tmp_path, "statistics", "L1", md5=True)
    ours = load(folder, "dump.json")["data"]
    theirs = load(FIXTURES / "block_md5_L1", "dump.json")["data"]
    # What the step starts from (the batch, the weights) does not depend on any BLAS.
    first = "Functional.linear.0.forward"
    for i in range(3):
        assert ours[first]["input_args"][i]["md5"] == theirs[first]["input_args"][i]["md5"], i
    # bfloat16 goes through float32 (numpy has none): in both dumps the bf16 input of torch.mul has
    # the md5 of the float32 copy `.float()` makes of the same values.
    for dump in (ours, theirs):
        assert dump["Torch.mul.0.forward"]["output"][0]["dtype"] == "torch.bfloat16"
        assert dump["Torch.mul.0.forward"]["output"][0]["md5"] == dump["Tensor.mean.0.forward"]["input_args"][0]["md5"]


def test_except_inf_nan_fields_where_msprobe_writes_them(tmp_path):
    folder = run(tmp_path, "statistics", "L1")
    ours = load(folder, "dump.json")["data"]
    theirs = load(FIXTURES / "block_stat_L1", "dump.json")["data"]
    for name in both(ours, theirs):
        for side in ("input_args", "output"):
            for a, b in zip(theirs[name].get(side, []), ours[this_torchs(name)].get(side, [])):
                if isinstance(a, dict) and a.get("type") == "torch.Tensor":
                    assert [k for k in a if "except" in k] == [k for k in b if "except" in k], (name, side)
    out = ours["Tensor.masked_fill.0.forward"]["output"][0]
    assert list(out)[-1] == "Min_except_inf_nan" and out["Min"] == float("-inf")
    finite = out["Min_except_inf_nan"]
    assert finite == pytest.approx(ours["Tensor.masked_fill.0.forward"]["input_args"][0]["Min"], rel=1e-6)


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_except_inf_nan_values(tmp_path, device):
    x = torch.tensor([1.0, float("inf"), -2.0, float("nan")] * 600, device=device)
    all_nan = torch.full((3000,), float("nan"), device=device)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=[0])
    dbg.start()
    torch.clone(x)
    torch.clone(all_nan)
    dbg.stop()
    data = load(tmp_path / "step0" / "rank", "dump.json")["data"]
    e = data["Torch.clone.0.forward"]["input_args"][0]
    assert (e["Max_except_inf_nan"], e["Min_except_inf_nan"]) == (1.0, -2.0)
    e = data["Torch.clone.1.forward"]["input_args"][0]
    assert e["Max_except_inf_nan"] != e["Max_except_inf_nan"] and e["Min_except_inf_nan"] != e["Min_except_inf_nan"]


def test_statistics_agree_with_msprobes_within_rtol(tmp_path):
    """Same keys and value kinds in every entry; Max/Min/Norm within rtol 1e-5 (our sums are float64,
    msprobe's float32, and the BLAS differs; a 16-bit tensor's within its dtype's epsilon, since
    msprobe computes them in that dtype); Mean too unless it is near zero, where float32
    accumulation is noise; the inputs of in-place calls aside (we record them before the call)."""
    folder = run(tmp_path, "statistics", "L1")
    ours = load(folder, "dump.json")["data"]
    theirs = load(FIXTURES / "block_stat_L1", "dump.json")["data"]
    checked = nonfinite = 0

    def compare(a: Any, b: Any, where: str, in_place_input: bool) -> None:
        nonlocal checked, nonfinite
        if isinstance(a, list):
            assert isinstance(b, list) and len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                compare(x, y, f"{where}[{i}]", in_place_input)
            return
        if not isinstance(a, dict):
            assert a == b, where
            return
        assert list(a) == list(b), where  # the same keys, in the same order
        for key, x in a.items():
            y = b[key]
            assert type(x) is type(y) or {type(x), type(y)} <= {int, float}, (where, key)
            if key in ("Max", "Min", "Norm", "Mean", "Max_except_inf_nan", "Min_except_inf_nan") \
                    and isinstance(x, float) and not in_place_input:
                scale = max(abs(a.get("Max") or 0.0), abs(a.get("Min") or 0.0))
                # msprobe's statistics of a 16-bit tensor are 16-bit numbers: rounded to its epsilon.
                rtol = {"torch.bfloat16": 2.0 ** -7, "torch.float16": 2.0 ** -10}.get(a.get("dtype"), 1e-5)
                slack = rtol * abs(x) + (1e-6 * scale if key == "Mean" else 0.0)
                if math.isfinite(x):
                    assert abs(x - y) <= slack, (where, key, x, y)
                    checked += 1
                else:  # NaN where msprobe has NaN; an infinity of msprobe's sign
                    assert (math.isnan(y) if math.isnan(x) else y == x), (where, key, x, y)
                    nonfinite += 1
            elif key not in ("Max", "Min", "Norm", "Mean", "Max_except_inf_nan", "Min_except_inf_nan"):
                if not isinstance(x, (dict, list)):
                    assert x == y or (x != x and y != y), (where, key)
                else:
                    compare(x, y, f"{where}.{key}", in_place_input)

    for name in both(ours, theirs):
        in_place = name.split(".")[1].endswith("_") and not name.split(".")[1].endswith("__")
        for side, entries in theirs[name].items():
            compare(entries, ours[this_torchs(name)][side], f"{name}.{side}", in_place and side == "input_args")
    assert checked > 500
    # Min, Mean and Norm of the masked attention scores: masked_fill's output, softmax's input.
    assert nonfinite == 6
