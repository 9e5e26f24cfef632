"""kill -9 at random moments of a task-tensor run: every step folder that holds dump.json is
complete, every tensor it names exists and loads, and the next start() removes the temporaries a
killed write left."""
import json
import pathlib
import random
import subprocess
import sys
import time

import torch

import msprobe_cpp

ROOT = pathlib.Path(__file__).resolve().parents[2]
from conftest import PACKAGE_ROOT  # noqa: E402

TRAIN = """
import sys
sys.path.insert(0, {python!r}); sys.path.insert(0, {tests!r})
import torch, msprobe_cpp
from models import make_batches, make_model, make_optimizer, train_step
torch.set_num_threads(1)
model = make_model("mlp")
opt = make_optimizer(model)
dbg = msprobe_cpp.PrecisionDebugger(task="tensor", dump_path=sys.argv[1], level="L1")
batches = make_batches(model, 8)
print("ready", flush=True)
for i in range(10 ** 6):
    x, y = batches[i % len(batches)]
    train_step(model, opt, x, y, dbg)
"""


def test_kill_9_leaves_only_complete_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(python=str(PACKAGE_ROOT), tests=str(ROOT / "tests" / "python")))
    dump = tmp_path / "dump"
    rng = random.Random(7)
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, str(script), str(dump)], stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            proc.kill()
            proc.wait(timeout=60)

    complete = 0
    for folder in dump.glob("step*/rank"):
        if not (folder / "dump.json").exists():
            continue
        complete += 1
        assert (folder / "stack.json").exists() and (folder / "construct.json").exists(), folder
        data = json.loads((folder / "dump.json").read_text())["data"]
        for record in data.values():
            for side in ("input_args", "output", "input"):
                for entry in record.get(side, []):
                    if isinstance(entry, dict) and "data_name" in entry:
                        t = torch.load(folder / "dump_tensor_data" / entry["data_name"])
                        assert list(t.shape) == entry["shape"]
    assert complete > 0

    dbg = msprobe_cpp.PrecisionDebugger(task="tensor", dump_path=str(dump), level="L1", step=[10 ** 6])
    dbg.start()  # no step of it is collected; its first start() cleans
    left = [p for p in dump.rglob("*") if ".tmp." in p.name]
    assert left == []
