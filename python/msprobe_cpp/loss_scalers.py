"""Finds torch's GradScaler at work: its scale() is wrapped while the debugger is live, so a step
whose loss it scaled is known as one (its gradient overflows are the scaler's to skip)."""
from typing import Any, Callable, List, Optional, Tuple

import torch


def _grad_scaler_classes() -> List[type]:
    classes = []
    for owner in (getattr(torch, "amp", None), getattr(torch.cuda, "amp", None)):
        cls = getattr(owner, "GradScaler", None)
        if isinstance(cls, type) and cls not in classes:
            classes.append(cls)
    return classes


class GradScalerWatch:
    """`notify()` returns the callable told of each scale(scaler, ...) call, or None once its
    owner is gone (a weakref.WeakMethod)."""

    def __init__(self, notify: Callable[[], Optional[Callable[[Any], None]]]) -> None:
        self._notify = notify
        self._saved: List[Tuple[type, Any]] = []

    def install(self) -> None:
        if self._saved:
            return
        for cls in _grad_scaler_classes():
            original = cls.__dict__.get("scale")
            if original is None:
                continue  # inherited: wrapped in the base class
            notify = self._notify

            def scale(scaler: Any, outputs: Any, _original: Any = original) -> Any:
                seen = notify()
                if seen is not None:
                    seen(scaler)
                return _original(scaler, outputs)

            scale.__wrapped__ = original  # type: ignore[attr-defined]
            self._saved.append((cls, original))
            setattr(cls, "scale", scale)

    def remove(self) -> None:
        for cls, original in reversed(self._saved):
            setattr(cls, "scale", original)
        self._saved = []
