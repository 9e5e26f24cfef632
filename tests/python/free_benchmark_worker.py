"""One process of a free_benchmark run for tests/python/test_free_benchmark.py, started through
dist_runs.run_ranks (worker=...), so that msprobe's hooks (never removed; its PrecisionDebugger is a
singleton) and ours never meet, and a hang is killed:

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=... MASTER_PORT=... python3 free_benchmark_worker.py OUT \\
        --tool ours|msprobe|none --config CFG --case calls|explained|mlp32|bf16 [--steps N] [--dist]

Runs --case for --steps steps, each one `start()`, the case's step, `stop()`, `step()`, under
`PrecisionDebugger(config_path=CFG)` of msprobe_cpp (ours) or of msprobe 1.1.1 (msprobe), or without
a tool (none). --dist: torch.distributed on gloo first (world 1): msprobe 1.1.1 writes no row
outside it (torch 2's get_rank raises ValueError there, which it does not catch). One thread, so
that both tools' processes compute the same bits.

Cases:
- calls: deterministic CPU calls (torch 2's float16 kernels), several of them precision-sensitive
  on purpose; the data change with the step;
- explained: the calls msprobe runs again and we do not: an in-place add_ and +=, a dropout, a
  bernoulli draw (and under --dist an all_reduce, which neither runs again); then torch.rand, whose numbers tell whether the tool drew from the generator;
- mlp32 / bf16: a small model (float32 / bfloat16) trained with SGD, with one dropout, in-place ops
  (ReLU(inplace=True), add_) and masks. The global generator is seeded at each step's start, so
  that msprobe's second draw of the step's one dropout changes nothing later.

Writes OUT/pid_rank<r> at its start; at its end OUT/result_rank<r>.json ({"rank", "losses":
float.hex of each loss, "values": float.hex of what the case wants seen}), for the models
OUT/state_rank<r>.pt (the state_dict after training), for calls OUT/outputs_rank<r>.pt (every
output tensor as the program got it: after a fix, or msprobe's writes into it).
"""
import argparse
import json
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_process import begin, debugger_of


def seeded(*shape: int, seed: int, dtype: torch.dtype = torch.float32, lo: float = 0.0,
           scale: float = 1.0) -> torch.Tensor:
    """Uniform [lo, lo + scale) numbers of a private generator, in `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * scale + lo).to(dtype)


def calls(step: int, kept: List[torch.Tensor]) -> None:
    """Each output tensor goes to `kept` (a tuple's one by one), as the call left it."""

    def keep(*outputs: Any) -> None:
        for o in outputs:
            kept.extend(o if isinstance(o, tuple) else [o])

    h, b = torch.float16, torch.bfloat16
    s = 100 * step
    keep(torch.exp(torch.tensor([[0.5, 1], [2, 3]], dtype=h) + step))
    keep(torch.mul(torch.tensor([[1, 2, 3], [4, 0.5, 6]], dtype=b), 1.0))
    keep(torch.max(torch.tensor([[1, 5, 2], [3, 1, 4]], dtype=h) * (step + 1), dim=1))  # a tuple, int indices
    keep(torch.add(torch.empty(0, dtype=h), 1.0))  # an empty output: max_rel -inf
    keep(torch.sum(torch.full((4096,), 1e-3, dtype=h)))  # many small float16 values
    keep(torch.sum(torch.tensor([1000.0, 0.01, -999.99], dtype=h)))  # large minus large, plus small
    keep(torch.sub(torch.tensor([1000.0, 2048.0, -3.0], dtype=h), torch.tensor([999.5, 0.01, -3.0], dtype=h)))
    keep(torch.cumsum(seeded(4096, seed=s + 1, dtype=h), 0))  # float16 accumulation differs from float32's
    keep(torch.pow(seeded(64, seed=s + 2, dtype=h, lo=1.0), 2.7))
    keep(torch.prod(torch.full((64,), 1.01 + step / 100, dtype=h)))  # a float16 product drifts from float32's
    keep(torch.matmul(torch.randn(8, 8, generator=torch.Generator().manual_seed(s + 3)),
                      torch.randn(8, 8, generator=torch.Generator().manual_seed(s + 4))))
    keep(torch.matmul(seeded(16, 64, seed=s + 5, dtype=h, lo=-0.5), seeded(64, 16, seed=s + 6, dtype=h, lo=-0.5)))
    keep(torch.var_mean(seeded(64, 64, seed=s + 7, dtype=h), dim=1))
    keep(torch.exp(torch.tensor([[12.0, 1], [2, 3]], dtype=h)))  # float16 inf, float32 finite: to_cpu's row
    keep(torch.cat([seeded(3, seed=s + 8, dtype=h), seeded(5, seed=s + 9, dtype=h)]))
    keep(F.gelu(seeded(4, 32, seed=s + 10, dtype=b, lo=-2, scale=4)))
    keep(F.softmax(seeded(4, 32, seed=s + 11, dtype=h, lo=-4, scale=8), dim=-1))
    keep(F.layer_norm(seeded(4, 64, seed=s + 12, dtype=b, lo=-1, scale=2), (64,)))
    keep(F.linear(seeded(4, 32, seed=s + 13, dtype=b, lo=-1, scale=2),
                  seeded(8, 32, seed=s + 14, dtype=b, lo=-1, scale=2)))
    keep(torch.add(torch.arange(6), 1))  # not floating: never run again
    a, c = seeded(16, seed=s + 15, dtype=h, lo=-1, scale=2), seeded(16, seed=s + 16, dtype=h, lo=-1, scale=2)
    keep(a + c, a * c, a - c, a.sum(), a.abs())
    keep(torch.sort(seeded(32, seed=s + 17, dtype=h, lo=-1, scale=2)))
    keep(torch.topk(seeded(32, seed=s + 18, dtype=b, lo=-1, scale=2), 5))
    keep(torch.sqrt(seeded(3, 5, 7, seed=s + 19, lo=0.5)))  # float32, 3-d
    keep(torch.mul(seeded(2, 3, seed=s + 20, dtype=torch.float64), 3.0))


def explained(step: int, seen: List[str]) -> None:
    x = torch.ones(4)
    x.add_(torch.ones(4))
    y = torch.ones(4)
    y += torch.full((4,), 0.5)
    torch.nn.functional.dropout(torch.ones(64), 0.5)
    torch.bernoulli(torch.full((64,), 0.5))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(torch.ones(4))
    seen += [v.hex() for v in x.tolist() + y.tolist() + torch.rand(4).tolist()]


class Net(nn.Module):
    """A dropout (the step's one random draw), ReLU(inplace=True), an add_, masks."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.act = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(32, 4)
        self.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = self.drop(h)
        big = h > 1.0
        h = h.masked_fill(big, 1.0)
        h.add_(0.25)
        h = torch.where(h > 0.5, h, h * 0.5)
        return self.fc2(h)


def make_model(case: str) -> Callable[[int], float]:
    dtype = torch.float32 if case == "mlp32" else torch.bfloat16
    torch.manual_seed(0)
    model = Net(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(16, 8, generator=g).to(dtype), torch.randint(0, 4, (16,), generator=g)) for _ in range(8)]

    def step(i: int) -> float:
        torch.manual_seed(100 + i)
        x, y = data[i % len(data)]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    step.model = model  # type: ignore[attr-defined]
    return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--tool", choices=["ours", "msprobe", "none"], required=True)
    p.add_argument("--config", default=None)
    p.add_argument("--case", required=True, choices=["calls", "explained", "mlp32", "bf16"])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--dist", action="store_true")
    args = p.parse_args()
    out, rank = begin(args.out, args.dist)
    debugger = debugger_of(args.tool, args.config)
    torch.manual_seed(0)
    train = make_model(args.case) if args.case in ("mlp32", "bf16") else None
    losses: List[str] = []
    seen: List[str] = []
    kept: List[torch.Tensor] = []
    for i in range(args.steps):
        if debugger is not None:
            debugger.start()
        if train is not None:
            losses.append(train(i).hex())
        elif args.case == "calls":
            calls(i, kept)
        else:
            explained(i, seen)
        if debugger is not None:
            debugger.stop()
            debugger.step()
    result: Dict[str, Any] = {"rank": rank, "losses": losses, "values": seen}
    if train is not None:
        torch.save({k: v.detach().clone() for k, v in train.model.state_dict().items()},  # type: ignore[attr-defined]
                   out / f"state_rank{rank}.pt")
    if args.case == "calls":
        torch.save([t.detach().clone() for t in kept], out / f"outputs_rank{rank}.pt")
    if args.tool == "ours":
        debugger._release()
    (out / f"result_rank{rank}.json").write_text(json.dumps(result))
    if args.dist:
        # As a training script ends: CI once saw this process abort at exit ("terminate called
        # without an active exception") with its gloo group left to the interpreter's teardown.
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
