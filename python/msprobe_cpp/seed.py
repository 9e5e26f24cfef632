"""msprobe's seed_all: the same seeds and switches, so that a run can be repeated."""
import os
import random

import torch

from . import log


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seeds random, PYTHONHASHSEED, numpy (when installed), torch and CUDA; `mode=True` also makes
    torch use deterministic algorithms (an op without one raises), and on CUDA turns cuDNN's
    deterministic switch on and its benchmark off, as msprobe 1.1.1's seed_all does."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed_all: seed must be an int, got {type(seed).__name__} {seed!r}")
    if not isinstance(mode, bool):
        raise TypeError(f"seed_all: mode must be a bool, got {type(mode).__name__} {mode!r}")
    try:
        _seed(seed, mode)
    except Exception as e:  # noqa: BLE001 - as msprobe: a failure here is told, training goes on
        log.warn(f"seed_all({seed}, {mode}) failed: {e}")


def _cuda_at_least(major: int, minor: int) -> bool:
    version = torch.version.cuda
    if not version:
        return False
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    return tuple(parts) >= (major, minor)


def _seed(seed: int, mode: bool) -> None:
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)
    if _cuda_at_least(10, 2):  # what cuBLAS needs to be deterministic
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    os.environ["HCCL_DETERMINISTIC"] = str(mode)  # Ascend's collectives read it
    torch.use_deterministic_algorithms(mode)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        torch.cuda.manual_seed(seed)
        # msprobe 1.1.1 also writes `cudnn.enable = False`, an attribute torch never reads: cuDNN
        # stays on there. Writing `enabled` instead (as this did) turned cuDNN off on every CUDA
        # run: slower, and other kernels than msprobe's run (issue 33).
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
