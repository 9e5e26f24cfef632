"""What a worker process of a peer comparison (grad_probe_worker.py, free_benchmark_worker.py)
does first: its folder, its pid for dist_runs, one thread, gloo when asked; and the debugger of
the tool it runs (ours, msprobe 1.1.1's, or none)."""
import os
import pathlib
from typing import Any, Optional, Tuple

import torch


# What a tool's run imports besides torch: imported once by the warm server its ranks are forked
# from (dist_runs.run_ranks's preload), not seconds again in every rank.
PEER_IMPORTS = {"msprobe": ("msprobe.pytorch",)}


def begin(out: str, distributed: bool) -> Tuple[pathlib.Path, int]:
    """(the output folder, this process's rank)."""
    folder = pathlib.Path(out)
    rank = int(os.environ.get("RANK", "0"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"pid_rank{rank}").write_text(str(os.getpid()))
    torch.set_num_threads(1)
    if distributed:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    return folder, rank


def debugger_of(tool: str, config: Optional[str]) -> Any:
    if tool == "none":
        return None
    if tool == "ours":
        from msprobe_cpp import PrecisionDebugger
    else:
        from msprobe.pytorch import PrecisionDebugger
    return PrecisionDebugger(config_path=config)
