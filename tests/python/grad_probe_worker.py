"""One process of a grad_probe run for tests/python/test_grad_probe.py, started through
dist_runs.run_ranks (worker=...), so that msprobe's never-removed optimizer hook and ours never
meet, and a hang is killed:

    RANK=<r> WORLD_SIZE=<n> MASTER_ADDR=... MASTER_PORT=... python3 grad_probe_worker.py OUT \\
        --tool ours|msprobe|none --config CFG [--model mlp|edge] [--seed S] [--steps N] [--ddp]

Trains `--model` (seeded by --seed; its batches by --seed and the rank) for --steps optimizer
steps of SGD under `PrecisionDebugger(config_path=CFG).monitor(model)` of msprobe_cpp (ours) or of
msprobe 1.1.1 (msprobe), or without a tool (none). --ddp: torch.distributed on gloo, the model
wrapped in DistributedDataParallel (the debugger monitors the wrapped module: names without
"module."). One thread, so that both tools' processes compute the same bits.

Writes OUT/pid_rank<r> at its start; at its end OUT/grads_rank<r>.pt (for each optimizer step,
{name: gradient} as read right before optimizer.step(): after DDP's averaging) and
OUT/result_rank<r>.json ({"rank", "losses": float.hex of each loss}).
"""
import argparse
import json
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_process import begin, debugger_of


class Edge(nn.Module):
    """The parameters a summary has to get right: a transposed (non-contiguous) one, a 0-d one,
    float16 and bfloat16 ones, one the forward never uses (its grad stays None), gradients with
    exact zeros (after ReLU)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.wt = nn.Parameter(torch.randn(3, 8).t())  # [8, 3], strides (1, 8)
        self.scale = nn.Parameter(torch.tensor(0.5))
        self.h16 = nn.Parameter(torch.randn(3).half())
        self.b16 = nn.Parameter(torch.randn(3).bfloat16())
        self.unused = nn.Parameter(torch.randn(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc(x)) @ self.wt * self.scale
        return h + (h.detach().half() * self.h16).float() + (h.detach().bfloat16() * self.b16).float()


def make_model(name: str) -> nn.Module:
    if name == "mlp":
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    if name == "edge":
        return Edge()
    raise ValueError(name)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--tool", choices=["ours", "msprobe", "none"], required=True)
    p.add_argument("--config", default=None)
    p.add_argument("--model", default="mlp")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ddp", action="store_true")
    args = p.parse_args()
    out, rank = begin(args.out, args.ddp)
    torch.manual_seed(args.seed)
    model = make_model(args.model)
    debugger = debugger_of(args.tool, args.config)
    if debugger is not None:
        debugger.monitor(model)
    trained = nn.parallel.DistributedDataParallel(model) if args.ddp else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1000 * args.seed + rank)
    grads: List[Dict[str, torch.Tensor]] = []
    losses: List[str] = []
    for _ in range(args.steps):
        x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
        optimizer.zero_grad()
        loss = F.cross_entropy(trained(x), y)
        loss.backward()
        grads.append({n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None})
        optimizer.step()
        losses.append(loss.item().hex())
    if args.tool == "ours":
        debugger._task.drain()
    torch.save(grads, out / f"grads_rank{rank}.pt")
    (out / f"result_rank{rank}.json").write_text(json.dumps({"rank": rank, "losses": losses}))
    if args.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
