"""PrecisionDebugger: msprobe's entry point, backed by the C++ session."""
import json
import os
from typing import Any, List, Optional

import torch

from . import _C
from .api_hooks import ApiHooks

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames under here are torch's, not the user's line an overflow stop names.
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _rank() -> int:
    """torch.distributed rank, or -1 when it is not initialized (folder `rank`)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return -1


def _register_pre_hook(module: torch.nn.Module, hook: Any) -> Any:
    """With keyword arguments where PyTorch can pass them (2.0 and later)."""
    try:
        return module.register_forward_pre_hook(hook, with_kwargs=True)
    except TypeError:
        return module.register_forward_pre_hook(hook)


class PrecisionDebugger:
    """Collects msprobe-format dumps of a training run.

    PrecisionDebugger(config_path="config.json") reads msprobe's config.json; keyword arguments
    (task, dump_path, level, step, rank) override it, or configure it alone without a file. A bad
    config raises ConfigError before any hook is installed.
    """

    _instance: Optional["PrecisionDebugger"] = None

    def __init__(self, config_path: Optional[str] = None, **overrides: Any) -> None:
        overrides = {k: v for k, v in overrides.items() if v is not None}
        self._session = _C.Session(config_path or "", json.dumps(overrides), PACKAGE_DIR, TORCH_DIR)
        self._api_hooks = ApiHooks()
        self._module_handles: List[Any] = []
        self._model: Optional[torch.nn.Module] = None
        self._done = False
        if PrecisionDebugger._instance is not None:
            PrecisionDebugger._instance._release()
        PrecisionDebugger._instance = self
        _C.set_current_session(self._session)

    @property
    def dump_path(self) -> str:
        return self._session.dump_path

    def start(self, model: Optional[torch.nn.Module] = None) -> None:
        """Begins (or resumes) collection for the current step; installs hooks the first time."""
        if self._done or self._session.finished:
            self._release()
            return
        if self._session.modules_hooked and model is None and not self._module_handles:
            raise ValueError(f"PrecisionDebugger.start: level {self._session.level} records modules, "
                             "so start(model) needs the model")
        if self._session.apis_hooked:
            self._api_hooks.install()
        wants_modules = self._session.modules_hooked or self._session.watching
        if wants_modules and model is not None and model is not self._model:
            self._hook_modules(model, record=self._session.modules_hooked)
        self._session.start(_rank())

    def stop(self) -> None:
        """Ends collection for now and writes the step's files."""
        self._session.stop()

    def step(self) -> None:
        """Moves to the next step; after the last configured step every hook is removed."""
        self._session.step()
        if self._session.finished:
            self._release()

    @classmethod
    def forward_backward_dump_end(cls) -> None:
        """Stops collection until the next start(), e.g. to leave the optimizer out."""
        if cls._instance is not None:
            cls._instance._session.pause()

    def _hook_modules(self, model: torch.nn.Module, record: bool) -> None:
        """record=False: only track the enclosing module (L1 overflow_check), no module records
        and no backward hooks, so nothing about the model's autograd graph changes."""
        self._unhook_modules()
        self._model = model
        for name, module in model.named_modules():
            if module is model:
                continue  # the root passed to start() is not itself recorded
            pre, post, backward = _C.module_hooks(name, type(module).__name__, record)
            self._module_handles += [_register_pre_hook(module, pre), module.register_forward_hook(post)]
            if record:
                self._module_handles.append(module.register_full_backward_hook(backward))

    def _unhook_modules(self) -> None:
        for handle in self._module_handles:
            handle.remove()
        self._module_handles = []
        self._model = None

    def _release(self) -> None:
        """Removes every hook; the debugger collects nothing more."""
        self._api_hooks.remove()
        self._unhook_modules()
        self._done = True
        if PrecisionDebugger._instance is self:
            _C.set_current_session(None)


def _release_after_stop() -> None:
    """Called by the engine when an overflow stops the run, before the exception is raised."""
    if PrecisionDebugger._instance is not None:
        PrecisionDebugger._instance._release()
