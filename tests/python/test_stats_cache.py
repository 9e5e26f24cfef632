"""Statistics computed once per tensor version within a step: what is reused, and what never is."""
import pathlib
from typing import Callable, Dict, Tuple

import pytest
import torch

import msprobe_cpp
from dumps import assert_stats, load as read_dump_file
from testenv import devices

DEVICES = devices()


def collect(tmp_path: pathlib.Path, fn: Callable[[], None]) -> Tuple[Dict, int, int]:
    """One step of fn() at L1; its records, and the statistics cache's hits and misses."""
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="L1", step=[0])
    dbg.start()
    fn()
    hits, misses = dbg._session.stats_cache_hits, dbg._session.stats_cache_misses
    dbg.stop()
    dbg.step()
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    return data, hits, misses


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_a_tensor_read_twice_is_scanned_once(tmp_path, device):
    x = torch.randn(64, 64, device=device)
    data, hits, misses = collect(tmp_path, lambda: (torch.tanh(x), torch.sigmoid(x), torch.relu(x)))
    for name in ("Torch.tanh.0.forward", "Torch.sigmoid.0.forward", "Torch.relu.0.forward"):
        assert_stats(data[name]["input_args"][0], x)
    # x: one miss, then two hits; each output is new (a miss).
    assert (hits, misses) == (2, 4)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_a_tensor_updated_in_place_between_uses_gets_fresh_statistics(tmp_path, device):
    x = torch.randn(64, 64, device=device)
    before = x.clone()

    def run() -> None:
        torch.tanh(x)
        with torch.no_grad():
            x.mul_(3.0)  # recorded: its input is x before, its output x after
        x.sub_(1.0)
        torch.tanh(x)

    data, hits, _ = collect(tmp_path, run)
    assert_stats(data["Torch.tanh.0.forward"]["input_args"][0], before)
    assert_stats(data["Tensor.mul_.0.forward"]["input_args"][0], before)  # a hit: same version
    assert_stats(data["Tensor.mul_.0.forward"]["output"][0], before * 3)
    assert_stats(data["Tensor.sub_.0.forward"]["input_args"][0], before * 3)
    assert_stats(data["Tensor.sub_.0.forward"]["output"][0], before * 3 - 1)
    assert_stats(data["Torch.tanh.1.forward"]["input_args"][0], before * 3 - 1)
    assert hits >= 3


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_views_of_a_cached_tensor_get_their_own_statistics(tmp_path, device):
    x = torch.randn(64, 64, device=device) * torch.arange(64.0, device=device)  # rows differ
    views = {"rows": lambda: x[3:], "flat": lambda: x.view(4096), "transposed": lambda: x.t(),
             "strided": lambda: x[:, ::2], "detached": lambda: x.detach()}
    made = {}

    def run() -> None:
        torch.tanh(x)  # x is cached
        for name, make in views.items():
            made[name] = make()  # same storage and version as x: only the object and layout differ
            torch.tanh(made[name])

    data, _, _ = collect(tmp_path, run)
    assert_stats(data["Torch.tanh.0.forward"]["input_args"][0], x)
    tanh_inputs = [r["input_args"][0] for n, r in data.items() if n.startswith("Torch.tanh.")][1:]
    assert len(tanh_inputs) == len(views)
    for entry, (name, view) in zip(tanh_inputs, made.items()):
        assert_stats(entry, view)


def test_the_cache_is_emptied_at_each_step(tmp_path):
    x = torch.randn(64, 64)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="L1", step=[0, 1])
    for _ in range(2):
        dbg.start()
        torch.tanh(x)
        dbg.stop()
        dbg.step()
    assert dbg._session.stats_cache_hits == 0  # x was scanned once per step, not reused across
