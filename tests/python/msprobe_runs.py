"""Runs a script written for msprobe with our import, and where msprobe is installed (the torch 2
venv) with msprobe's own: the record names of each step folder, to compare."""
import json
import os
import pathlib
import subprocess
import sys
from typing import Any, Dict, List

from dist_runs import run_python
from testenv import PACKAGE_ROOT, TESTS

EXAMPLES = TESTS / "msprobe_examples"
OUR_IMPORT = "from msprobe_cpp import"
THEIR_IMPORT = "from msprobe.pytorch import"


def tool_imports(tool: str) -> tuple:
    """What a run of `tool` imports besides torch: a warm server's preload (dist_runs.run_python)."""
    return ("msprobe.pytorch",) if tool == "msprobe" else ()


def msprobe_version() -> str:
    """The version of the msprobe installed here (mindstudio-probe: 1.1.1 in the torch 2 venv,
    26.2.0 in the torch 2.13 venv), or ""."""
    import importlib.metadata
    try:
        return importlib.metadata.version("mindstudio-probe")
    except importlib.metadata.PackageNotFoundError:
        return ""


def msprobe_missing() -> str:
    """Why msprobe 1.1.1 cannot be a peer here, or ""."""
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        return "msprobe 1.1.1 needs PyTorch 2.x; it is installed in the torch 2 environment"
    if msprobe_version() != "1.1.1":
        return f"msprobe 1.1.1 is not installed here ({msprobe_version() or 'no msprobe'})"
    return ""


def needs_msprobe(test: Any) -> Any:
    """Skips `test` where msprobe 1.1.1 cannot run."""
    import pytest
    return pytest.mark.skipif(bool(msprobe_missing()), reason=msprobe_missing() or "-")(test)


def msprobe_installed() -> bool:
    """msprobe 1.1.1 is here and imports."""
    if msprobe_version() != "1.1.1":
        return False
    probe = subprocess.run([sys.executable, "-c", "import msprobe.pytorch"], capture_output=True)
    return probe.returncode == 0


def run_example(name: str, folder: pathlib.Path, level: str, theirs: bool = False,
                task: str = "statistics") -> Dict[str, List[str]]:
    """Runs msprobe_examples/<name> in `folder` (its config.json dumps into ./dump); returns each
    step folder's record names in file order."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "task": task, "dump_path": "./dump", "rank": [], "step": [], "level": level,
        "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}))
    script = (EXAMPLES / name).read_text()
    if theirs:
        script = script.replace(OUR_IMPORT, THEIR_IMPORT)
    (folder / name).write_text(script)
    path = os.pathsep.join([str(PACKAGE_ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])
    done = run_python([name, "config.json"], cwd=folder, env=dict(os.environ, PYTHONPATH=path), timeout=300,
                      preload=tool_imports("msprobe" if theirs else "ours"))
    assert done.returncode == 0, done.stderr[-3000:]
    names = {}
    for dump in sorted((folder / "dump").glob("step*/rank*/dump.json")):
        names[str(dump.parent.relative_to(folder / "dump"))] = list(json.loads(dump.read_text())["data"])
    return names


# --- one training step of a Hugging Face model (real_models.py), under either tool ------------------

# Run in a process of its own (`python -c HF_STEP TOOL NAME CONFIG`), so that msprobe's hooks and
# ours never meet. The model, its weights, the batch and the optimizer are real_models' (seeded);
# every dropout is made a no-op in both runs before the debugger starts: nn.Dropout's p and the
# `attention_dropout` that HF attention modules hand to scaled_dot_product_attention are set to 0.
# (msprobe itself swaps F.dropout for a p=0 copy, which leaves sdpa's dropout_p alone; we alter
# nothing.) One thread, so that both processes compute the same bits.
HF_STEP = """
import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
import real_models
tool, name, config, grads = sys.argv[1:5]
if tool == "msprobe":
    from msprobe.pytorch import PrecisionDebugger
elif tool == "ours":
    from msprobe_cpp import PrecisionDebugger
else:  # "none": the same step without a tool
    class PrecisionDebugger:
        def __init__(self, **_): pass
        def start(self, model): pass
        stop = step = lambda self: None
torch.set_num_threads(1)
model, make_batch, make_optimizer = real_models.build(name)
zeroed = []
for qualified, module in model.named_modules():
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        module.p = 0.0
        zeroed.append(qualified + ".p")
    if isinstance(getattr(module, "attention_dropout", None), float):
        module.attention_dropout = 0.0
        zeroed.append(qualified + ".attention_dropout")
batch = real_models.batches(make_batch, 1)[0]
optimizer = make_optimizer(model)
model.train()
torch.manual_seed(real_models.DROPOUT_SEED)
debugger = PrecisionDebugger(config_path=config)
debugger.start(model)
loss = model(*batch.args, **batch.kwargs).loss
loss.backward()
optimizer.step()
debugger.stop()
debugger.step()
torch.save({n: p.grad for n, p in model.named_parameters()}, grads)
print(json.dumps({"loss": loss.item(), "zeroed": zeroed}))
"""


def dump_hf_step(name: str, folder: pathlib.Path, tool: str, level: str = "mix",
                 task: str = "statistics") -> Dict[str, object]:
    """One training step of real_models' `name` under `tool` ("msprobe", "ours", or "none": no
    tool) in a process of its own, dumped into folder/dump (step [0]). Returns {"rank": the
    step0/rank folder, "loss": the step's loss, "zeroed": the dropout attributes set to 0,
    "grads": a torch.save file of the parameters' gradients after the step (by name),
    "seconds": the process's time}."""
    import time
    folder.mkdir(parents=True)
    config = folder / "config.json"
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        section["summary_mode"] = "statistics"
    config.write_text(json.dumps({"task": task, "dump_path": str(folder / "dump"), "rank": [], "step": [0],
                                  "level": level, task: section}))
    # Absolute: the process runs in `folder` (MSPROBE_CPP_PACKAGE_ROOT may be relative).
    path = os.pathsep.join([str(PACKAGE_ROOT.resolve()), str(TESTS), os.environ.get("PYTHONPATH", "")])
    started = time.perf_counter()
    grads = folder / "grads.pt"
    done = run_python(["-c", HF_STEP, tool, name, str(config), str(grads)], cwd=folder,
                      env=dict(os.environ, PYTHONPATH=path, HF_HUB_OFFLINE="1"), timeout=600,
                      preload=("transformers", *tool_imports(tool)))
    seconds = time.perf_counter() - started
    assert done.returncode == 0, f"{tool} on {name}: {done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])  # msprobe logs to stdout before it
    return dict(report, rank=folder / "dump" / "step0" / "rank", grads=grads, seconds=seconds)
