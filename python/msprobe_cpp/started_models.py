"""The models given to start(), held weakly: a notebook that builds a new model in each run of a
cell must not keep every earlier one alive. Each keeps its prefix's number (`model1.`) and the ids
of its hooked modules, dropped when it goes (ids are reused). What the engine knows of them (their
tensors, by name) is the engine's (_C.Session.add_model_tensor, parameter_names)."""
import gc
import weakref
from typing import Any, List, Set

import torch


def models_of(model: Any) -> List[torch.nn.Module]:
    if model is None:
        return []
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    for m in models:
        if not isinstance(m, torch.nn.Module):
            raise TypeError(f"PrecisionDebugger: model: expected a torch.nn.Module or a list of them, "
                            f"got {type(m).__name__}")
    return models


class _StartedModel:
    def __init__(self, ref: "weakref.ref[torch.nn.Module]", number: int) -> None:
        self.ref = ref
        self.number = number
        self.module_ids: Set[int] = set()


class StartedModels:
    def __init__(self, default: Any) -> None:
        self._default = models_of(default)  # the constructor's model=, for a start() without one
        self._started: List[_StartedModel] = []
        self._hooked_modules: Set[int] = set()

    def given(self, model: Any) -> List[torch.nn.Module]:
        """start()'s models: those given, else the constructor's."""
        return models_of(model) or self._default

    def live(self) -> List[torch.nn.Module]:
        """The started models still alive; those gone are forgotten, with their modules' ids."""
        live = []
        for started in list(self._started):
            model = started.ref()
            if model is None:
                self._started.remove(started)
                self._hooked_modules -= started.module_ids
            else:
                live.append(model)
        return live

    def new(self, models: List[torch.nn.Module]) -> List[torch.nn.Module]:
        live = self.live()
        return [m for m in models if all(m is not h for h in live)]

    def add(self, model: torch.nn.Module) -> str:
        """Starts `model`; returns its names' prefix: "" for the first, "model1." for a second, so
        that its names can't be taken for the first one's."""
        if self.live():
            # A model the program let go of but that a reference cycle keeps (a module holding
            # itself, an optimizer's closure) is gone only at the next collection: without one,
            # the new model would be named model1.* after a model that no longer exists. Once
            # per new model, not per step.
            gc.collect()
            self.live()
        taken = {started.number for started in self._started}
        number = next(n for n in range(len(taken) + 1) if n not in taken)
        self._started.append(_StartedModel(weakref.ref(model), number))
        return f"model{number}." if number else ""

    def hook_once(self, module: torch.nn.Module) -> bool:
        """Whether `module` (of the model started last) is to be hooked: not yet by any model."""
        if id(module) in self._hooked_modules:
            return False
        self._hooked_modules.add(id(module))
        self._started[-1].module_ids.add(id(module))
        return True

    @property
    def hooked_modules(self) -> int:
        return len(self._hooked_modules)

    def let_go_of_modules(self) -> None:
        """The hooks are out: a later debugger hooks every module again."""
        self._hooked_modules = set()
        for started in self._started:
            started.module_ids = set()

    def let_go(self) -> None:
        """At exit, or once the hooks are out: the program's models go when its own names go."""
        self._started = []
        self._default = []
        self._hooked_modules = set()
