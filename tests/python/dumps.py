"""Dump folders in msprobe's format: builders of dump.json files, written with Python's json module
exactly as msprobe writes them (bare NaN / Infinity tokens included); debuggers of task
overflow_check that write under <tmp>/dump; readers of what a debugger wrote."""
import collections
import json
import math
import pathlib
import sys
from typing import Any, Dict, List, Optional, Tuple

import pytest

from testenv import float32_sums

INF = math.inf
NAN = math.nan


def tensor(mx: float = 1.0, mn: float = 0.0, mean: float = 0.5, norm: float = 1.0,
           dtype: str = "torch.float32", shape: Optional[List[int]] = None) -> Dict[str, Any]:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape or [4, 4], "Max": mx, "Min": mn,
            "Mean": mean, "Norm": norm, "requires_grad": False}


def scalar(value: Any) -> Dict[str, Any]:
    return {"type": type(value).__name__, "value": value}


def forward(args: List[Any], outputs: List[Any], kwargs: Optional[Dict[str, Any]] = None):
    return {"input_args": args, "input_kwargs": kwargs or {}, "output": outputs}


def backward(grads_in: List[Any], grads_out: List[Any]):
    return {"input": grads_in, "output": grads_out}


def data_names(value: Any) -> List[str]:
    """Every `data_name` in a dump.json's data (or any part of it), in file order."""
    found: List[str] = []
    if isinstance(value, dict):
        if "data_name" in value:
            found.append(value["data_name"])
        for v in value.values():
            found += data_names(v)
    elif isinstance(value, list):
        for v in value:
            found += data_names(v)
    return found


def write_dump(path: pathlib.Path, data: Dict[str, Any], task: str = "overflow_check") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"task": task, "level": "L1", "dump_data_dir": None, "data": data}
    path.write_text(json.dumps(doc, indent=1))
    return path


# --- debuggers of task overflow_check, writing to <tmp>/dump ---------------------------------------
# msprobe_cpp and torch are imported where they are used: the check tests build dumps with neither.

# The levels the guard's everyday-idiom tests run at: API calls alone, and with modules.
LEVELS = ["L1", "mix"]


def guard(tmp_path: pathlib.Path, level: str, **kw: Any):
    """Configured by keywords, as a user's script does."""
    import msprobe_cpp
    return msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), level=level,
                                         **kw)


def debugger(tmp_path: pathlib.Path, **overflow: Any):
    """Configured by a config.json: `level` and `step` at its top, the rest in its overflow_check."""
    import msprobe_cpp
    top = {k: overflow.pop(k) for k in ("level", "step", "extra_apis") if k in overflow}
    config = {"task": "overflow_check", "dump_path": str(tmp_path / "dump"), **top, "overflow_check": overflow}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return msprobe_cpp.PrecisionDebugger(config_path=str(path))


# --- what a debugger wrote ---------------------------------------------------------------------------

def settle() -> None:
    """The live debugger's steps, handed to its writer thread (async_dump, on by default under
    statistics and tensor), on disk before this process reads them, as a script that reads its
    own dump while it trains calls drain()."""
    module = sys.modules.get("msprobe_cpp")
    live = getattr(getattr(module, "PrecisionDebugger", None), "_instance", None)
    if live is not None:
        live.drain()


def load(folder: pathlib.Path, name: str = "dump.json") -> Dict[str, Any]:
    """One JSON file of a step folder. json.loads alone would keep the last of two equal keys
    silently: two records under one name would read as one lost record."""
    settle()
    path = folder / name

    def no_duplicate_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        seen = collections.Counter(k for k, _ in pairs)
        twice = sorted(k for k, n in seen.items() if n > 1)
        assert not twice, f"{path}: names written twice (one record hides another): {twice[:5]}"
        return dict(pairs)

    return json.loads(path.read_text(), object_pairs_hook=no_duplicate_keys)


def steps_on_disk(tmp_path: pathlib.Path) -> List[str]:
    """Every entry of <tmp>/dump by name, sorted as text ("step10" before "step2")."""
    settle()
    dump = tmp_path / "dump"
    return sorted(p.name for p in dump.iterdir()) if dump.exists() else []


def dumped_steps(tmp_path: pathlib.Path) -> List[int]:
    """The step numbers of <tmp>/dump/step<S> folders, in numeric order."""
    settle()
    dump = tmp_path / "dump"
    return sorted(int(p.name[4:]) for p in dump.glob("step*")) if dump.exists() else []


def report(tmp_path: pathlib.Path, step: int) -> Dict[str, Any]:
    return load(tmp_path / "dump" / f"step{step}" / "rank", "overflow_report.json")


def assert_stats(entry: Dict, t) -> None:
    """`entry` describes tensor `t` with statistics equal to a float64 recomputation. On the device
    path Mean and Norm accumulate in float32 (float64 for float64 tensors), and get a float32
    tolerance; Max and Min are exact either way."""
    import torch
    assert entry["type"] == "torch.Tensor"
    assert entry["dtype"] == str(t.dtype)
    assert entry["shape"] == list(t.shape)
    d = t.detach().cpu().double()
    ref = {"Max": d.max().item(), "Min": d.min().item(), "Mean": d.mean().item(), "Norm": d.norm().item()}
    sums32 = float32_sums(t)
    rel = 1e-5 if sums32 and t.dtype != torch.float64 else 1e-6
    for key, value in ref.items():
        # A mean near zero is a difference of large sums: its error is bounded by the norm's scale,
        # on the CPU path too (its float32 sums are blocked, not exact: seed 33's 64x64 randn has a
        # mean of 1.6e-3 off by 1.7e-9, which a relative 1e-6 alone refused).
        abs_tol = rel * ref["Norm"] / max(t.numel(), 1) ** 0.5 if key == "Mean" else 1e-300
        assert entry[key] == pytest.approx(value, rel=rel, abs=abs_tol), key
