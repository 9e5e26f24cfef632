"""Finds torch's GradScaler at work: its scale() is wrapped while the debugger is live, so a step
whose loss it scaled is known as one (its gradient overflows are the scaler's to skip)."""
from typing import Any, Callable, List, Optional

import torch

from .patches import Patches


def _grad_scaler_classes() -> List[type]:
    classes = []
    for owner in (getattr(torch, "amp", None), getattr(torch.cuda, "amp", None)):
        cls = getattr(owner, "GradScaler", None)
        if isinstance(cls, type) and cls not in classes:
            classes.append(cls)
    return classes


def watch_grad_scalers(patches: Patches, notify: Callable[[], Optional[Callable[[Any], None]]]) -> None:
    """Wraps each GradScaler class's scale() (kind "grad_scaler"), once: `notify()` returns the
    callable told of each scale(scaler, ...) call, or None once its owner is gone (a
    weakref.WeakMethod)."""
    if patches.installed("grad_scaler"):
        return
    for cls in _grad_scaler_classes():
        original = cls.__dict__.get("scale")
        if original is None:
            continue  # inherited: wrapped in the base class

        def scale(scaler: Any, outputs: Any, _original: Any = original) -> Any:
            seen = notify()
            if seen is not None:
                seen(scaler)
            return _original(scaler, outputs)

        scale.__wrapped__ = original  # type: ignore[attr-defined]
        patches.replace("grad_scaler", cls, "scale", scale)


class LossScaleSource:
    """Where this step's loss scale comes from: the scaler given to start() (`given`, any object
    with get_scale()), and the scaler that scaled this step's loss (`scaled_by`: the given one, or
    a torch GradScaler seen at scale()), whose scale step() reads again. The scale itself is the
    engine's (_C.Session.set_loss_scaled, judge_loss_scale)."""

    def __init__(self) -> None:
        self.given: Any = None
        self.scaled_by: Any = None
