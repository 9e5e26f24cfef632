"""torch.compile (PyTorch 2.x, CPU inductor): a compiled model trains under the tool, its compiled
regions are left alone (one warning, no graph break for the hooked calls, none of their own calls
recorded), what runs uncompiled around it is recorded as usual, and NaN/inf made inside a
compiled region stops at the first recorded call that meets it, named as made there."""
import math
import pathlib
from typing import List, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dumps import load as read_dump_file

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile arrived in PyTorch 2.0")


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.poison = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        if self.poison:
            h = torch.log(h - h)  # log(0): -inf, made inside the compiled region
        return self.fc2(h)


def setup() -> Tuple[Body, nn.Module, nn.Linear, torch.optim.Optimizer]:
    torch.manual_seed(0)
    body = Body()
    head = nn.Linear(4, 3)
    opt = torch.optim.SGD(list(body.parameters()) + list(head.parameters()), lr=0.1)
    return body, torch.compile(body), head, opt


def batches(n: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(5, 8, generator=g), torch.randint(0, 3, (5,), generator=g)) for _ in range(n)]


def train(model: nn.Module, head: nn.Module, opt, dbg, data) -> List[float]:
    losses = []
    for x, y in data:
        if dbg is not None:
            dbg.start(model)
        opt.zero_grad()
        loss = F.cross_entropy(head(F.relu(model(x))), y)
        loss.backward()
        opt.step()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.item())
    if dbg is not None and hasattr(dbg, "drain"):
        dbg.drain()  # async_dump: the steps' files on disk for the caller
    return losses


@pytest.mark.parametrize("task", ["statistics", "overflow_check"])
def test_a_compiled_model_trains_and_its_regions_are_left_alone(tmp_path, capfd, task):
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    body, compiled, head, opt = setup()
    ref = train(body, head, opt, None, batches(3))  # eager, the same seeds
    torch._dynamo.reset()
    counters.clear()
    body, compiled, head, opt = setup()
    dbg = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(tmp_path / "dump"), step=[0, 1, 2])
    losses = train(compiled, head, opt, dbg, batches(3))
    assert all(math.isfinite(l) for l in losses)
    assert losses == pytest.approx(ref, rel=1e-5)  # inductor's kernels, not eager's: the last bits
    assert dict(counters["graph_break"]) == {}, dict(counters["graph_break"])
    err = capfd.readouterr().err
    assert err.count("a torch.compile'd model") == 1
    if task == "overflow_check":
        assert not (tmp_path / "dump").exists()
        return
    data = read_dump_file(tmp_path / "dump" / "step1" / "rank")["data"]
    names = list(data)
    # The uncompiled part is recorded; nothing from inside the compiled region (its tanh, its
    # linears, the buffers its generated code allocates, its backward's own calls).
    assert names[:3] == ["Functional.relu.0.forward", "Functional.linear.0.forward",
                         "Functional.cross_entropy.0.forward"]
    assert "Functional.relu.0.backward" in names and "Functional.linear.0.backward" in names
    assert not any(n.startswith(("Torch.tanh", "Torch.empty_strided", "Functional.linear.1")) for n in names), names


def test_nan_made_inside_a_compiled_region_stops_where_it_comes_out(tmp_path):
    import torch._dynamo
    torch._dynamo.reset()
    body, compiled, head, opt = setup()
    body.poison = True
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    x, y = batches(1)[0]
    dbg.start(compiled)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        F.cross_entropy(head(F.relu(compiled(x))), y)
    e = info.value
    # The stop comes where the compiled model returns it (what a started model returns is judged),
    # before the first recorded call meets it.
    assert (e.call, e.origin) == ("Module.Body.forward.0", "op")
    assert "made inside a compiled region (torch.compile)" in e.note
    assert "made inside a compiled region" in str(e)
