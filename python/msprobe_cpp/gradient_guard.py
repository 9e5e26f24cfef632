"""The gradients are looked at once more right before an optimizer writes them into the
parameters: the last point where NaN/inf in them has done no damage. What the hooks judge covers
the gradients hooked calls made; this covers the rest: DDP's reducer averaging another rank's
NaN into this rank's gradients, FSDP's reduce-scatter, a compiled backward, any C++ path.

torch 2.x calls a global optimizer step pre-hook (register_optimizer_step_pre_hook) for every
optimizer. torch 1.13 has none: there each torch.optim.Optimizer subclass's own step is wrapped
while a debugger is live (found again at each start(), for classes defined since), and put back
when it is released. Either way the hook costs one look at each gradient per optimizer step
(_C.OptimizerTensors: read in place on the CPU, one multi-tensor pass and one sync per device
elsewhere), and none where the step's GradScaler has just made the same look (scaler_checked).
That class also gathers what is looked at (the parameters, their gradients, the optimizer's
state); here are the hooks, the settings and the GradScaler's flags."""
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.optim.optimizer as optimizer_module  # torch 1.13's torch.optim deletes the name

from .patches import Patches


def optimizer_settings(optimizer: Any) -> List[Tuple[str, float]]:
    """("<key> of param_groups[<g>]", value) of each number in the optimizer's groups (lr, eps,
    weight_decay, each of betas; a one-element CPU tensor lr too): the engine stops before a
    step whose setting is not finite. A few dozen floats: no tensor is read on a device."""
    out = []
    for g, group in enumerate(getattr(optimizer, "param_groups", ())):
        for key, value in group.items():
            values = value if isinstance(value, (tuple, list)) and key != "params" else (value,)
            for i, v in enumerate(values):
                if isinstance(v, torch.Tensor) and v.numel() == 1 and v.device.type == "cpu":
                    v = v.item()
                if isinstance(v, float):  # bool and int are always finite
                    out.append((f"{key}{f'[{i}]' if len(values) > 1 else ''} of param_groups[{g}]", v))
    return out


def scaler_skips(optimizer: Any, kwargs: Dict[str, Any]) -> bool:
    """Whether a GradScaler is calling the step of an optimizer that unscales and skips on its own
    (`_step_supports_amp_scaling`: a fused Adam, Hugging Face's default on torch 2.8 and later)
    for gradients it found non-finite. Such a step is called even when the gradients overflowed;
    the optimizer leaves the parameters alone. One read of the scaler's flag: call it only for
    gradients already found bad."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return False
    found_inf = getattr(optimizer, "found_inf", None)  # set by GradScaler.step for the call
    if found_inf is None and kwargs.get("grad_scaler") is not None:
        # The older contract (torch 1.13): the scaler passed as a keyword.
        found = kwargs["grad_scaler"]._found_inf_per_device(optimizer)
        return any(bool(v.item()) for v in found.values())
    return found_inf is not None and bool(found_inf.item())


def scaler_checked(scaler: Any, optimizer: Any) -> bool:
    """Whether `scaler` (a torch GradScaler) has just found this optimizer's gradients finite:
    its unscale_ checks every gradient of the optimizer in one multi-tensor pass, and scaler.step
    calls the optimizer only where it found none bad. The same look again would be the clean
    step's cost twice. A direct optimizer.step() after an unscale_ that found NaN/inf, or one
    without unscale_ (the gradients still scaled), is checked as any other."""
    states = getattr(scaler, "_per_optimizer_states", None)
    state = states.get(id(optimizer)) if isinstance(states, dict) else None
    found = state.get("found_inf_per_device") if isinstance(state, dict) else None
    if not found:
        return False
    return not any(bool(v.item()) for v in found.values())


def _optimizer_classes() -> List[type]:
    found, todo = [], [torch.optim.Optimizer]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def install_gradient_guard(patches: Patches, judge: Callable[[], Optional[Callable[[Any, Any, Dict[str, Any]], None]]],
                           after: Optional[Callable[[], Optional[Callable[[Any], None]]]] = None) -> None:
    """Calls `judge()(optimizer, args, kwargs)` (a weak method: the debugger may go) before each
    optimizer step, with the step's arguments (kind "optimizer"), and `after()(optimizer)`, when
    given, once the step is over (on torch 1.13 also when it raised; torch 2.x calls its post
    hooks only after a step that returned). Again at each start(): on torch 1.13, optimizer
    classes defined since are wrapped then."""
    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        seen = judge()
        if seen is not None:
            # torch 2.x's hooks get step()'s whole argument tuple, the optimizer first.
            seen(optimizer, args[1:] if args and args[0] is optimizer else args, kwargs)

    def after_step(optimizer: Any, *_: Any) -> None:
        done = after() if after is not None else None
        if done is not None:
            done(optimizer)

    register = getattr(optimizer_module, "register_optimizer_step_pre_hook", None)
    if register is not None:
        if not patches.installed("optimizer"):
            handles = [register(before_step)]
            if after is not None:
                handles.append(optimizer_module.register_optimizer_step_post_hook(after_step))
            patches.hook("optimizer", handles)
        return
    inside = threading.local()  # a subclass's step calling super().step(): judged once
    for cls in _optimizer_classes():
        own = cls.__dict__.get("step")
        if own is not None and not getattr(own, "_msprobe_cpp_guard", False):
            patches.replace("optimizer", cls, "step", _guarded_step(own, before_step, after_step, inside))


def _guarded_step(step: Any, before_step: Callable[[Any, Any, Any], None], after_step: Callable[[Any], None],
                  inside: threading.local) -> Any:
    def guarded_step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        outermost = getattr(inside, "depth", 0) == 0
        if outermost:
            before_step(optimizer, args, kwargs)
        inside.depth = getattr(inside, "depth", 0) + 1
        try:
            return step(optimizer, *args, **kwargs)
        finally:
            inside.depth -= 1
            if outermost:
                after_step(optimizer)
    guarded_step._msprobe_cpp_guard = True  # type: ignore[attr-defined]
    # torch 1.13 wraps a class's step for its profiler unless it says it is wrapped already.
    guarded_step.hooked = getattr(step, "hooked", False)  # type: ignore[attr-defined]
    guarded_step.__wrapped__ = step  # type: ignore[attr-defined]
    guarded_step.__name__ = getattr(step, "__name__", "step")
    guarded_step.__qualname__ = getattr(step, "__qualname__", "step")
    guarded_step.__doc__ = getattr(step, "__doc__", None)
    return guarded_step
