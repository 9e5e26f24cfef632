"""One rank of test_stop_protocol.py's training run: the process group's store reached through the
test's counting proxy, so that the proxy sees every store request the rank makes, the tool's
watcher included. Trains a small DDP model under overflow_check until told to go home."""
import os
import sys
import time
from datetime import timedelta


def train(rank: int, world: int, proxy_port: int, dump: str, warm, go_home, package_root: str) -> None:
    sys.path.insert(0, package_root)
    import torch
    import torch.distributed as dist
    import msprobe_cpp

    store = dist.TCPStore("127.0.0.1", proxy_port, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", level="L1", dump_path=dump)
    step, leaving = 0, torch.zeros(1)
    while not leaving.item():
        debugger.start(model)
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
        step += 1
        if step == 3:
            warm[rank] = 1
        time.sleep(0.02)
        # The ranks leave after the same step: one that left alone would sit in the barrier
        # while the other waited in its next step's all-reduce, and both would hang.
        leaving = torch.tensor([float(go_home.is_set())])
        dist.all_reduce(leaving, op=dist.ReduceOp.MAX)
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)
