"""Builders for dump.json files in msprobe's format, written with Python's json module exactly as
msprobe writes them (bare NaN / Infinity tokens included)."""
import json
import math
import pathlib
from typing import Any, Dict, List, Optional

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
