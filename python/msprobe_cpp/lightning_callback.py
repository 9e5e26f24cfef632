"""Lightning in one line: the debugger starts, stops and steps once per optimizer step.

    from msprobe_cpp.lightning_callback import PrecisionDebuggerCallback
    trainer = lightning.Trainer(callbacks=[PrecisionDebuggerCallback(config_path="config.json")])
    trainer.fit(model, data)  # a stop raises msprobe_cpp.OverflowError out of fit(), its dump written

The callback is a Callback of `lightning.pytorch` and of `pytorch_lightning`, whichever are
installed, so either package's Trainer takes it. A debugger step opens at the first training batch
after the last optimizer step and closes after the batch whose optimizer step ran, so with
`accumulate_grad_batches` the micro-batches of one optimizer step are one debugger step. The
LightningModule is started, with the precision plugin's GradScaler (16-mixed) as the loss scaler,
so the steps it skips are not stops. Validation inside fit() runs with the debugger stopped.

Steps are the debugger's own count from 0: `step` in the config counts optimizer steps of this
fit() call, not the trainer's global_step of a resumed run.
"""
import importlib
from typing import Any, List, Optional

from .debugger import PrecisionDebugger


def _callback_bases() -> tuple:
    bases: List[type] = []
    for module in ("lightning.pytorch.callbacks", "pytorch_lightning.callbacks"):
        try:
            bases.append(importlib.import_module(module).Callback)
        except ImportError:
            continue
    if not bases:
        raise ImportError("msprobe_cpp.lightning_callback needs lightning or pytorch_lightning")
    return tuple(bases)


def trainer_grad_scaler(trainer: Any) -> Optional[Any]:
    """The GradScaler of the trainer's precision plugin (16-mixed), else None."""
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    return scaler if callable(getattr(scaler, "get_scale", None)) else None


class PrecisionDebuggerCallback(*_callback_bases()):  # type: ignore[misc]
    """`PrecisionDebuggerCallback(config_path=..., **keywords)` makes its PrecisionDebugger
    (`debugger=` hands one over instead); `.debugger` is it."""

    def __init__(self, config_path: Optional[str] = None, debugger: Optional[PrecisionDebugger] = None,
                 **keywords: Any) -> None:
        super().__init__()
        if debugger is not None and (config_path is not None or keywords):
            raise TypeError("PrecisionDebuggerCallback: give either debugger= or a config, not both")
        self.debugger = debugger if debugger is not None else PrecisionDebugger(config_path=config_path,
                                                                                **keywords)
        self._started = False    # a debugger step is open
        self._stepped = False    # its optimizer step ran
        self._paused = False     # stopped for validation inside the open step

    def _start(self, trainer: Any, pl_module: Any) -> None:
        self.debugger.start(pl_module, loss_scaler=trainer_grad_scaler(trainer))

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._started = self._stepped = self._paused = False

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if not self._started:
            self._start(trainer, pl_module)
            self._started = True

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._stepped = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._started and self._stepped:
            self._started = self._stepped = False
            self.debugger.stop()
            self.debugger.step()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._started and not self._paused:
            self._paused = True
            self.debugger.stop()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._paused:
            self._paused = False
            self._start(trainer, pl_module)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        # An overflow stop already ended its step; any other error leaves the step to the next fit().
        self._started = self._stepped = self._paused = False
