"""One rank of the FSDP2 runs that test_fsdp2.py starts: ddp_worker.py's loop with the model's
blocks and root wrapped by torch.distributed.fsdp.fully_shard (torch 2.x) instead of
DistributedDataParallel. The same arguments; the state saved is each rank's local shards.

    RANK=<r> WORLD_SIZE=<n> MASTER_ADDR=127.0.0.1 MASTER_PORT=<p> python3 fsdp_worker.py OUT [options]
"""
import sys

import ddp_worker

if __name__ == "__main__":
    ddp_worker.main(["--wrap", "fsdp2"] + sys.argv[1:])
