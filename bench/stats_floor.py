"""The floor of a configuration's step cost: the time to compute the statistics of the step's
distinct tensor versions once, with no hooks (issue 24). The step's tensors are taken from a task
`tensor` dump of one step at the configuration's level (every record's tensors, forward and
backward, as .pt files), deduplicated by content (a version recorded as one call's output and the
next call's input is one read), and their statistics are computed with the hooks' own kernel
(_C._tensor_statistics), best of several passes."""
from __future__ import annotations

import hashlib
import json
import pathlib
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, List

import torch


@dataclass
class Floor:
    ms: float          # statistics of every distinct tensor version once
    distinct: int      # distinct tensor versions
    entries: int       # tensor entries in the step's records
    megabytes: float   # bytes of the distinct versions
    every_entry_ms: float  # statistics of every entry, repeats included (no cache at all)


def step_tensors(Debugger: Any, level: str, model: torch.nn.Module,
                 train_step: Callable[[], None]) -> List[torch.Tensor]:
    """Every tensor of one step's records, loaded back from a task tensor dump."""
    with tempfile.TemporaryDirectory(prefix="stats_floor_") as tmp:
        config = pathlib.Path(tmp) / "config.json"
        config.write_text(json.dumps({"task": "tensor", "dump_path": str(pathlib.Path(tmp) / "dump"),
                                      "level": level, "step": [0]}))
        debugger = Debugger(config_path=str(config))
        debugger.start(model)
        train_step()
        debugger.stop()
        debugger.step()
        del debugger
        files = sorted((pathlib.Path(tmp) / "dump").glob("step0/rank*/dump_tensor_data/*.pt"))
        return [torch.load(f) for f in files]


def measure(tensors: List[torch.Tensor], passes: int = 5) -> Floor:
    from msprobe_cpp import _C
    distinct = {}
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        key = (str(t.dtype), tuple(t.shape), hashlib.md5(raw).hexdigest())
        distinct.setdefault(key, t)
    chosen = list(distinct.values())
    every = [t for t in tensors if isinstance(t, torch.Tensor)]

    def best_ms(ts: List[torch.Tensor]) -> float:
        best = float("inf")
        for _ in range(passes):
            start = time.perf_counter()
            for t in ts:
                _C._tensor_statistics(t)
            best = min(best, time.perf_counter() - start)
        return 1e3 * best
    size = sum(t.numel() * t.element_size() for t in chosen)
    return Floor(ms=best_ms(chosen), distinct=len(chosen), entries=len(every), megabytes=size / 2 ** 20,
                 every_entry_ms=best_ms(every))
