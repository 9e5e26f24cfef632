"""The Hugging Face Trainer and Lightning callbacks (msprobe_cpp.hf_trainer, .lightning_callback):
one debugger step per optimizer step, with gradient accumulation; the trainer's GradScaler as the
loss scaler; a clean run unaltered, bit for bit; a planted fp16 overflow stops in its step with the
right call and its dump on disk, the OverflowError leaving train()/fit().

Real fp16 on the CPU: Lightning's own MixedPrecision("16-mixed", "cpu") plugin (autocast and
torch.amp.GradScaler("cpu")). accelerate refuses fp16 on the CPU, so the Trainer is given what it
would build on a GPU (native autocast and a GradScaler, for "cpu"), before train() prepares them."""
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp

transformers = pytest.importorskip("transformers", reason="transformers is in the torch 2 test venv")
lightning = pytest.importorskip("lightning", reason="lightning is in the torch 2 test venv")

import real_models  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is used)
from msprobe_cpp import hf_trainer, lightning_callback  # noqa: E402

STEPS = 4          # optimizer steps
ACCUMULATE = 2     # micro-batches per optimizer step
BAD_STEP = 2       # the optimizer step whose forward overflows


def guard_keywords(tmp_path: pathlib.Path) -> Dict[str, Any]:
    return dict(task="overflow_check", dump_path=str(tmp_path / "dump"), level="L1")


def steps_on_disk(tmp_path: pathlib.Path) -> List[str]:
    root = tmp_path / "dump"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def assert_dumped(tmp_path: pathlib.Path, step: int) -> None:
    assert steps_on_disk(tmp_path) == [f"step{step}"]
    folder = tmp_path / "dump" / f"step{step}" / "rank"
    assert (folder / "dump.json").exists() and (folder / "overflow_report.json").exists()


def same_state(a: nn.Module, b: Dict[str, torch.Tensor]) -> bool:
    sa = a.state_dict()
    return sa.keys() == b.keys() and all(torch.equal(sa[k], b[k]) for k in sa)


# --- Hugging Face Trainer --------------------------------------------------------------------------

class LossesSeen(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.grad_norms: List[float] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grad_norms.append(float(sum(p.grad.double().pow(2).sum() for p in model.parameters()
                                         if p.grad is not None)))


class OverflowingWeight(transformers.TrainerCallback):
    """A weight that grew too large for float16 (as a diverging run's does), before BAD_STEP."""

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == BAD_STEP:
            with torch.no_grad():
                model.transformer.h[1].mlp.c_fc.weight.mul_(1e4)


def hf_train(tmp_path: pathlib.Path, callbacks: List[Any], init_scale: float = 2.0 ** 16
             ) -> Tuple[Any, Any, Optional[msprobe_cpp.OverflowError]]:
    torch.manual_seed(real_models.MODEL_SEED)
    model = real_models.gpt2()
    g = torch.Generator().manual_seed(real_models.DATA_SEED)
    data = []
    for _ in range(STEPS * ACCUMULATE * 2):
        ids = torch.randint(1, real_models.VOCAB, (real_models.SEQ,), generator=g)
        data.append({"input_ids": ids, "labels": ids.clone()})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=2, max_steps=STEPS,
        gradient_accumulation_steps=ACCUMULATE, use_cpu=True, fp16=True, report_to=[], logging_strategy="no",
        save_strategy="no", disable_tqdm=True, dataloader_num_workers=0, seed=real_models.DROPOUT_SEED)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    # What accelerate builds for fp16 on a GPU: autocast at prepare(), a GradScaler on the optimizer.
    trainer.accelerator.native_amp = True
    trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    try:
        trainer.train()
    except msprobe_cpp.OverflowError as e:
        return trainer, model, e
    return trainer, model, None


def test_hf_trainer_clean_run_is_unaltered_with_one_debugger_step_per_optimizer_step(tmp_path):
    plain_seen = LossesSeen()
    _, plain, _ = hf_train(tmp_path / "plain", [plain_seen])
    seen = LossesSeen()
    cb = hf_trainer.PrecisionDebuggerCallback(**guard_keywords(tmp_path))
    trainer, guarded, stop = hf_train(tmp_path, [seen, cb])
    assert stop is None and steps_on_disk(tmp_path) == []
    assert seen.grad_norms == plain_seen.grad_norms and len(seen.grad_norms) == STEPS
    assert same_state(guarded, plain.state_dict())
    assert cb.debugger._session.current_step == STEPS  # not STEPS * ACCUMULATE
    # The scaler the callback hands the debugger is the one the Trainer steps with.
    assert hf_trainer.trainer_grad_scaler(trainer.optimizer) is trainer.accelerator.scaler


def test_hf_trainer_planted_fp16_overflow_stops_in_its_step_out_of_train(tmp_path):
    cb = hf_trainer.PrecisionDebuggerCallback(**guard_keywords(tmp_path))
    trainer, _, stop = hf_train(tmp_path, [OverflowingWeight(), cb])
    assert stop is not None, "the overflow was not stopped"
    assert (stop.step, stop.origin) == (BAD_STEP, "op")
    assert stop.module.startswith("Module.transformer.h.1.mlp."), stop.module
    assert trainer.state.global_step == BAD_STEP  # no optimizer step took the NaN in
    assert_dumped(tmp_path, BAD_STEP)


def test_hf_trainer_steps_its_scaler_skips_are_not_stops(tmp_path, caplog):
    cb = hf_trainer.PrecisionDebuggerCallback(**guard_keywords(tmp_path))
    said: List[str] = []

    class Keep(__import__("logging").Handler):
        def emit(self, record):
            said.append(record.getMessage())

    keep = Keep()
    msprobe_cpp.log.logger.addHandler(keep)
    try:
        trainer, _, stop = hf_train(tmp_path, [cb], init_scale=2.0 ** 40)  # fp16 gradients overflow at first
    finally:
        msprobe_cpp.log.logger.removeHandler(keep)
    assert stop is None and steps_on_disk(tmp_path) == []
    skipped = [line for line in said if "the loss scaler skipped the step" in line]
    assert skipped and trainer.accelerator.scaler.get_scale() < 2.0 ** 40


# --- Lightning ---------------------------------------------------------------------------------------

class NetSteps:
    """A small classifier's LightningModule body, for either package's LightningModule."""

    def __init__(self, plant: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.plant = plant
        self.grad_norms: List[float] = []
        self.validated = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.plant and self.trainer.global_step == BAD_STEP and batch_idx % ACCUMULATE == 0:
            with torch.no_grad():
                self.fc1.weight.mul_(1e5)  # too large for float16 from here on
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        self.validated += 1
        x, y = batch
        return F.cross_entropy(self(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.grad_norms.append(float(sum(p.grad.double().pow(2).sum() for p in self.parameters())))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class Net(NetSteps, lightning.LightningModule):
    pass


def loader(seed: int, n: int) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed)
    data = torch.utils.data.TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g))
    return torch.utils.data.DataLoader(data, batch_size=8)


def fit(tmp_path: pathlib.Path, callbacks: List[Any], plant: bool = False, package: Any = None
        ) -> Tuple[Any, Any, Optional[msprobe_cpp.OverflowError]]:
    """`package`: lightning.pytorch (the default) or pytorch_lightning."""
    package = package or lightning.pytorch
    package.seed_everything(0, verbose=False)
    model = (Net if package is lightning.pytorch else type("PlNet", (NetSteps, package.LightningModule), {}))(plant)
    # Two epochs of two optimizer steps, validated at each epoch's end: inside a fit(), between steps.
    trainer = package.Trainer(
        accelerator="cpu", max_steps=STEPS, limit_train_batches=STEPS // 2 * ACCUMULATE,
        accumulate_grad_batches=ACCUMULATE, plugins=[package.plugins.precision.MixedPrecision("16-mixed", "cpu")],
        callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(tmp_path / "trainer"))
    try:
        trainer.fit(model, loader(1, 64), loader(2, 16))
    except msprobe_cpp.OverflowError as e:
        return trainer, model, e
    return trainer, model, None


def test_lightning_clean_run_is_unaltered_with_one_debugger_step_per_optimizer_step(tmp_path):
    _, plain, _ = fit(tmp_path / "plain", [])
    cb = lightning_callback.PrecisionDebuggerCallback(**guard_keywords(tmp_path))
    trainer, guarded, stop = fit(tmp_path, [cb])
    assert stop is None and steps_on_disk(tmp_path) == []
    assert guarded.grad_norms == plain.grad_norms and len(guarded.grad_norms) == STEPS
    assert same_state(guarded, plain.state_dict())
    assert guarded.validated == plain.validated > 0
    assert cb.debugger._session.current_step == STEPS  # not one per micro-batch
    assert lightning_callback.trainer_grad_scaler(trainer) is trainer.precision_plugin.scaler is not None


def test_lightning_planted_fp16_overflow_stops_in_its_step_out_of_fit(tmp_path):
    cb = lightning_callback.PrecisionDebuggerCallback(**guard_keywords(tmp_path))
    trainer, _, stop = fit(tmp_path, [cb], plant=True)
    assert stop is not None, "the overflow was not stopped"
    assert (stop.step, stop.origin, stop.module) == (BAD_STEP, "op", "Module.fc1.Linear.forward.0")
    assert stop.call.startswith("Functional.linear.")
    assert trainer.global_step == BAD_STEP
    assert_dumped(tmp_path, BAD_STEP)


def test_the_callback_is_pytorch_lightnings_too(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    cb = lightning_callback.PrecisionDebuggerCallback(**guard_keywords(tmp_path))
    assert isinstance(cb, pl.Callback) and isinstance(cb, lightning.pytorch.Callback)
    _, _, stop = fit(tmp_path, [cb], plant=True, package=pl)
    assert stop is not None and stop.step == BAD_STEP
    assert_dumped(tmp_path, BAD_STEP)


def test_a_callback_takes_a_debugger_or_a_config_not_both(tmp_path):
    dbg = msprobe_cpp.PrecisionDebugger(**guard_keywords(tmp_path))
    assert hf_trainer.PrecisionDebuggerCallback(debugger=dbg).debugger is dbg
    with pytest.raises(TypeError, match="either debugger= or a config"):
        lightning_callback.PrecisionDebuggerCallback(debugger=dbg, level="L1")
