"""Task grad_probe (msprobe 1.1.1's GradientMonitor): before each optimizer step, a summary of
every watched parameter's gradient, written by the engine (the session's task processor, a
_C.GradMonitor). Here: which parameters (debugger.monitor(model)), the optimizer hook, and each
gradient as it can be read."""
import logging
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from . import deepspeed_engine
from . import log
from .gradient_guard import install_gradient_guard
from .patches import Patches
from .ranks import current_rank


def _writes_gradients(optimizer: Any) -> bool:
    """Whether the optimizer writes into the gradients during its step (a fused one unscales them
    in place; maximize negates them in place in some implementations): they are copied first."""
    defaults = getattr(optimizer, "defaults", None) or {}
    return bool(defaults.get("fused") or defaults.get("maximize") or defaults.get("differentiable"))


class GradProbe:
    def __init__(self, session: Any, patches: Patches) -> None:
        self._monitor = session.task_processor
        self._patches = patches
        self._params: List[Tuple[str, torch.nn.Parameter]] = []
        self._seen: Set[int] = set()
        self._shards_said = False

    def monitor(self, model: torch.nn.Module) -> None:
        """Watches `model`'s parameters (those grad_probe.param_list names; all when it is empty)
        from its next optimizer step on. A rank the config's rank list leaves out watches none."""
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"PrecisionDebugger.monitor: model must be a torch.nn.Module, got {type(model).__name__}")
        if not self._monitor.writes_rank(current_rank()):
            return
        named = list(model.named_parameters())
        if deepspeed_engine.is_engine(model):
            # ZeRO leaves no .grad on the module's parameters at the optimizer's step: the
            # gradients DeepSpeed holds are its fp32 partitions' (flat, this rank's part).
            named += [(n, t) for n, t in deepspeed_engine.zero_partitions(model, "", model.named_parameters())
                      if not n.endswith(".ds_tensor")]
            log.say(logging.INFO, "msprobe_cpp: grad_probe: a DeepSpeed engine: the gradients summarized are "
                    "ZeRO's fp32 partitions' (zero.<attribute>[<i>]: this rank's partition, flattened), "
                    "where its module's parameters have none")
        for name, p in named:
            if id(p) not in self._seen and self._monitor.watches(name):
                self._seen.add(id(p))
                self._params.append((name, p))
        log.say(logging.DEBUG, f"msprobe_cpp: grad_probe: {len(self._params)} parameters watched")
        install_gradient_guard(self._patches, weakref.WeakMethod(self._before_step),
                               weakref.WeakMethod(self._monitor_step_done))

    def _before_step(self, optimizer: Any, args: Any, kwargs: Dict[str, Any]) -> None:
        if self._patches.closed or not self._monitor.next_step():
            return
        self._monitor.summarize(current_rank(), [self._readable(name, p) for name, p in self._params],
                                _writes_gradients(optimizer))

    def _monitor_step_done(self, optimizer: Any) -> None:
        """The optimizer step is over: the gradients are read before the program writes into them."""
        self._monitor.step_done()

    def _readable(self, name: str, p: torch.nn.Parameter) -> Tuple[Any, ...]:
        """(name, the gradient msprobe reads: main_grad where the parameter has one, Megatron's
        fp32 copy). A DTensor's (FSDP2) is this rank's local shard, with the whole's shape and
        its placements: reading the whole would be a collective in the middle of the optimizer
        step."""
        grad = p.main_grad if hasattr(p, "main_grad") else p.grad
        local = getattr(grad, "_local_tensor", None) if grad is not None else None
        if local is None:
            return (name, grad)
        self._say_shards()
        return (name, local, list(grad.shape), ", ".join(repr(pl) for pl in grad.placements))

    def _say_shards(self) -> None:
        if not self._shards_said:
            self._shards_said = True
            log.say(logging.INFO, "msprobe_cpp: grad_probe: sharded (DTensor) gradients: each rank summarizes its own "
                    "shard; the shape column is the shard's, and rank<R>/shards.json gives each one's whole shape")

    def drain(self) -> None:
        self._monitor.drain()
