"""kill -9 in the middle of a task-tensor run: every step folder is complete (dump.json and every
tensor it names, which loads) or absent, every step the run had finished is there, and the next
start() removes the temporaries and the unfinished folders a killed write left.

Where the kill lands is chosen, not left to the machine's speed: the child reports each step it
has written, and the parent kills it a seeded fraction of a step after the Nth report, so the kill
falls inside the next step (its writes included) and the steps that must be on disk are known."""
import json
import os
import pathlib
import random
import shutil
import sys
import time
from typing import Any, Tuple

import pytest
import torch

import msprobe_cpp
from dist_runs import run_python, start_python
from dumps import load as read_dump_file
from testenv import PACKAGE_ROOT, TESTS, said_besides_on_line

pytestmark = pytest.mark.slow  # tools/test.sh --fast leaves it out

TRAIN = """
import sys
sys.path.insert(0, {python!r}); sys.path.insert(0, {tests!r})
import json, os, time, torch, msprobe_cpp
from models import make_batches, make_model, make_optimizer, train_step
torch.set_num_threads(1)
model = make_model("mlp")
opt = make_optimizer(model)
batches = make_batches(model, 8)
print("@ ready", flush=True)
while not os.path.exists(sys.argv[3]):  # started while the run before it trains; goes on once
    time.sleep(0.002)                   # that one is killed
config = sys.argv[1] + "_config.json"
with open(config, "w") as f:
    json.dump({{"task": "tensor", "dump_path": sys.argv[1], "level": "L1", "async_dump": sys.argv[2] == "1"}}, f)
dbg = msprobe_cpp.PrecisionDebugger(config_path=config)
for i in range(10 ** 6):
    x, y = batches[i % len(batches)]
    train_step(model, opt, x, y, dbg)
    print("@ stopped", i, flush=True)  # train_step's stop() has written step i, or handed it over
"""


def assert_complete(folder: pathlib.Path) -> None:
    assert (folder / "stack.json").exists() and (folder / "construct.json").exists(), folder
    data = read_dump_file(folder)["data"]
    for record in data.values():
        for side in ("input_args", "output", "input"):
            for entry in record.get(side, []):
                if isinstance(entry, dict) and "data_name" in entry:
                    t = torch.load(folder / "dump_tensor_data" / entry["data_name"])
                    assert list(t.shape) == entry["shape"]


def assert_none_partial(dump: pathlib.Path, attempt) -> None:
    # What a reader takes for a step: step<S>/ and each folder in it, all with their dump.json.
    for step in dump.glob("step*"):
        ranks = list(step.iterdir())
        assert ranks, (attempt, step)
        for rank in ranks:
            assert (rank / "dump.json").exists(), (attempt, rank, sorted(p.name for p in rank.iterdir()))


class Lines:
    """The lines a process writes into its log (stdout and stderr) that begin with "@ ", as they
    come, without it."""

    def __init__(self, proc, path: pathlib.Path) -> None:
        self.proc, self.path, self.read, self.pending = proc, path, 0, b""

    def readline(self, timeout: float = 120.0) -> bytes:
        line = self._next(timeout)
        while line and not line.startswith(b"@ "):
            line = self._next(timeout)
        return line[2:]

    def _next(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ended = self.proc.poll() is not None  # before the read: its last line is in the file
            with open(self.path, "rb") as f:
                f.seek(self.read)
                chunk = f.read()
            self.read += len(chunk)
            self.pending += chunk
            if b"\n" in self.pending:
                break
            if ended or time.monotonic() > deadline:
                line, self.pending = self.pending, b""
                return line
            time.sleep(0.002)
        line, self.pending = self.pending.split(b"\n", 1)
        return line + b"\n"


def unfinished(dump: pathlib.Path) -> list:
    return [p for p in dump.iterdir() if p.name.startswith(".msprobe_cpp_partial")]


# async_dump: at most 4 steps wait beside the one being written (StepWriter::kStepsAhead), so
# step i is on disk once the stop() of step i + 5 has returned.
@pytest.mark.parametrize("async_dump, lag", [(False, 0), (True, 5)], ids=["sync", "async_dump"])
def test_kill_9_leaves_only_complete_steps(tmp_path, capfd, async_dump, lag):
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(python=str(PACKAGE_ROOT), tests=str(TESTS)))
    dump = tmp_path / "dump"
    rng = random.Random(7)
    attempts = 20

    def spawn(n: int) -> Tuple[Any, Lines, pathlib.Path]:
        go = tmp_path / f"go{n}"
        proc = start_python([str(script), str(dump), str(int(async_dump)), str(go)], env=dict(os.environ),
                            cwd=tmp_path, log=tmp_path / f"run{n}.log")
        return proc, Lines(proc, tmp_path / f"run{n}.log"), go

    # Each run is started while the one before it trains (its start overlaps), and waits for its
    # go file to go on until that one is killed.
    waiting = spawn(0)
    for attempt in range(attempts):
        written = 1 + attempt % 2
        (proc, lines, go), waiting = waiting, (spawn(attempt + 1) if attempt + 1 < attempts else None)
        try:
            assert lines.readline().strip() == b"ready"
            go.touch()
            times = [time.monotonic()]
            for i in range(written + lag):
                assert lines.readline().split() == [b"stopped", str(i).encode()]
                times.append(time.monotonic())
            time.sleep(rng.uniform(0.0, 1.0) * (times[-1] - times[-2]))
        finally:
            proc.kill()
            proc.wait(timeout=60)
            if waiting is not None and sys.exc_info()[0] is not None:
                waiting[0].kill()
                waiting[0].wait(timeout=60)
        assert_none_partial(dump, attempt)
        # The runs share the dump folder. The steps this run reported, it wrote whole after any
        # earlier run's writes, whatever its kill then cut short.
        for step in range(written):
            folder = dump / f"step{step}" / "rank"
            assert (folder / "dump.json").exists(), (attempt, folder)
            assert_complete(folder)

    complete = [folder for folder in dump.glob("step*/rank") if (folder / "dump.json").exists()]
    for folder in complete:
        assert_complete(folder)
    assert {f.parent.name for f in complete} >= {"step0", "step1"}

    # What a kill inside a write leaves, whether or not one of the kills above landed there.
    planted = dump / "step0" / "rank" / "dump_tensor_data" / "Torch.x.0.forward.input.0.pt.tmp.Ab12Cd"
    planted.write_bytes(b"half")
    dbg = msprobe_cpp.PrecisionDebugger(task="tensor", dump_path=str(dump), level="L1", step=[10 ** 6])
    orphans = len(unfinished(dump))
    capfd.readouterr()
    dbg.start()  # no step of it is collected; its first start() cleans
    left = [p for p in dump.rglob("*") if ".tmp." in p.name]
    assert left == []
    assert unfinished(dump) == []
    said = capfd.readouterr().err
    if orphans:
        assert f"removed {orphans} unfinished step folder" in said, said
    assert_none_partial(dump, "end")


KILLED = """
import os, sys, time
sys.path.insert(0, {python!r}); sys.path.insert(0, {tests!r})
import torch, msprobe_cpp
from models import make_batches, make_model, make_optimizer, train_step
torch.set_num_threads(1)
model = make_model("mlp")
opt = make_optimizer(model)
dbg = msprobe_cpp.PrecisionDebugger(task=sys.argv[2], dump_path=sys.argv[1], level="L1",
                                    async_dump=sys.argv[3] == "1")
batches = make_batches(model, 8)
for i in range(2):
    train_step(model, opt, *batches[i], dbg)
dbg._session.drain_writes()
dbg.start()
model(batches[2][0])  # the third step's calls, its tensors saved (task tensor) but not written
time.sleep(0.5)
os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize("task", ["tensor", "statistics"])
@pytest.mark.parametrize("async_dump", [False, True], ids=["sync", "async_dump"])
def test_start_after_kill_removes_unfinished_folders(tmp_path, capfd, task, async_dump):
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(python=str(PACKAGE_ROOT), tests=str(TESTS)))
    dump = tmp_path / "dump"
    proc = run_python([str(script), str(dump), task, str(int(async_dump))], env=dict(os.environ), timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert_none_partial(dump, task)
    assert sorted(p.name for p in dump.glob("step*")) == ["step0", "step1"]
    orphans = unfinished(dump)
    # Task tensor saves as the calls happen: the unfinished third step left its folder.
    assert len(orphans) == (1 if task == "tensor" else 0)
    if orphans:  # and another one, to count
        shutil.copytree(orphans[0], orphans[0].with_name(orphans[0].name + "0"), symlinks=True)
    orphans = len(unfinished(dump))
    capfd.readouterr()
    dbg = msprobe_cpp.PrecisionDebugger(task=task, dump_path=str(dump), level="L1", step=[10 ** 6])
    dbg.start()
    dbg.start()  # said once
    said = said_besides_on_line(capfd.readouterr().err)
    assert unfinished(dump) == []
    # The killed run's two finished steps are told too (issue 33), once, before the orphans.
    earlier = (f"msprobe_cpp: warning: {dump} holds 2 step folders of an earlier run (rank): a step this run "
               "writes replaces its folder there, the others stay\n")
    expected = f"msprobe_cpp: warning: removed {orphans} unfinished step folders of an earlier run under {dump}\n"
    assert said == earlier + (expected if orphans else ""), said
    assert sorted(p.name for p in dump.iterdir()) == ["step0", "step1"]
