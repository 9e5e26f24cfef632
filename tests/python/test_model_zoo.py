"""A zoo of real architectures, written the way their authors write them: every level (L0, mix,
L1) under every task (statistics, tensor, overflow_check) trains them with no error, and to the
same losses and parameters, bit for bit, as the same run without the tool.

In-place activations (ReLU/ReLU6/Hardswish/SiLU/Dropout with inplace=True), in-place residual
adds on a module's output, modules returning views, tuples with None, dicts and None, modules
called with keywords only, twice in one forward, or with no tensor input, RNNs through _VF,
activation checkpointing both ways, and a module with a full backward hook of the user's own."""
import pathlib
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import msprobe_cpp
from dumps import load as read_dump_file

LEVELS = ["L0", "mix", "L1"]
TASKS = ["statistics", "tensor", "overflow_check"]
STEPS = 3


# --- the zoo -----------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: in-place ReLUs, an in-place residual add."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layer1(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: expand, depthwise, project; ReLU6 in place; residual when it can."""

    def __init__(self, c: int, expand: int, stride: int, act: Callable[[], nn.Module]) -> None:
        super().__init__()
        hidden = c * expand
        self.use_res = stride == 1
        self.conv = nn.Sequential(
            nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden), act(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), act(),
            nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish(inplace=True))
        self.blocks = nn.Sequential(InvertedResidual(8, 4, 1, lambda: nn.ReLU6(inplace=True)),
                                    InvertedResidual(8, 4, 2, lambda: nn.Hardswish(inplace=True)),
                                    InvertedResidual(8, 2, 1, lambda: nn.SiLU(inplace=True)))
        self.head = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(8, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class Encoder(nn.Module):
    """nn.TransformerEncoder with a key padding mask, then a MultiheadAttention without weights
    (it returns (out, None))."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.pool = nn.MultiheadAttention(16, 2, batch_first=True)
        self.query = nn.Parameter(torch.randn(1, 1, 16))
        self.fc = nn.Linear(16, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        h = self.encoder(self.emb(tokens), src_key_padding_mask=pad)
        q = self.query.expand(tokens.shape[0], -1, -1)
        pooled, weights = self.pool(q, h, h, key_padding_mask=pad, need_weights=False)
        assert weights is None
        return self.fc(pooled[:, 0])


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 12, batch_first=True)
        self.gru = nn.GRU(12, 12, num_layers=2, batch_first=True)
        self.fc = nn.Linear(12, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, (h, c) = self.lstm(self.emb(tokens))
        out, h2 = self.gru(out)
        return self.fc(out[:, -1] + h2[-1])


class MLPBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.ln(x))))


class Checkpointed(nn.Module):
    """Activation checkpointing: the block's forward runs again in backward."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.inp = nn.Linear(6, 16)
        self.blocks = nn.ModuleList([MLPBlock(16), MLPBlock(16)])
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for blk in self.blocks:
            h = checkpoint(blk, h, use_reentrant=self.reentrant)
        return self.fc(h)


class ReturnsView(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], -1).transpose(0, 1)


class ReturnsTupleWithNone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return self.fc(x), None


class ReturnsDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"a": self.a(x), "b": torch.tanh(self.b(x))}


class ReturnsNone(nn.Module):
    """A side-effect module (keeps a running statistic), returning nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> None:
        with torch.no_grad():
            self.seen.mul_(0.9).add_(x.detach().mean(0), alpha=0.1)


class NoTensorInput(nn.Module):
    """Positions from a length: a module whose forward takes no tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 4) * 0.1)

    def forward(self, length: int) -> torch.Tensor:
        return self.table[:length]


class KeywordsOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, *, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc(x) * scale


class Odd(nn.Module):
    """The odd modules together: views, tuples with None, dicts, None, keywords only, a module
    called twice (shared weights), one without tensor input, one with the user's own full
    backward hook."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.tuple = ReturnsTupleWithNone()
        self.dict = ReturnsDict()
        self.none = ReturnsNone()
        self.pos = NoTensorInput()
        self.kw = KeywordsOnly()
        self.view = ReturnsView()
        self.hooked = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(4, 5)
        self.user_hook_calls = 0
        self.hooked.register_full_backward_hook(self._user_hook)

    def _user_hook(self, module: nn.Module, grad_in: Any, grad_out: Any) -> None:
        self.user_hook_calls += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.shared(self.shared(x))  # twice, shared weights
        h, nothing = self.tuple(h)
        assert nothing is None
        d = self.dict(h)
        self.none(h)
        h = d["a"] + d["b"] + self.pos(x.shape[0])
        h = self.relu(self.kw(x=h, scale=0.5))  # in place on a module's output
        h = self.view(h).transpose(0, 1).reshape(x.shape[0], 4)
        # (The user's full backward hook forbids in-place writes to this one's output: PyTorch's.)
        return self.fc(self.hooked(h))


def image_batch(g: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)


def token_batch(g: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(1, 20, (4, 7), generator=g)
    tokens[1, 5:] = 0  # right padding: every sequence keeps a real key
    tokens[3, 3:] = 0
    return tokens, torch.randint(0, 5, (4,), generator=g)


def vector_batch(g: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 6, generator=g), torch.randint(0, 5, (4,), generator=g)


def small_batch(g: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 4, generator=g), torch.randint(0, 5, (4,), generator=g)


ZOO: Dict[str, Tuple[Callable[[], nn.Module], Callable[[torch.Generator], Any]]] = {
    "resnet": (ResNet, image_batch),
    "mobilenet": (MobileNet, image_batch),
    "transformer": (Encoder, token_batch),
    "lstm_gru": (Recurrent, token_batch),
    "checkpoint_reentrant": (lambda: Checkpointed(True), vector_batch),
    "checkpoint_nonreentrant": (lambda: Checkpointed(False), vector_batch),
    "odd": (Odd, small_batch),
}


def train(name: str, dbg: Optional[msprobe_cpp.PrecisionDebugger]) -> Tuple[List[float], Dict[str, torch.Tensor], nn.Module]:
    build, batch = ZOO[name]
    torch.manual_seed(0)
    model = build()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(2)  # dropout draws from here: the tool must not draw
    losses = []
    for _ in range(STEPS):
        x, y = batch(g)
        if dbg is not None:
            dbg.start(model)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.item())
    if dbg is not None and hasattr(dbg, "drain"):
        dbg.drain()  # async_dump: the steps' files on disk for the caller
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, model


_BASELINES: Dict[str, Tuple[List[float], Dict[str, torch.Tensor]]] = {}


def baseline(name: str) -> Tuple[List[float], Dict[str, torch.Tensor]]:
    if name not in _BASELINES:
        losses, state, _ = train(name, None)
        _BASELINES[name] = (losses, state)
    return _BASELINES[name]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_zoo_trains_bit_identically_under_the_tool(tmp_path, name, level, task):
    losses0, state0 = baseline(name)
    dbg = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(tmp_path / "dump"), level=level,
                                        step=list(range(STEPS)))
    losses, state, model = train(name, dbg)
    assert losses == losses0
    assert state.keys() == state0.keys()
    for k in state:
        assert torch.equal(state[k], state0[k]), k
    if task != "overflow_check":  # a clean run under the guard writes nothing
        assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == [f"step{i}" for i in range(STEPS)]
    else:
        assert not (tmp_path / "dump").exists()
    if name == "odd":
        assert model.user_hook_calls == STEPS  # the user's own backward hook still runs


def mix_records(tmp_path: pathlib.Path, name: str) -> List[str]:
    dbg = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "dump"), level="mix", step=[0])
    train(name, dbg)
    data = read_dump_file(tmp_path / "dump" / "step0" / "rank")["data"]
    return list(data)


def test_resnet_module_records_have_msprobes_names_and_order(tmp_path):
    names = [n for n in mix_records(tmp_path, "resnet") if n.startswith("Module.")]
    forwards = [n for n in names if ".forward." in n]
    backwards = [n for n in names if ".backward." in n]
    # Every submodule call has one forward and one backward record (the in-place ReLUs included);
    # a module's record follows the records of the calls inside it.
    assert forwards[:4] == ["Module.stem.0.Conv2d.forward.0", "Module.stem.1.BatchNorm2d.forward.0",
                            "Module.stem.2.ReLU.forward.0", "Module.stem.Sequential.forward.0"]
    assert "Module.layer1.0.relu.ReLU.forward.1" in forwards  # the block's ReLU, called twice
    assert {n.replace(".forward.", ".backward.") for n in forwards} == set(backwards)
    assert len(forwards) == len(backwards)
    # Backward runs from the head to the stem; a container after everything inside it, except
    # where its input takes no gradient (the stem gets the batch): then, as PyTorch's full
    # backward hook does, when the gradient reaches its output.
    assert backwards[0] == "Module.fc.Linear.backward.0"
    assert backwards[-1] == "Module.stem.0.Conv2d.backward.0"
    assert backwards.index("Module.stem.Sequential.backward.0") < backwards.index(
        "Module.stem.2.ReLU.backward.0")
    assert backwards.index("Module.layer1.1.BasicBlock.backward.0") < backwards.index(
        "Module.layer1.0.BasicBlock.backward.0")
    assert backwards.index("Module.layer1.0.conv1.Conv2d.backward.0") < backwards.index(
        "Module.layer1.0.BasicBlock.backward.0")


def test_module_gradients_are_what_the_modules_send(tmp_path):
    """The backward record of a block with a residual add: the gradient it sends to its input is
    the sum over both paths, as PyTorch's own full backward hook gives it."""
    torch.manual_seed(0)
    block = MLPBlock(8)
    x = torch.randn(3, 8, requires_grad=True)
    seen = {}
    handle = block.register_full_backward_hook(lambda m, gi, go: seen.update(gi=gi[0].clone(), go=go[0].clone()))
    block(x).pow(2).sum().backward()
    handle.remove()
    dbg = msprobe_cpp.PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "d"), level="L0", step=[0])
    holder = nn.Sequential(block)
    dbg.start(holder)
    holder(x).pow(2).sum().backward()
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    data = read_dump_file(tmp_path / "d" / "step0" / "rank")["data"]
    rec = data["Module.0.MLPBlock.backward.0"]
    for entry, ref in ((rec["input"][0], seen["go"]), (rec["output"][0], seen["gi"])):
        ref = ref.double()
        assert entry["Max"] == pytest.approx(ref.max().item(), rel=1e-6)
        assert entry["Norm"] == pytest.approx(ref.norm().item(), rel=1e-6)


def test_checkpointed_forwards_are_recorded_again_in_backward(tmp_path):
    names = mix_records(tmp_path, "checkpoint_reentrant")
    # The reentrant checkpoint runs the block under no_grad, then again during backward: the second
    # run's records come among the backward records, with the next call numbers.
    assert names.count("Module.blocks.0.MLPBlock.forward.0") == 1
    assert "Module.blocks.0.MLPBlock.forward.1" in names
    first_backward = min(i for i, n in enumerate(names) if ".backward" in n)
    assert names.index("Module.blocks.0.MLPBlock.forward.1") > first_backward
    assert "Module.blocks.0.MLPBlock.backward.0" in names
