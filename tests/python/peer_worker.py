"""One rank of the 3-process gloo run that test_peer_stop.py starts.

    RANK=<r> WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=<p> python3 peer_worker.py OUT BAD_RANK BAD_STEP [MODE [STEPS]]

Trains a small model with gradients averaged by all_reduce under task overflow_check; rank
BAD_RANK's batch holds a NaN at step BAD_STEP. MODE "continue" runs with action continue (nobody
stops); MODE "fp16" instead all_reduces a float16 tensor whose sum overflows (40000 on ranks 0
and 1); MODEs "uncoordinated" and "bare" (bench/peer_stop_overhead.py) run without the
coordinated stop and without the debugger. STEPS (default 5) steps. Writes OUT/result_rank<r>.json: what it raised (or that it finished), and when.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import msprobe_cpp


def main() -> None:
    out, bad_rank, bad_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "nan"
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    if mode == "uncoordinated":  # bench/peer_stop_overhead.py: the same run without the coordination
        msprobe_cpp.peer_stop.create = lambda session: None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = {"rank": rank, "raised": False}
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=os.path.join(out, "dump"),
                                                 level="L1", overflow_nums=-1,
                                                 action="raise" if mode == "nan" else "continue")
        if mode == "fp16":
            debugger.start()
            t = torch.full((4,), 40000.0 if rank < 2 else 0.0, dtype=torch.float16)
            dist.all_reduce(t)
            debugger.stop()
            debugger.step()
            return
        g = torch.Generator().manual_seed(100 + rank)
        if mode == "bare":
            debugger = None
        started = time.perf_counter()
        for step in range(steps):
            x, y = torch.randn(4, 8, generator=g), torch.randint(0, 2, (4,), generator=g)
            if rank == bad_rank and step == bad_step:
                x[1, 3] = float("nan")
            if debugger is not None:
                debugger.start(model)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(world)
            opt.step()
            opt.zero_grad()
            if debugger is not None:
                debugger.stop()
                debugger.step()
        result["seconds_per_step"] = (time.perf_counter() - started) / steps
    except msprobe_cpp.OverflowError as e:
        result.update(raised=True, at=time.time(), message=str(e), peer_stop=e.peer_stop, call=e.call,
                      step=e.step, peer_rank=getattr(e, "peer_rank", None))
    finally:
        with open(os.path.join(out, f"result_rank{rank}.json"), "w") as f:
            json.dump(result, f)
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a peer may have gone already
            pass


if __name__ == "__main__":
    main()
