"""TrainerMon on a DeepSpeed engine (CPU accelerator, one rank): training is unaltered at every
ZeRO stage. Under ZeRO-3 the monitor's wg_distribution once made each parameter's gradient
accumulator while DeepSpeed held the parameter partitioned (no elements), which fixed its shape at
zero: the first backward failed ("LinearFunctionForZeroStage3Backward returned an invalid
gradient ... expected shape compatible with [0]"). Such parameters are now left unwatched, and
the monitor says so."""
import json
import os

import pytest

pytest.importorskip("deepspeed")

from dist_runs import run_python  # noqa: E402
from gloo import free_port, needs_gloo  # noqa: E402
from testenv import PACKAGE_ROOT  # noqa: E402

pytestmark = [pytest.mark.slow, needs_gloo]

# One process: a bare engine and a monitored one, from the same seed, for each stage asked for;
# prints each one's losses as hex, as JSON on the last line.
SCRIPT = """
import importlib, json, os, sys, torch
import deepspeed, msprobe_cpp
# Without DeepSpeed's shared-memory inference all-reduce, compiled at its first start in a venv and
# never called by training (ds_worker.py says more).
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

def losses(stage, monitor):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": stage}, "steps_per_print": 10 ** 9}
    engine, optimizer, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=cfg)
    if monitor:
        mon = msprobe_cpp.TrainerMon(sys.argv[1], params_have_main_grad=False)
        mon.set_monitor(engine, optimizer)
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(3):
        x, y = torch.randn(4, 16, generator=g), torch.randint(0, 4, (4,), generator=g)
        loss = torch.nn.functional.cross_entropy(engine(x), y)
        engine.backward(loss)
        engine.step()
        out.append(loss.item().hex())
    return out

result = {}
for stage in map(int, sys.argv[2].split(",")):
    result[stage] = {"bare": losses(stage, False), "monitored": losses(stage, True)}
print(json.dumps(result))
"""


def test_every_zero_stage_trains_as_without_the_monitor(tmp_path):
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"targets": {}, "all_xy": True, "xy_distribution": True,
                                  "wg_distribution": True, "mv_distribution": True,
                                  "ops": ["min", "max", "norm"], "format": "csv"}))
    env = dict(os.environ, DS_ACCELERATOR="cpu", MONITOR_OUTPUT_DIR=str(tmp_path / "out"),
               PYTHONPATH=str(PACKAGE_ROOT), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = run_python(["-c", SCRIPT, str(config), "1,3"], env=env, cwd=tmp_path, timeout=300,
                      preload=("deepspeed", "deepspeed.runtime.engine"))
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for stage, runs in result.items():
        assert runs["monitored"] == runs["bare"], f"ZeRO-{stage}"
    # ZeRO-3's four partitioned parameters are named as unwatched, once; ZeRO-1's are watched.
    assert done.stderr.count("wg_distribution: 4 parameters hold no elements now") == 1, done.stderr[-4000:]
    # Two runs' folders (their names may fall in the same second): ZeRO-1's has the rows.
    watched = sorted(any(f.name.startswith("grad_unreduced") for f in run.iterdir())
                     for run in (tmp_path / "out").iterdir())
    assert watched == [False, True]
