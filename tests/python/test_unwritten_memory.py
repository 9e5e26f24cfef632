"""Memory that torch.empty and its kin hand out holds whatever the allocator left there: reading it
before writing it (FSDP2 narrows its all-gather buffer before the all-gather fills it) is no
anomaly (issue 32). Once anything writes it, NaN/inf in it is judged as anywhere else.

The leftover NaN is planted through `.data` with the hooks off: `.data` has a version counter of
its own, so the buffer's stays as torch.empty left it, as with real leftover bytes."""
import copy

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from msprobe_cpp import _C
from testenv import devices, said_besides_on_line


def plant_leftovers(buf: torch.Tensor) -> None:
    _C.call_unhooked(lambda: buf.data.fill_(float("nan")))


class GatherBuffer(nn.Module):
    """FSDP2's all-gather in small: a torch.empty buffer, a view of it taken before it is filled,
    then filled whole, then read. `written_first`: NaN is written into the buffer (by code no hook
    sees) before the view, so it is no longer unwritten memory."""

    def __init__(self, written_first: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.written_first = written_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        make = torch.empty if self.written_first or x.shape[0] % 2 == 0 else torch.empty_like
        buf = make(x.shape, device=x.device) if make is torch.empty else make(x)
        if self.written_first:
            # Written (its version moves), with NaN, by code no hook sees.
            _C.call_unhooked(lambda: buf.fill_(float("nan")))
        else:
            plant_leftovers(buf)
        mine = buf.narrow(0, 0, 1)  # read before the buffer is filled
        if self.written_first:
            return self.fc(x + mine)  # NaN that was written: damage
        buf.copy_(self.fc(x))
        return buf.narrow(0, 0, x.shape[0]) + 0.0 * mine.detach().nan_to_num()


def train(model: nn.Module, steps: int, device: str, debugger=None) -> list:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 4, generator=g).to(device)
        if debugger is not None:
            debugger.start(model)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    if debugger is not None and hasattr(debugger, "drain"):
        debugger.drain()  # async_dump: the steps' files on disk for the caller
    return losses


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_a_buffer_read_before_it_is_written_is_no_anomaly(tmp_path, device, level, capfd):
    torch.manual_seed(0)
    model = GatherBuffer().to(device)
    reference = copy.deepcopy(model)
    expected = train(reference, 3, device)
    capfd.readouterr()
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), level=level)
    assert train(model, 3, device, debugger) == expected
    debugger._release()
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(a, b), name
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())
    assert said_besides_on_line(capfd.readouterr().err) == ""  # not even an absorbed line


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_nan_in_a_buffer_that_was_written_is_judged(tmp_path, device):
    torch.manual_seed(0)
    model = GatherBuffer(written_first=True).to(device)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"), level="L1")
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train(model, 1, device, debugger)
    debugger._release()
    assert info.value.call.startswith("Tensor.narrow.0.forward"), str(info.value)
    assert info.value.origin == "input"
    assert all(torch.isfinite(p).all() for p in model.parameters())
