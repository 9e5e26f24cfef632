"""A config in msprobe 26.x's form gets 26.2.0's files; a 1.1.x config keeps 1.1.1's (docs/config.md
and docs/formats.md, "msprobe 1.1.x and 26.x"). Real training steps of a small model, on each
device; msprobe 26.2.0 itself reading these dumps is tests/python/test_msprobe26_peer.py."""
import json
import os
import pathlib

import pytest
import torch

import msprobe_cpp
from dumps import load
from testenv import devices

# msprobe 26.2.0's own shipped config.json, but for the dump path.
SHIPPED_26 = {
    "task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1",
    "extra_info": True, "async_dump": False,
    "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    "acc_check": {"white_list": [], "black_list": [], "error_data_path": "./"},
}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x)).reshape(x.shape[0], 8)
        n = torch.linalg.norm(h, dim=1, keepdim=True) + torch.norm(h)
        return self.fc2(h / n)


def train(tmp_path: pathlib.Path, device: str, steps: int = 2, **config) -> pathlib.Path:
    """`steps` steps under a config file of SHIPPED_26 updated with `config` (None removes a key);
    returns the dump folder."""
    doc = dict(SHIPPED_26, dump_path=str(tmp_path / "dump"))
    for key, value in config.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    torch.manual_seed(0)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    for _ in range(steps):
        dbg.start(model)
        x = torch.randn(4, 6, device=device)
        y = torch.randint(0, 3, (4,), device=device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()
    release(dbg)
    return tmp_path / "dump"


def release(dbg) -> None:
    """The next debugger of a test starts from nothing: its own wrap list and names."""
    dbg._release()
    msprobe_cpp.PrecisionDebugger._instance = None


def only_rank_folder(dump: pathlib.Path, step: int = 0) -> pathlib.Path:
    folders = list((dump / f"step{step}").iterdir())
    assert len(folders) == 1, folders
    return folders[0]


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_a_26_config_gets_26s_header_folder_and_stacks(tmp_path, device):
    folder = only_rank_folder(train(tmp_path, device))
    assert folder.name == f"proc{os.getpid()}"
    text = (folder / "dump.json").read_text()
    assert list(json.loads(text)) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert json.loads(text)["framework"] == "pytorch"
    stacks = load(folder, "stack.json")
    assert list(stacks) == [str(i) for i in range(len(stacks))]
    names = [n for group in stacks.values() for n in group[0]]
    data = load(folder)["data"]
    assert sorted(names) == sorted(n for n in data if n.endswith(".forward"))
    assert all(isinstance(group[1], list) and group[1] for group in stacks.values())


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_a_11_config_keeps_11s_files(tmp_path, device):
    folder = only_rank_folder(train(tmp_path, device, extra_info=None, acc_check=None))  # 1.1.1's form
    assert folder.name == "rank"
    assert list(load(folder)) == ["task", "level", "dump_data_dir", "data"]
    stacks = load(folder, "stack.json")
    data = load(folder)["data"]
    assert sorted(stacks) == sorted(n for n in data if n.endswith(".forward"))
    assert "Tensor.reshape.0.forward" in data and "Torch.linalg.norm.0.forward" in data


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_risk_level_leaves_out_what_26_leaves_out(tmp_path, device):
    focus = load(only_rank_folder(train(tmp_path / "focus", device)))["data"]
    everything = load(only_rank_folder(train(tmp_path / "all", device, risk_level="ALL")))["data"]
    core_dump = train(tmp_path / "core", device, risk_level="CORE")
    # CORE keeps no call of this model (26.2.0 misses a comma: not even linear): no step written.
    core = load(only_rank_folder(core_dump))["data"] if (core_dump / "step0").exists() else {}
    assert "Tensor.reshape.0.forward" in everything and "Tensor.reshape.0.forward" not in focus
    assert "Torch.relu.0.forward" in focus and "Torch.relu.0.forward" not in core
    # Named as 26.2.0 names them: a dotted API by its last part, counted with torch.norm.
    assert {"Torch.norm.0.forward", "Torch.norm.1.forward"} <= set(everything)
    assert "Torch.linalg.norm.0.forward" not in everything
    # The calls kept keep their numbers: a filtered API never shifts another's.
    assert set(focus) <= set(everything)
    # A list chooses instead of the risk level.
    listed = load(only_rank_folder(train(tmp_path / "listed", device, statistics=dict(
        SHIPPED_26["statistics"], list=["reshape"]))))["data"]
    assert "Tensor.reshape.0.forward" in listed


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_integer_tensors_and_precision_high_write_null_mean_and_norm(tmp_path, device):
    data = load(only_rank_folder(train(tmp_path / "low", device, risk_level="ALL")))["data"]
    target = data["Functional.cross_entropy.0.forward"]["input_args"][1]
    assert target["dtype"] == "torch.int64" and target["Mean"] is None and target["Norm"] is None
    assert isinstance(target["Max"], int) and isinstance(target["Min"], int)  # .item() of an int64 tensor
    logits = data["Functional.cross_entropy.0.forward"]["input_args"][0]
    assert logits["Mean"] is not None and logits["Norm"] is not None
    high = load(only_rank_folder(train(tmp_path / "high", device, risk_level="ALL", precision="high")))["data"]
    logits = high["Functional.cross_entropy.0.forward"]["input_args"][0]
    assert logits["Mean"] is None and logits["Norm"] is None and logits["Max"] is not None


def test_extra_info_false_writes_dump_json_alone(tmp_path):
    folder = only_rank_folder(train(tmp_path, "cpu", extra_info=False))
    assert sorted(p.name for p in folder.iterdir()) == ["dump.json"]


def test_26s_wrap_list_records_split_not_getitem(tmp_path):
    class Indexing(torch.nn.Module):
        def forward(self, x):
            return x[0:2].split(1)[0].sum()

    for generation, expect, absent in (("26", "Tensor.split.0.forward", "Tensor.__getitem__.0.forward"),
                                       ("1.1", "Tensor.__getitem__.0.forward", "Tensor.split.0.forward")):
        path = tmp_path / generation / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"task": "statistics", "dump_path": str(path.parent / "dump"), "level": "L1",
                                    "risk_level": "ALL", "msprobe_generation": generation}))
        dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
        dbg.start(Indexing())
        Indexing()(torch.randn(3, 2))
        dbg.stop()
        dbg.step()
        release(dbg)
        data = load(only_rank_folder(path.parent / "dump"))["data"]
        assert expect in data and absent not in data, (generation, sorted(data))


def test_start_takes_26s_rank_id_and_refuses_its_inference_arguments(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(SHIPPED_26, dump_path=str(tmp_path / "dump"))))
    model = Net()
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    for bad in ({"token_range": [0, 4]}, {"rank_id": -1}, {"rank_id": "0"}):
        with pytest.raises(ValueError, match="PrecisionDebugger.start: "):
            dbg.start(model, **bad)
    dbg.start(model, rank_id=3)
    model(torch.randn(2, 6))
    dbg.stop()
    dbg.step()
    release(dbg)
    assert [p.name for p in (tmp_path / "dump" / "step0").iterdir()] == ["rank3"]
