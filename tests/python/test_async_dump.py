"""`async_dump` (msprobe's key; ours is on by default under statistics and tensor, issue 56):
stop() hands the step's records to a write thread and returns; the files are the same as a
synchronous dump's, complete once drain() returns, the debugger is released or the process ends
(normally or by an exception), and a stop that raises still leaves its step on disk. `false`
writes in stop(). (kill -9: test_kill.py, both ways; the bounded queue: tests/cpp
test_job_thread.cpp.)"""
import json
import os
import pathlib
import subprocess
import sys
from typing import Dict, List

import pytest
import torch

import msprobe_cpp
from msprobe_cpp import _C
from models import fp16_overflow_at, make_batches, make_model, make_optimizer, run_steps, train, train_step
from testenv import PACKAGE_ROOT, TESTS
from dumps import load as read_dump_file


def config(tmp_path: pathlib.Path, name: str, **fields) -> str:
    path = tmp_path / f"{name}.json"
    doc = {"task": "statistics", "dump_path": str(tmp_path / name), "level": "L1"}
    doc.update(fields)
    path.write_text(json.dumps(doc))
    return str(path)


def dumps(root: pathlib.Path) -> Dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text())
            for p in sorted(root.glob("step*/rank/dump.json"))}


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_the_files_are_those_of_a_synchronous_dump(tmp_path):
    losses = {}
    for name, on in (("sync", False), ("async", True)):
        dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, name, async_dump=on, step=[0, 1, 2, 3]))
        losses[name] = train(make_model("gpt"), 4, debugger=dbg)  # its last step releases it
    assert losses["sync"] == losses["async"] == train(make_model("gpt"), 4)
    sync, written = dumps(tmp_path / "sync"), dumps(tmp_path / "async")
    assert list(written) == ["step0", "step1", "step2", "step3"]
    for step in sync:
        mine = {k: v for k, v in written[step].items() if k != "dump_data_dir"}
        theirs = {k: v for k, v in sync[step].items() if k != "dump_data_dir"}
        assert mine == theirs, step
    for f in ("stack.json", "construct.json"):
        assert (tmp_path / "async" / "step3" / "rank" / f).read_text() == \
            (tmp_path / "sync" / "step3" / "rank" / f).read_text()


def test_stop_hands_the_step_to_a_thread_of_its_own(tmp_path):
    model, before = make_model("mlp"), threads()
    opt = make_optimizer(model)
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "sync", async_dump=False))
    for step, (x, y) in enumerate(make_batches(model, 2)):
        train_step(model, opt, x, y, dbg)
        assert (tmp_path / "sync" / f"step{step}" / "rank" / "dump.json").is_file()
    # The synchronous dump writes on the training thread: a hand-over would cost more than the
    # write (docs/decisions.md); only a stop's step goes to the write thread.
    assert threads() == before
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "async", async_dump=True))
    for x, y in make_batches(model, 2):
        train_step(model, opt, x, y, dbg)
    assert threads() == before + 1
    dbg._release()
    assert list(dumps(tmp_path / "async")) == ["step0", "step1"]


def threads_of_a_run(tmp_path: pathlib.Path, name: str, task: str, **fields) -> int:
    """Two steps under `task` (overflow_check: step 1's batch is NaN, which stops in stop()); the
    threads the process has once the second has ended."""
    model = make_model("mlp")
    opt = make_optimizer(model)
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, name, task=task, **fields))
    for step, (x, y) in enumerate(make_batches(model, 2)):
        if task == "overflow_check" and step == 1:
            x = torch.full_like(x, float("nan"))
        try:
            train_step(model, opt, x, y, dbg)
        except msprobe_cpp.OverflowError:
            break
    count = threads()
    dbg.drain()
    return count


@pytest.mark.parametrize("task, on", [("statistics", True), ("tensor", True), ("overflow_check", False)])
def test_left_out_it_is_on_for_the_tasks_that_write_every_step(tmp_path, task, on):
    # Synchronous first: a thread of the process is the writer's only where it was left out.
    sync = threads_of_a_run(tmp_path, "sync", task, async_dump=False)
    default = threads_of_a_run(tmp_path, "d", task)
    assert default == sync + (1 if on else 0)
    assert list(dumps(tmp_path / "d")) == list(dumps(tmp_path / "sync")) == \
        (["step0", "step1"] if on else ["step1"])


def test_drain_waits_for_every_step_handed_over(tmp_path):
    model = make_model("gpt")
    opt = make_optimizer(model)
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "d"))
    for x, y in make_batches(model, 6):
        train_step(model, opt, x, y, dbg)
    dbg.drain()
    assert list(dumps(tmp_path / "d")) == [f"step{i}" for i in range(6)]
    assert not [p for p in (tmp_path / "d").iterdir() if p.name.startswith(".")]


def test_two_stops_in_one_step_write_every_call(tmp_path):
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "async", async_dump=True))
    a = torch.ones(3)
    dbg.start()
    torch.add(a, 1)
    dbg.stop()  # handed over; the step goes on
    dbg.start()
    torch.mul(a, 2)
    dbg.stop()  # writes the step again, the first stop's calls with it
    dbg.step()
    dbg._release()
    assert list(dumps(tmp_path / "async")["step0"]["data"]) == ["Torch.add.0.forward", "Torch.mul.0.forward"]


@pytest.mark.parametrize("async_dump", [False, True], ids=["sync", "async_dump"])
def test_a_step_written_again_keeps_the_tensors_of_its_first_write(tmp_path, async_dump):
    # Each write is built apart and replaces the published folder whole (docs/formats.md): the
    # second carries the first one's tensors over.
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "d", task="tensor", async_dump=async_dump))
    a = torch.arange(3.0)
    for _ in range(2):
        dbg.start()
        torch.add(a, 1)
        dbg.stop()
        dbg.start()
        torch.mul(a, 2)
        dbg.stop()
        dbg.step()
    dbg._release()
    root = tmp_path / "d"
    assert sorted(p.name for p in root.iterdir()) == ["step0", "step1"]
    for step, dump in dumps(root).items():
        data = dump["data"]
        assert list(data) == ["Torch.add.0.forward", "Torch.mul.0.forward"], step
        folder = root / step / "rank" / "dump_tensor_data"
        named = [e["data_name"] for record in data.values()
                 for e in record["input_args"] + record["output"] if "data_name" in e]
        assert sorted(p.name for p in folder.iterdir()) == sorted(named), step
        outputs = [record["output"][0]["data_name"] for record in data.values()]
        assert torch.equal(torch.load(folder / outputs[0]), a + 1)
        assert torch.equal(torch.load(folder / outputs[1]), a * 2)


EXITS = {
    "normal": "",
    "exception": "raise RuntimeError('the training script fails')",
    "sys.exit": "sys.exit(3)",
}


@pytest.mark.parametrize("how", list(EXITS))
def test_the_process_end_leaves_every_step_handed_over(tmp_path, how):
    script = tmp_path / "train.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(PACKAGE_ROOT)!r}); sys.path.insert(0, {str(TESTS)!r})
import torch, msprobe_cpp
from models import make_batches, make_model, make_optimizer, train_step
torch.set_num_threads(1)
model = make_model("gpt")
opt = make_optimizer(model)
dbg = msprobe_cpp.PrecisionDebugger(config_path={config(tmp_path, "async", async_dump=True)!r})
for x, y in make_batches(model, 5):
    train_step(model, opt, x, y, dbg)
{EXITS[how]}
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == {"normal": 0, "exception": 1, "sys.exit": 3}[how], done.stderr[-2000:]
    written = dumps(tmp_path / "async")
    assert list(written) == [f"step{i}" for i in range(5)]
    assert all(len(d["data"]) > 100 for d in written.values())


def test_a_stop_that_raises_leaves_its_step_on_disk(tmp_path):
    model = make_model("gpt")
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(
        tmp_path, "async", task="overflow_check", async_dump=True))
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run_steps(model, 4, dbg, fp16_overflow_at([2], block=1, model=model))
    # No drain, no release: the raise wrote the flagged step before the exception left stop().
    step = pathlib.Path(info.value.dump_dir)
    data = read_dump_file(step)["data"]
    assert list(data)[-1] == info.value.call


def test_a_full_disk_costs_the_dump_not_the_training(tmp_path, capfd):
    _C._set_write_budget(0)
    try:
        dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "async", async_dump=True, step=[0, 1, 2]))
        losses: List[float] = train(make_model("mlp"), 3, debugger=dbg)
    finally:
        _C._set_write_budget(-1)
    assert losses == train(make_model("mlp"), 3)
    assert not (tmp_path / "async").exists() or not any((tmp_path / "async").rglob("*.json"))
    err = capfd.readouterr().err
    assert err.count("could not be written") == 1, err


def test_async_dump_is_a_keyword_too(tmp_path):
    """PrecisionDebugger(async_dump=True) (issue 32): a thread of its own writes, as with the key;
    the keyword wins over the file's value, and a bad value is one ConfigError naming it."""
    model = make_model("mlp")
    opt = make_optimizer(model)
    sync = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "sync"))  # retires earlier ones
    train_step(model, opt, *make_batches(model, 1)[0], sync)
    before = threads()
    dbg = msprobe_cpp.PrecisionDebugger(config_path=config(tmp_path, "kw", async_dump=False), async_dump=True)
    for x, y in make_batches(model, 2):
        train_step(model, opt, x, y, dbg)
    assert threads() == before + 1
    dbg._release()
    assert list(dumps(tmp_path / "kw")) == ["step0", "step1"]
    with pytest.raises(msprobe_cpp.ConfigError, match=r"PrecisionDebugger\(async_dump=\.\.\.\)"):
        msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "bad"), async_dump="yes")
