"""msprobe 1.1.1's Python API beside PrecisionDebugger (shared/MSPROBE-API.md): seed_all,
module_dump / module_dump_end, the debugger's methods called on the class, and what a script gets
at exit, from deprecated keys and from a relative dump_path."""
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from dumps import load
from testenv import PACKAGE_ROOT


def train_losses(seed: int) -> list:
    msprobe_cpp.seed_all(seed)
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 4))
    data = torch.randn(16, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        loss = model(data).pow(2).mean() + random.random() * 0
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_seed_all_makes_two_runs_identical():
    first, second = train_losses(7), train_losses(7)
    assert first == second
    assert train_losses(8) != first
    assert os.environ["PYTHONHASHSEED"] == "8"


def test_seed_all_mode_turns_deterministic_algorithms_on_and_off():
    try:
        msprobe_cpp.seed_all(1, mode=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["HCCL_DETERMINISTIC"] == "True"
        if torch.cuda.is_available():  # an op torch knows to be nondeterministic there
            with pytest.raises(RuntimeError, match="deterministic"):
                torch.zeros(4, device="cuda").index_add_(0, torch.tensor([0, 0], device="cuda"),
                                                        torch.ones(2, device="cuda"))
    finally:
        msprobe_cpp.seed_all(1, mode=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_seed_all_on_cuda_sets_what_msprobe_sets_and_leaves_cudnn_on(monkeypatch):
    """On a CUDA machine (a stand-in here: torch.cuda's seeding and availability), cuDNN is made
    deterministic without benchmarking, as msprobe's seed_all does, and stays enabled: msprobe's
    `cudnn.enable = False` names no switch torch has (issue 33)."""
    seeded = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda s: seeded.append(("all", s)))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda s: seeded.append(("one", s)))
    cudnn = torch.backends.cudnn
    for name in ("enabled", "deterministic", "benchmark"):
        monkeypatch.setattr(cudnn, name, getattr(cudnn, name))  # put back afterwards
    cudnn.enabled, cudnn.deterministic, cudnn.benchmark = True, False, True
    msprobe_cpp.seed_all(5)
    assert ("all", 5) in seeded and ("one", 5) in seeded  # torch.manual_seed seeds CUDA too
    assert (cudnn.enabled, cudnn.deterministic, cudnn.benchmark) == (True, True, False)


@pytest.mark.parametrize("args, message", [(("1",), "seed must be an int"), ((True,), "seed must be an int"),
                                           ((1, "yes"), "mode must be a bool")])
def test_seed_all_checks_its_arguments(args, message):
    with pytest.raises(TypeError, match=message):
        msprobe_cpp.seed_all(*args)


def test_module_dump_rejects_wrong_types(tmp_path):
    msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "dump"))
    with pytest.raises(TypeError, match="module must be a torch.nn.Module, got str"):
        msprobe_cpp.module_dump("model", "name")
    with pytest.raises(TypeError, match="dump_name must be a str, got int"):
        msprobe_cpp.module_dump(nn.Linear(2, 2), 3)


def test_module_dump_then_normal_recording(tmp_path):
    inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    head = nn.Linear(4, 1)
    debugger = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1")
    data = torch.randn(2, 4)
    debugger.start()
    x = torch.tanh(data)
    msprobe_cpp.module_dump(inner, "probe_me")
    y = inner(x)
    msprobe_cpp.module_dump_end()
    head(y).sum().backward()
    debugger.stop()
    debugger.drain()  # async_dump: the step's files on disk
    names = list(load(tmp_path / "dump" / "step0" / "rank")["data"])
    assert names[:3] == ["Torch.tanh.0.forward", "Module.probe_me.Sequential.forward.0", "Functional.linear.0.forward"]
    assert "Module.probe_me.Sequential.backward.0" in names
    assert not any("relu" in n.lower() for n in names)  # the module's insides
    assert sum(n.startswith("Functional.linear.") for n in names) == 2  # the head's, forward and backward


def test_the_methods_act_on_the_live_debugger_when_called_on_the_class(tmp_path, monkeypatch):
    live = msprobe_cpp.PrecisionDebugger._instance
    if live is not None:  # an earlier test's: its hooks must not stay in under the one made here
        live._release()
    monkeypatch.setattr(msprobe_cpp.PrecisionDebugger, "_instance", None)
    with pytest.raises(RuntimeError, match=r"PrecisionDebugger.start\(\): no PrecisionDebugger exists yet"):
        msprobe_cpp.PrecisionDebugger.start()
    msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1")
    ones = torch.ones(2)
    msprobe_cpp.PrecisionDebugger.start()
    torch.tanh(ones)
    msprobe_cpp.PrecisionDebugger.forward_backward_dump_end()
    torch.exp(ones)  # after the block: not recorded
    msprobe_cpp.PrecisionDebugger.stop()
    msprobe_cpp.PrecisionDebugger.step()
    msprobe_cpp.PrecisionDebugger._instance._release()
    assert list(load(tmp_path / "dump" / "step0" / "rank")["data"]) == ["Torch.tanh.0.forward"]


def run_script(tmp_path: pathlib.Path, body: str, config: dict) -> subprocess.CompletedProcess:
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "script.py").write_text("import torch\nimport msprobe_cpp\n" + body)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_script_ending_without_stop_gets_its_step_written(tmp_path):
    done = run_script(tmp_path, "d = msprobe_cpp.PrecisionDebugger('config.json')\nx = torch.ones(2)\n"
                                "d.start()\ntorch.tanh(x).sum()\n",
                      {"task": "statistics", "dump_path": "./dump", "level": "L1"})
    assert done.returncode == 0, done.stderr
    assert list(load(tmp_path / "dump" / "step0" / "rank")["data"]) == ["Torch.tanh.0.forward", "Tensor.sum.0.forward"]


def test_enable_dataloader_is_accepted_with_one_warning(tmp_path):
    done = run_script(tmp_path, "msprobe_cpp.PrecisionDebugger('config.json')\n",
                      {"task": "statistics", "dump_path": "./dump", "enable_dataloader": True})
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "enable_dataloader" in line]
    assert lines == ["msprobe_cpp: warning: config.json: enable_dataloader: true is deprecated (msprobe "
                     "1.1.1) and ignored: call start(), stop() and step() around each training step"]


def test_dump_data_dir_keeps_a_relative_dump_path_relative(tmp_path):
    done = run_script(tmp_path, "d = msprobe_cpp.PrecisionDebugger('config.json')\nd.start()\n"
                                "torch.tanh(torch.ones(2))\nd.stop()\nd.step()\n",
                      {"task": "tensor", "dump_path": "./rel_dump/", "level": "L1"})
    assert done.returncode == 0, done.stderr
    dump = load(tmp_path / "rel_dump" / "step0" / "rank")
    assert dump["dump_data_dir"] == "./rel_dump/step0/rank/dump_tensor_data"
    assert (tmp_path / dump["dump_data_dir"] / dump["data"]["Torch.tanh.0.forward"]["output"][0]["data_name"]).exists()


@pytest.mark.parametrize("error", ["ConfigError", "RulesError", "WriteError"])
def test_a_traceback_names_the_errors_as_users_import_them(error):
    """`msprobe_cpp.ConfigError: ...`, not `msprobe_cpp._C.ConfigError` (issue 33)."""
    code = (f"import msprobe_cpp\nraise msprobe_cpp.{error}('the message')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT)))
    assert done.stderr.splitlines()[-1] == f"msprobe_cpp.{error}: the message", done.stderr
    assert getattr(msprobe_cpp, error).__module__ == "msprobe_cpp"


def test_step_before_any_start_warns_once_and_counts_on(tmp_path, capfd):
    debugger = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path))
    debugger.step()
    debugger.step()
    err = capfd.readouterr().err
    assert err.count("step() before any start(): step 0 ends with nothing recorded") == 1, err
    debugger.start()
    torch.ones(2).add(1)
    debugger.stop()
    debugger._release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step2"]  # msprobe's count goes on


def test_an_earlier_runs_step_folders_are_told_once_with_their_count(tmp_path, capfd):
    def run(steps: int) -> str:
        debugger = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path))
        for _ in range(steps):
            debugger.start()
            torch.ones(2).add(1)
            debugger.stop()
            debugger.step()
        debugger._release()
        return capfd.readouterr().err

    assert "earlier run" not in run(3)
    err = run(2)
    assert err.count(f"{tmp_path} holds 3 step folders of an earlier run (rank): a step this run writes "
                     "replaces its folder there, the others stay") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step0", "step1", "step2"]
