"""The ranks of ddp_worker.py started by torch.multiprocessing.spawn from one launcher process
(what test_ddp.py runs through dist_runs.run_ranks(..., spawn=True)):

    python3 ddp_spawn.py OUT WORLD [ddp_worker.py options]

Each spawned rank sets RANK/WORLD_SIZE/LOCAL_RANK and runs ddp_worker.main(), which catches and
records whatever ends the run (msprobe_cpp.OverflowError included) in OUT/result_rank<r>.json, so
mp.spawn joins without a ProcessRaisedException. MASTER_ADDR/MASTER_PORT: from the environment,
else 127.0.0.1 and a free port. OUT/spawn_joined is written once mp.spawn has joined every rank."""
import os
import pathlib
import sys

import torch.multiprocessing as mp


def rank_main(rank: int, world: int, out: str, argv: list) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import ddp_worker
    ddp_worker.main([out, *argv])


def main() -> None:
    out, world, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    pathlib.Path(out).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        from gloo import free_port
        os.environ["MASTER_PORT"] = str(free_port())
    mp.spawn(rank_main, args=(world, out, argv), nprocs=world, join=True)
    pathlib.Path(out, "spawn_joined").write_text("joined\n")


if __name__ == "__main__":
    main()
