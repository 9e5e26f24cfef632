"""A started model that is saved (torch.save, pickle) or copied (copy.deepcopy, as an EMA is made)
carries none of our hooks: the saved or copied module is plain, as it was before start(), and the
original stays hooked. Our hooks are C++ callables, which cannot be pickled (torch.save failed and
left a half-written file), and a deep copy would carry them to a model nobody started (the EMA
recorded under the model's names, and never released).

How: while a debugger is live, torch.nn.Module's __getstate__ (what pickle and deepcopy read)
leaves out the entries of our hook handles from the module's hook dictionaries. A module class
with a __getstate__ of its own is not covered."""
from typing import Any, Iterable, Set

import torch

_MISSING = object()
# A module's hook dictionaries, keyed by handle id (both torches' names; a missing one is skipped).
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
               "_backward_pre_hooks")


class PlainCopies:
    def __init__(self) -> None:
        self._ids: Set[int] = set()
        self._own: Any = _MISSING  # Module's own __getstate__ (torch 2.x), or none (1.13)
        self._installed = False

    def add(self, handles: Iterable[Any]) -> None:
        """Hooks (their RemovableHandles) that saved and copied modules leave out."""
        self._ids.update(h.id for h in handles)

    def install(self) -> None:
        if self._installed:
            return
        module = torch.nn.Module
        self._own = module.__dict__.get("__getstate__", _MISSING)
        own, ids = self._own, self._ids

        def __getstate__(self_module: torch.nn.Module) -> Any:
            state = dict(own(self_module) if own is not _MISSING else self_module.__dict__)
            for key in _HOOK_DICTS:
                hooks = state.get(key)
                if hooks and not ids.isdisjoint(hooks):
                    state[key] = type(hooks)((k, v) for k, v in hooks.items() if k not in ids)
            return state

        module.__getstate__ = __getstate__  # type: ignore[assignment]
        self._installed = True

    def remove(self) -> None:
        if not self._installed:
            return
        if self._own is _MISSING:
            del torch.nn.Module.__getstate__
        else:
            torch.nn.Module.__getstate__ = self._own  # type: ignore[assignment]
        self._installed = False
        self._ids = set()
