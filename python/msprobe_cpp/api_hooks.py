"""Installs and removes the C++ API wrappers listed in rules/support_wrap_ops.yaml."""
import os
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed
import torch.nn.functional

from . import _C

RULES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rules")

# YAML section -> (object whose attributes are wrapped, call-name prefix)
_NAMESPACES = {
    "torch": (torch, "Torch"),
    "tensor": (torch.Tensor, "Tensor"),
    "functional": (torch.nn.functional, "Functional"),
    "distributed": (torch.distributed, "Distributed"),
    "vf": (torch._VF, "VF"),
}

_MISSING = object()


class ApiHooks:
    """The wrapped attributes and what they were, so that removal restores every one exactly."""

    def __init__(self) -> None:
        self._saved: List[Tuple[Any, str, Any]] = []  # (owner, name, value in owner.__dict__ or _MISSING)

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def install(self, wrap_ops_path: str = os.path.join(RULES_DIR, "support_wrap_ops.yaml")) -> None:
        if self._saved:
            return
        ops: Dict[str, List[str]] = _C.load_wrap_ops(wrap_ops_path)
        for section, names in ops.items():
            if section not in _NAMESPACES:
                continue
            owner, prefix = _NAMESPACES[section]
            if section == "distributed" and not torch.distributed.is_available():
                continue
            for name in names:
                original = getattr(owner, name, _MISSING)
                if original is _MISSING or not callable(original) or isinstance(original, type):
                    continue  # not in this torch version
                hook = _C.ApiHook(f"{prefix}.{name}", original)
                wrapper = _C.as_method(hook) if owner is torch.Tensor else hook
                # Tensor methods usually live in torch._C._TensorBase, not in torch.Tensor's own
                # __dict__: remember which, so removal deletes rather than shadows.
                own = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else original
                self._saved.append((owner, name, own))
                setattr(owner, name, wrapper)

    def remove(self) -> None:
        for owner, name, own in reversed(self._saved):
            if own is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
        self._saved = []
