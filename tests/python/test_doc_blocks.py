"""The README's and docs' ```python blocks run, as written, so they cannot go stale (```py marks an
excerpt that is not a program: a signature, two lines out of a model).

Each block runs in a folder holding the README's config.json, with the names a training script has
by then, given as the block expects them:
- `model`, `loader` (batches of (x, y)), `loss_fn`, `optimizer`: a small classifier on the test's
  device;
- in a block that imports transformers: `model` (a tiny GPT-2), `args` (TrainingArguments),
  `train_dataset`;
- in a block that imports lightning: `model` (a LightningModule), `train_loader`.
The debugger a block leaves live, and what it does to the logger, are undone after it."""
import logging
import pathlib
import re
from typing import Any, Dict, List

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from testenv import ROOT

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(language: str) -> List[Any]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == language:
                line = text.count("\n", 0, m.start()) + 1
                out.append(pytest.param(m.group(2), id=f"{path.relative_to(ROOT)}:{line}"))
    return out


def readme_config() -> str:
    (config,) = [p.values[0] for p in blocks("json") if p.id.startswith("README.md")]
    return config


def plain_names(device: str) -> Dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    g = torch.Generator().manual_seed(1)
    loader = [(torch.randn(4, 8, generator=g).to(device), torch.randint(0, 4, (4,), generator=g).to(device))
              for _ in range(3)]
    return {"model": model, "loader": loader, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}


def transformers_names(tmp_path: pathlib.Path) -> Dict[str, Any]:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer needs it (a venv may have transformers alone)
    import real_models
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = []
    for _ in range(4):
        ids = torch.randint(1, real_models.VOCAB, (real_models.SEQ,), generator=g)
        data.append({"input_ids": ids, "labels": ids.clone()})
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=2,
                                          max_steps=2, use_cpu=True, report_to=[], save_strategy="no",
                                          disable_tqdm=True)
    return {"model": real_models.gpt2(), "args": args, "train_dataset": data}


def lightning_names() -> Dict[str, Any]:
    lightning = pytest.importorskip("lightning")

    class Classifier(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g))
    return {"model": Classifier(), "train_loader": torch.utils.data.DataLoader(data, batch_size=4)}


@pytest.fixture
def in_a_script_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(readme_config())
    logger = logging.getLogger("msprobe_cpp")
    handlers, level = logger.handlers[:], logger.level
    yield tmp_path
    for handler in logger.handlers:
        if handler not in handlers:
            handler.close()
    logger.handlers = handlers
    logger.setLevel(level)
    live = msprobe_cpp.PrecisionDebugger._instance
    if live is not None and not live._patches.closed:
        live._release()


def test_the_readme_shows_a_config_that_loads(in_a_script_folder):
    debugger = msprobe_cpp.PrecisionDebugger(config_path="config.json")
    assert debugger._session.watching  # task overflow_check


@pytest.mark.parametrize("code", blocks("python"))
def test_a_python_block_runs_as_written(code, in_a_script_folder):
    if "torch.amp.GradScaler" in code and not hasattr(torch.amp, "GradScaler"):
        pytest.skip("torch.amp.GradScaler is torch 2.x's: the torch 2 run executes this block")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if re.search(r"^\s*(from|import) transformers\b", code, re.M):
        names = transformers_names(in_a_script_folder)
    elif re.search(r"^\s*(from|import) lightning\b", code, re.M):
        names = lightning_names()
    else:
        names = plain_names(device)
    exec(compile(code, "<doc block>", "exec"), names)  # noqa: S102 - the documentation's own code
