"""scope, list, data_mode, step, rank, summary_mode md5 and task tensor on real training loops."""
import json
import pathlib
import zlib
from typing import Any, Dict, List

import pytest
import torch
import torch.nn.functional as F

import msprobe_cpp
from models import make_model, train
from testenv import devices
from dumps import load as read_dump_file


def run_mlp(tmp_path: pathlib.Path, level: str = "L1", steps: int = 1, **section: Any) -> pathlib.Path:
    """One SGD training run of the MLP under a config with `section` as its statistics section."""
    config = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": level,
              "step": section.pop("step", []), "rank": section.pop("rank", []), "statistics": section}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    train(make_model("mlp"), steps, optimizer="sgd", debugger=dbg)
    return tmp_path / "dump"


def data(dump: pathlib.Path, step: int = 0) -> Dict[str, Any]:
    return read_dump_file(dump / f"step{step}" / "rank")["data"]


def test_scope_at_L1_is_an_inclusive_window_of_api_calls(tmp_path):
    got = data(run_mlp(tmp_path, scope=["Functional.relu.0.forward", "Tensor.__mul__.0.forward"]))
    assert list(got) == [
        "Functional.relu.0.forward", "Functional.linear.1.forward", "Torch.tanh.0.forward",
        "Tensor.__mul__.0.forward",
        # the backward records of exactly those calls
        "Tensor.__mul__.0.backward", "Torch.tanh.0.backward", "Functional.linear.1.backward",
        "Functional.relu.0.backward"]


def test_scope_at_L0_is_a_window_of_module_calls(tmp_path):
    got = data(run_mlp(tmp_path, level="L0", scope=["Module.fc2.Linear.forward.0", "Module.fc3.Linear.forward.0"]))
    assert sorted(got) == sorted(["Module.fc2.Linear.forward.0", "Module.fc3.Linear.forward.0",
                                  "Module.fc3.Linear.backward.0", "Module.fc2.Linear.backward.0"])


def test_scope_names_must_fit_the_level(tmp_path):
    with pytest.raises(msprobe_cpp.ConfigError, match=r"statistics.scope\[0\]: expected an API call name at level L1"):
        run_mlp(tmp_path, scope=["Module.fc2.Linear.forward.0", "Module.fc3.Linear.forward.0"])


def test_list_by_full_name(tmp_path):
    got = data(run_mlp(tmp_path, list=["Torch.tanh.0.forward", "Tensor.add_.3.forward"]))
    assert list(got) == ["Torch.tanh.0.forward", "Torch.tanh.0.backward", "Tensor.add_.3.forward"]


def test_list_by_fragment(tmp_path):
    got = data(run_mlp(tmp_path, list=["relu", "cross_entropy"]))
    assert list(got) == ["Functional.relu.0.forward", "Functional.cross_entropy.0.forward",
                         "Functional.cross_entropy.0.backward", "Functional.relu.0.backward"]


def test_list_of_a_module_at_mix_collects_everything_inside_it(tmp_path):
    got = data(run_mlp(tmp_path, level="mix", list=["Module.fc2.Linear.forward.0"]))
    assert sorted(got) == sorted(["Functional.linear.1.forward", "Module.fc2.Linear.forward.0",
                                  "Functional.linear.1.backward", "Module.fc2.Linear.backward.0"])


@pytest.mark.parametrize("mode, directions, sides", [
    (["all"], {"forward", "backward"}, {"in", "out"}),
    (["forward"], {"forward"}, {"in", "out"}),
    (["backward"], {"backward"}, {"in", "out"}),
    (["input"], {"forward", "backward"}, {"in"}),
    (["output"], {"forward", "backward"}, {"out"}),
    (["forward", "input"], {"forward"}, {"in"}),
    (["forward", "output"], {"forward"}, {"out"}),
    (["backward", "input"], {"backward"}, {"in"}),
    (["backward", "output"], {"backward"}, {"out"}),
    (["forward", "backward", "input", "output"], {"forward", "backward"}, {"in", "out"}),
])
def test_data_mode(tmp_path, mode, directions, sides):
    def direction(name: str) -> str:
        return "backward" if ".backward" in name else "forward"

    got = data(run_mlp(tmp_path, level="mix", data_mode=mode))
    everything = data(run_mlp(tmp_path / "all", level="mix"))
    assert list(got) == [n for n in everything if direction(n) in directions]
    for name, record in got.items():
        backward = ".backward" in name
        expected = set()
        if "in" in sides:
            expected |= {"input"} if backward else {"input_args", "input_kwargs"}
        if "out" in sides:
            expected.add("output")
        assert set(record) == expected, name


def test_step_list_with_a_range(tmp_path):
    dump = run_mlp(tmp_path, steps=5, step=[0, "2-3"])
    assert sorted(p.name for p in dump.iterdir()) == ["step0", "step2", "step3"]


def test_rank_list_outside_torch_distributed(tmp_path):
    # Not distributed: the process counts as rank 0.
    dump = run_mlp(tmp_path / "a", rank=[1])
    assert not dump.exists()
    dump = run_mlp(tmp_path / "b", rank=[0, "2-3"])
    assert (dump / "step0" / "rank" / "dump.json").exists()


def crc(t: torch.Tensor) -> str:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # msprobe goes through numpy, which has no bfloat16: float32
        t = t.float()
    return f"{zlib.crc32(t.numpy().tobytes()):08x}"


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_md5_is_crc32_of_the_tensor_bytes(tmp_path, device):
    g = torch.Generator().manual_seed(3)
    tensors = [torch.randn(7, 9, generator=g), torch.randn(100, generator=g).half(),
               torch.randn(33, generator=g).bfloat16(), torch.randint(-5, 5, (17,), generator=g),
               torch.randn(12, 10, generator=g).t()[::3]]
    tensors = [t.to(device) for t in tensors]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"dump_path": str(tmp_path / "d"), "statistics": {"summary_mode": "md5"}}))
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    dbg.start()
    for t in tensors:
        torch.clone(t)
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    records = list(read_dump_file(tmp_path / "d" / "step0" / "rank")["data"].values())
    assert [r["input_args"][0]["md5"] for r in records] == [crc(t) for t in tensors]
    assert all(r["input_args"][0]["Max"] is not None for r in records)  # statistics too


def tensor_config(tmp_path: pathlib.Path, **extra: Any) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "d"), **extra}))
    return str(path)


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_tensor_task_round_trip(tmp_path, device):
    g = torch.Generator().manual_seed(4)
    tensors = {"float32": torch.randn(5, 6, generator=g), "float16": torch.randn(8, generator=g).half(),
               "bfloat16": torch.randn(9, generator=g).bfloat16(), "float64": torch.randn(3, generator=g).double(),
               "int64": torch.randint(0, 100, (4,), generator=g), "bool": torch.rand(6, generator=g) > 0.5,
               "noncontiguous": torch.randn(6, 4, generator=g).t()}
    tensors = {k: v.to(device) for k, v in tensors.items()}
    x = torch.full((3,), 1.0, device=device)
    dbg = msprobe_cpp.PrecisionDebugger(config_path=tensor_config(tmp_path))
    dbg.start()
    for t in tensors.values():
        torch.clone(t)
    x.add_(5.0)  # the saved input must be x before the update
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    step = tmp_path / "d" / "step0" / "rank"
    doc = read_dump_file(step)
    assert doc["dump_data_dir"] == str(step / "dump_tensor_data")
    records = list(doc["data"].items())
    for (kind, t), (name, record) in zip(tensors.items(), records):
        entry = record["input_args"][0]
        assert entry["data_name"] == f"{name}.input.0.pt"
        loaded = torch.load(step / "dump_tensor_data" / entry["data_name"])
        assert loaded.dtype == t.dtype and loaded.shape == t.shape, kind
        assert torch.equal(loaded, t.cpu()), kind
        assert record["output"][0]["data_name"] == f"{name}.output.0.pt"
    add = doc["data"]["Tensor.add_.0.forward"]
    assert torch.equal(torch.load(step / "dump_tensor_data" / add["input_args"][0]["data_name"]),
                       torch.full((3,), 1.0))
    assert torch.equal(torch.load(step / "dump_tensor_data" / add["output"][0]["data_name"]),
                       torch.full((3,), 6.0))
    mode = oct((step / "dump_tensor_data" / add["output"][0]["data_name"]).stat().st_mode & 0o777)
    assert mode == "0o640"


def test_tensor_task_on_a_training_step(tmp_path):
    """Every tensor the GPT's step touches (float32, int64 tokens, bool mask) is saved and loads back
    with the statistics its entry reports."""
    dbg = msprobe_cpp.PrecisionDebugger(config_path=tensor_config(tmp_path, level="mix", step=[0]))
    train(make_model("gpt"), 1, debugger=dbg)
    step = tmp_path / "d" / "step0" / "rank"
    doc = read_dump_file(step)

    def entries(value):
        if isinstance(value, list):
            for v in value:
                yield from entries(v)
        elif isinstance(value, dict) and value.get("type") == "torch.Tensor":
            yield value

    seen = set()
    checked = 0
    for record in doc["data"].values():
        for part in ("input_args", "input", "output"):
            for entry in entries(record.get(part, [])):
                t = torch.load(step / "dump_tensor_data" / entry["data_name"])
                assert str(t.dtype) == entry["dtype"] and list(t.shape) == entry["shape"]
                if t.dtype != torch.bool and t.numel():
                    assert t.double().max().item() == pytest.approx(entry["Max"], rel=1e-6)
                    assert t.double().norm().item() == pytest.approx(entry["Norm"], rel=1e-6)
                seen.add(entry["dtype"])
                checked += 1
    assert {"torch.float32", "torch.int64", "torch.bool"} <= seen
    assert checked == len(list((step / "dump_tensor_data").iterdir())) > 100
