"""A started model that is saved (torch.save, pickle) or copied (copy.deepcopy, as an EMA is made)
carries none of our hooks: the saved or copied module is plain, as it was before start(), and the
original stays hooked. Our hooks are C++ callables, which cannot be pickled (torch.save failed and
left a half-written file), and a deep copy would carry them to a model nobody started (the EMA
recorded under the model's names, and never released).

How: while a debugger is live, torch.nn.Module's __getstate__ (what pickle and deepcopy read)
leaves out the entries of our hook handles from the module's hook dictionaries. A module class
with a __getstate__ of its own is not covered."""
from typing import Any, Iterable

import torch

from .patches import Patches

_MISSING = object()
# A module's hook dictionaries, keyed by handle id (both torches' names; a missing one is skipped).
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
               "_backward_pre_hooks")


def keep_copies_plain(patches: Patches, kinds: Iterable[str]) -> None:
    """Module.__getstate__ leaves out the hooks `patches` holds under `kinds` (kind
    "plain_copies"), once; those registered later are left out too."""
    if patches.installed("plain_copies"):
        return
    own = torch.nn.Module.__dict__.get("__getstate__", _MISSING)  # torch 2.x has one, 1.13 none
    kinds = tuple(kinds)

    def __getstate__(self_module: torch.nn.Module) -> Any:
        state = dict(own(self_module) if own is not _MISSING else self_module.__dict__)
        ids = None
        for key in _HOOK_DICTS:
            hooks = state.get(key)
            if not hooks:
                continue
            ids = patches.hook_ids(kinds) if ids is None else ids
            if not ids.isdisjoint(hooks):
                state[key] = type(hooks)((k, v) for k, v in hooks.items() if k not in ids)
        return state

    patches.replace("plain_copies", torch.nn.Module, "__getstate__", __getstate__)
