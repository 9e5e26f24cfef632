"""One rank of the 2-process gloo run that test_distributed.py starts.

    RANK=<r> WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=<p> python3 dist_worker.py CONFIG OUT_DIR

Trains one step of a tiny model under msprobe_cpp.PrecisionDebugger(config_path=CONFIG), averaging
the gradients with torch.distributed.all_reduce, and writes OUT_DIR/expected_rank<r>.json with the
float64 Max/Min of the input it fed to the model, for the test to compare with the dump.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

import msprobe_cpp


def main() -> None:
    config_path, out_dir = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(1234)  # identical weights on every rank
        model = torch.nn.Linear(8, 4)
        torch.manual_seed(1234 + 1 + rank)  # different data per rank
        x = torch.randn(3, 8)
        x64 = x.double()
        # Linear's weight gradient for loss = sum(outputs) is x summed over the batch, in every row:
        # the all_reduce of that gradient sees it before the reduction (in-place calls are
        # recorded on their inputs as they were before the call).
        local_grad = x64.sum(0)
        expected = {"rank": rank, "Max": x64.max().item(), "Min": x64.min().item(),
                    "grad_Max": local_grad.max().item(), "grad_Min": local_grad.min().item()}

        debugger = msprobe_cpp.PrecisionDebugger(config_path=config_path)
        debugger.start(model)
        loss = model(x).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)  # through the module attribute, so the hooked one
            p.grad.div_(world_size)
        group = dist.new_group([0, 1])
        dist.all_reduce(torch.ones(2), group=group)  # a process group argument, as msprobe records it
        debugger.stop()
        debugger.step()

        # The averaged gradient must be the same on both ranks: proves the collective really ran.
        expected["grad_sum"] = sum(p.grad.double().sum().item() for p in model.parameters())
        path = os.path.join(out_dir, f"expected_rank{rank}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(expected, f)
        os.replace(path + ".tmp", path)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
