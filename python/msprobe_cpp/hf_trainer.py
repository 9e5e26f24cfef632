"""Hugging Face Trainer in one line: the debugger starts, stops and steps once per optimizer step.

    from msprobe_cpp.hf_trainer import PrecisionDebuggerCallback
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[PrecisionDebuggerCallback(config_path="config.json")])
    trainer.train()  # a stop raises msprobe_cpp.OverflowError out of train(), its dump written

With gradient accumulation the micro-batches of one optimizer step are one debugger step (the
Trainer's on_step_begin comes before the first, on_step_end after the optimizer step). The model
the Trainer hands its callbacks is started (the one it trains, not a DDP wrapper), with the
Trainer's GradScaler (accelerate's, on the prepared optimizer) as the loss scaler, so the steps
it skips are not stops. Evaluation runs between steps, with the debugger stopped.

Steps are the debugger's own count from 0, as with a hand-written loop: `step` in the config
counts optimizer steps of this train() call, not the Trainer's global_step of a resumed run.
"""
from typing import Any, Optional

from transformers import TrainerCallback

from .debugger import PrecisionDebugger


def trainer_grad_scaler(optimizer: Any) -> Optional[Any]:
    """accelerate's AcceleratedOptimizer holds the GradScaler it steps with (None without fp16)."""
    scaler = getattr(optimizer, "scaler", None)
    return scaler if callable(getattr(scaler, "get_scale", None)) else None


class PrecisionDebuggerCallback(TrainerCallback):
    """`PrecisionDebuggerCallback(config_path=..., **keywords)` makes its PrecisionDebugger
    (`debugger=` hands one over instead); `.debugger` is it."""

    def __init__(self, config_path: Optional[str] = None, debugger: Optional[PrecisionDebugger] = None,
                 **keywords: Any) -> None:
        if debugger is not None and (config_path is not None or keywords):
            raise TypeError("PrecisionDebuggerCallback: give either debugger= or a config, not both")
        self.debugger = debugger if debugger is not None else PrecisionDebugger(config_path=config_path,
                                                                                **keywords)
        self._started = False

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                      **kwargs: Any) -> None:
        self.debugger.start(model, loss_scaler=trainer_grad_scaler(optimizer))
        self._started = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._started:
            self._started = False
            self.debugger.stop()
            self.debugger.step()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # An earlier train() that a stop ended left no step open: the raise ended it.
        self._started = False
