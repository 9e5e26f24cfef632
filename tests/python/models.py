"""Small deterministic models and training loops for the end-to-end tests and bench/hook_overhead.py.

    model = make_model("gpt")                      # or "mlp"; seeded, so two calls give equal weights
    losses = train(model, 3, debugger=dbg)         # dbg.start/stop/step around every step

Determinism: the training data come from a private torch.Generator seeded with `seed`, drawn before
the debugger starts, so an instrumented and an uninstrumented run see the same batches and (as long
as the debugger does not change any value) produce bit-identical losses.
"""
from __future__ import annotations

import pathlib
import sys
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from tinygpt import (MASK_MODES, DynamicLossScaler, InjectFn, TinyGPT,  # noqa: E402,F401  the demo's model
                     next_token_loss, token_batches)


class MLP(nn.Module):
    """fc3(tanh(fc2(relu(fc1(x)))) * 2.0): the computation of msprobe's own fixture model."""

    in_features = 16
    classes = 4

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))) * 2.0)


class ConvNet(nn.Module):
    """conv → batchnorm → relu → pool, twice, then a linear classifier: an image model."""

    channels = 3
    size = 16
    classes = 10

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def make_model(kind: str, seed: int = 0, **kw: Any) -> nn.Module:
    """Seeds torch, then builds "gpt" (TinyGPT, keywords passed on), "mlp" or "convnet"."""
    torch.manual_seed(seed)
    if kind in ("gpt", "tinygpt"):
        return TinyGPT(**kw)
    simple = {"mlp": MLP, "convnet": ConvNet}
    if kind in simple:
        if kw:
            raise TypeError(f"{kind} takes no arguments, got {sorted(kw)}")
        return simple[kind]()
    raise ValueError(f"unknown model kind {kind!r}: expected 'gpt', 'mlp' or 'convnet'")


Batch = Tuple[torch.Tensor, torch.Tensor]


def make_batches(model: nn.Module, steps: int, *, seed: int = 0, batch: int = 8,
                 dtype: torch.dtype = torch.float32, device: str = "cpu") -> List[Batch]:
    """`steps` (input, target) pairs drawn from a private generator: the global RNG is not touched,
    so nothing the model, the optimizer or a debugger draws can shift the data."""
    if isinstance(model, TinyGPT):
        return [(x.to(device), y.to(device)) for x, y in token_batches(model, steps, seed=seed, batch=batch)]
    g = torch.Generator().manual_seed(seed)
    out: List[Batch] = []
    for _ in range(steps):
        if isinstance(model, MLP):
            x = torch.randn(batch, MLP.in_features, generator=g).to(dtype)
            y = torch.randint(0, MLP.classes, (batch,), generator=g)
        elif isinstance(model, ConvNet):
            x = torch.randn(batch, ConvNet.channels, ConvNet.size, ConvNet.size, generator=g).to(dtype)
            y = torch.randint(0, ConvNet.classes, (batch,), generator=g)
        else:
            raise TypeError(f"no data for {type(model).__name__}: expected TinyGPT, MLP or ConvNet")
        out.append((x.to(device), y.to(device)))
    return out


def make_optimizer(model: nn.Module, optimizer: str = "adamw", lr: float = 1e-3,
                   dtype: torch.dtype = torch.float32, foreach: bool = False) -> torch.optim.Optimizer:
    # foreach=False pins the per-parameter update loop (Tensor.add_ ... in the dump) whatever the
    # torch version or device would pick by default, so dumps have the same calls everywhere.
    if optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, foreach=foreach)
    if optimizer == "adamw":
        # AdamW's default eps (1e-8) rounds to 0 in float16, so a parameter whose gradient is 0 (an
        # embedding row no token used) gets 0/0 = NaN; 1e-4 is representable and keeps clean fp16
        # training clean, so the only overflows are the ones a test plants.
        eps = 1e-4 if dtype == torch.float16 else 1e-8
        return torch.optim.AdamW(model.parameters(), lr=lr, eps=eps, foreach=foreach)
    raise ValueError(f"unknown optimizer {optimizer!r}: expected 'adamw' or 'sgd'")


def compute_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if isinstance(model, TinyGPT):
        return next_token_loss(model, x, y)
    return F.cross_entropy(model(x), y)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               debugger: Any = None, set_to_none: bool = True) -> torch.Tensor:
    """One step, bracketed by the debugger when one is given. Returns the loss tensor; call .item()
    on it after this returns, so the read-out is not part of the dumped step."""
    if debugger is not None:
        debugger.start(model)
    # set_to_none=True (2.x's default, not 1.13's) so no Tensor.zero_ calls appear from step 1 on.
    opt.zero_grad(set_to_none=set_to_none)
    loss = compute_loss(model, x, y)
    loss.backward()
    opt.step()
    if debugger is not None:
        debugger.stop()
        debugger.step()
    return loss


def train(model: nn.Module, steps: int, *, seed: int = 0, batch: int = 8, lr: float = 1e-3,
          optimizer: str = "adamw", debugger: Any = None, dtype: torch.dtype = torch.float32,
          device: str = "cpu") -> List[float]:
    """Trains `model` (moved to device/dtype in place) for `steps` steps; returns the losses."""
    torch.manual_seed(seed)
    model.to(device=device, dtype=dtype)
    model.train()
    data = make_batches(model, steps, seed=seed, batch=batch, dtype=dtype, device=device)
    opt = make_optimizer(model, optimizer, lr, dtype)
    losses: List[float] = []
    for x, y in data:
        loss = train_step(model, opt, x, y, debugger)
        losses.append(loss.item())
    drain(debugger)
    return losses


def drain(debugger: Any) -> None:
    """The steps a debugger handed to its writer thread (async_dump, on by default under
    statistics and tensor) on disk, for a test that reads them in the same process. msprobe's
    own debuggers, peers in some tests, have no drain()."""
    if debugger is not None and hasattr(debugger, "drain"):
        debugger.drain()


def run_steps(model: nn.Module, steps: int, dbg: Any,
              on_step: Optional[Callable[[int, torch.Tensor], torch.Tensor]] = None) -> List[float]:
    """`steps` train_step()s on make_batches()' data with make_optimizer()'s AdamW; `on_step(i, x)`
    may replace step i's input. Returns the losses."""
    opt = make_optimizer(model)
    losses = []
    for i, (x, y) in enumerate(make_batches(model, steps)):
        if on_step:
            x = on_step(i, x)
        losses.append(train_step(model, opt, x, y, dbg).item())
    drain(dbg)
    return losses


def fp16_overflow_at(steps: List[int], block: int, model: TinyGPT, masked: bool = False):
    """Scores of one block go through fp16 at the chosen steps and overflow there. `masked`: only
    where the causal mask overwrites them afterwards, so the run survives the overflow (the
    weights stay finite) and later steps are clean again. Returns run_steps()' on_step."""
    state = {"step": 0}

    def inject(index: int, scores: torch.Tensor) -> torch.Tensor:
        if index == block and state["step"] in steps:
            if masked:
                t = scores.shape[-1]
                factor = torch.ones(t, t).triu(1).mul(6e4 - 1).add(1).half()  # < fp16 max
                return (scores.half() * factor).float()
            return (scores.half() * 1e5).float()
        return scores

    model.inject = inject

    def on_step(i: int, x: torch.Tensor) -> torch.Tensor:
        state["step"] = i
        return x

    return on_step


def guarded_step(dbg: Any, model: nn.Module, opt: torch.optim.Optimizer,
                 loss_of: Callable[[], torch.Tensor]) -> float:
    """One step as users write it: start, zero_grad, forward and loss, backward, step, stop, step."""
    dbg.start(model)
    opt.zero_grad()
    loss = loss_of()
    loss.backward()
    opt.step()
    dbg.stop()
    dbg.step()
    return loss.item()


class TabularNet(nn.Module):
    """Two linear layers on 10 features; `clean` (when given) first replaces the NaN the data uses
    for missing values."""

    def __init__(self, clean: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> None:
        super().__init__()
        self.clean = clean
        self.fc1 = nn.Linear(10, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.clean is not None:
            x = self.clean(x)
        return self.fc2(F.relu(self.fc1(x)))


def tabular_batches(n: int, nan_at: Tuple[int, ...]):
    g = torch.Generator().manual_seed(2)
    out = []
    for i in range(n):
        x = torch.randn(8, 10, generator=g)
        if i in nan_at:
            x[torch.rand(8, 10, generator=g) < 0.2] = float("nan")  # missing values
        out.append((x, torch.randint(0, 2, (8,), generator=g)))
    return out


def train_tabular(model: nn.Module, dbg: Any, data) -> List[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return [guarded_step(dbg, model, opt, lambda: F.cross_entropy(model(x), y)) for x, y in data]


def big_input_mlp() -> nn.Module:
    """Inputs ~1e6, first-layer weights ~1e-6: a loss of ~1.4 whose gradients overflow float32
    when the loss is scaled by more than about 2^113 (the CPU stand-in for fp16)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    with torch.no_grad():
        model[0].weight.mul_(1e-6)
    return model


def big_input_batches(n: int, seed: int = 0):
    """Batches of ~1e6 inputs for big_input_mlp()."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 16, generator=g) * 1e6, torch.randint(0, 4, (8,), generator=g)) for _ in range(n)]


# big_input_mlp()'s first-layer gradients are ~1e6 times the others: a small rate keeps training
# stable.
BIG_INPUT_LR = 1e-13


class SqrtParamNet(nn.Module):
    """fc(x) * sqrt(gain) with a gain of 0 in it: sqrt's gradient is inf there, and reaches the
    parameter gain."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.gain = nn.Parameter(torch.tensor([1.0, 0.0, 2.0, 3.0]))  # sqrt'(0) = inf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * torch.sqrt(self.gain)

if __name__ == "__main__":
    # Smoke test and timing: /usr/bin/python3 tests/python/models.py
    import time

    torch.set_num_threads(1)
    for kind in ("gpt", "mlp"):
        a = train(make_model(kind), 3)
        b = train(make_model(kind), 3)
        assert a == b, (kind, a, b)
        print(f"{kind}: losses {a} (two runs bit-identical)")
    for kind in ("gpt", "mlp"):
        model = make_model(kind)
        data = make_batches(model, 60)
        opt = make_optimizer(model)
        times = []
        for i, (x, y) in enumerate(data):
            t0 = time.perf_counter()
            train_step(model, opt, x, y)
            if i >= 10:  # warm-up
                times.append(time.perf_counter() - t0)
        times.sort()
        print(f"{kind}: median step {1e3 * times[len(times) // 2]:.3f} ms, min {1e3 * times[0]:.3f} ms "
              f"(batch 8, 1 thread, {len(times)} steps)")
