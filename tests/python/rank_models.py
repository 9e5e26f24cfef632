"""The models, faults and tensor checks of rank_worker.py's training runs.

    model = MODELS["mlp"]()              # seed first: every rank builds the same weights
    x, y = batch(generator, "mlp")
    wrapped = wrap(model, "ddp", world)  # or "fsdp2", or "all_reduce" (then average_gradients)
    set_fault(model, "fp16_op")          # the op faults live in the first Block
    nonfinite(model.named_parameters()), local_state(model)

Models: "mlp" (an input Linear, two Blocks of LayerNorm/Linear/GELU, a head), "transformer" (a
tiny encoder layer before one Block), "small" (Linear 8-16, ReLU, Linear 16-2: test_peer_stop.py's
and bench/peer_stop_overhead.py's; it has no Block, so only the nan_batch fault).
"""
import numpy
import torch
import torch.distributed as dist

D_IN, D_MODEL, N_CLASSES, BATCH, SEQ = 8, 16, 4, 4, 4
SMALL_HIDDEN, SMALL_CLASSES = 16, 2


class Block(torch.nn.Module):
    """x + fc2(gelu(fc1(norm(x)))), with the fault inside when `fault` is set."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(2 * d, d)
        self.fault = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.norm(x)))
        if self.fault == "fp16_op":
            # |h| > 1.1 somewhere: h * 60000 (or its * 4) is past float16's 65504, inf requiring grad.
            h = (h.half() * 60000.0 * 4).float()
        elif self.fault == "backward_nan":
            # Forward: zeros added, h unchanged. Backward: d sqrt(u)/du at u = 0 is inf, times the
            # mul's 0 is NaN, and relu lets it through to fc1, norm and everything before.
            h = h + torch.sqrt(torch.relu(h) * 0.0)
        elif self.fault == "plain_raise":
            raise RuntimeError("plain_raise: the fault of the benchmark's run without the tool")
        return x + self.fc2(h)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(D_IN, D_MODEL)
        self.blocks = torch.nn.ModuleList([Block(D_MODEL), Block(D_MODEL)])
        self.head = torch.nn.Linear(D_MODEL, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class Transformer(torch.nn.Module):
    """A tiny encoder layer (dropout 0: deterministic) before the MLP block; x is (B, SEQ, D_IN)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(D_IN, D_MODEL)
        self.encoder = torch.nn.TransformerEncoderLayer(D_MODEL, nhead=2, dim_feedforward=2 * D_MODEL,
                                                        dropout=0.0, batch_first=True)
        self.blocks = torch.nn.ModuleList([Block(D_MODEL)])
        self.head = torch.nn.Linear(D_MODEL, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.inp(x))
        for block in self.blocks:
            h = block(h)
        return self.head(h.mean(1))


def small() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(D_IN, SMALL_HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(SMALL_HIDDEN, SMALL_CLASSES))


MODELS = {"mlp": MLP, "transformer": Transformer, "small": small}


def batch(g: torch.Generator, model_kind: str):
    shape = (BATCH, SEQ, D_IN) if model_kind == "transformer" else (BATCH, D_IN)
    classes = SMALL_CLASSES if model_kind == "small" else N_CLASSES
    return torch.randn(*shape, generator=g), torch.randint(0, classes, (BATCH,), generator=g)


def set_fault(model: torch.nn.Module, fault) -> None:
    blocks = getattr(model, "blocks", None)
    if blocks is not None:
        blocks[0].fault = fault
    elif fault is not None:
        raise ValueError(f"this model has no Block to hold the fault {fault}")


def wrap(model: torch.nn.Module, kind: str, world: int) -> torch.nn.Module:
    if kind == "all_reduce":
        return model
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """What DDP does inside backward, done by hand: the tool records each dist.all_reduce."""
    for p in model.parameters():
        dist.all_reduce(p.grad)  # through the module attribute, so the hooked one
        p.grad.div_(world)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor itself, or a DTensor's local shard; detached. No call the tool hooks is made
    (Tensor.detach, .numpy() and DTensor's _local_tensor are not in its lists): the checks after
    a stop measure the run and must not meet the tool's refusal to go on."""
    return getattr(t, "_local_tensor", t).detach()


def nonfinite(tensors) -> list:
    """Which of the named tensors hold NaN/inf (local shards of DTensors)."""
    bad = []
    for name, t in tensors:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            continue
        if not numpy.isfinite(_local(t).numpy()).all():
            bad.append(name)
    return bad


def local_state(module: torch.nn.Module) -> dict:
    """Each parameter's and buffer's local tensor (a DTensor's shard). Not state_dict(): FSDP2's
    state_dict hook reshards, which fails when a stop was raised inside its unshard."""
    named = list(module.named_parameters()) + list(module.named_buffers())
    return {k: torch.from_numpy(_local(v.detach()).numpy().copy()) for k, v in named}
