"""This process's torch.distributed rank, as every task names its folders and gates its ranks."""
import torch


def current_rank() -> int:
    """torch.distributed's rank, or -1 when it is not initialized (folder `rank`, `proc<pid>`)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return -1
