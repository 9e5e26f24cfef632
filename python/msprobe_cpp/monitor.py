"""msprobe's training monitor, TrainerMon (mindstudio-probe 26.2.0's API and config), run by the
C++ engine's task monitor (csrc/live/monitor/trainer_monitor.h), which decides which steps are
written and what they hold. This module installs and forwards: it wraps the optimizer's step,
as msprobe does, and hands each step's parameters, gradients and Adam moments over.

    from msprobe_cpp import TrainerMon          # or: from msprobe_cpp.monitor import TrainerMon
    monitor = TrainerMon("monitor_config.json", params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)

What is built and what is refused: docs/monitor.md.
"""
import atexit
import importlib
import inspect
import os
import weakref
from typing import Any, List, Optional, Tuple

import torch

from . import _C
from .monitor_optimizers import OptimizerView, optimizer_view
from .ranks import current_rank

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_HOOKS_TAKE_KWARGS = "with_kwargs" in inspect.signature(torch.nn.Module.register_forward_hook).parameters
_LIVE: "weakref.WeakSet[TrainerMon]" = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    """The steps written last are on disk when Python ends, whoever still holds a monitor."""
    for monitor in list(_LIVE):
        monitor.drain()


def _int_argument(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"TrainerMon.set_monitor({name}={value!r}): expected an integer >= {least}")
    return value


def _has_peers() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _fsdp2_param_group_module() -> Any:
    """The module whose FSDPParamGroup calls foreach_reduce (torch 2.6 on, then the 2.4-2.5 path)."""
    for name in ("torch.distributed.fsdp._fully_shard._fsdp_param_group",
                 "torch.distributed._composable.fsdp._fsdp_param_group"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "foreach_reduce"):
            return module
    return None


class TrainerMon:
    """TrainerMon(config_file_path, process_group=None, params_have_main_grad=True, opt_ty=None):
    msprobe 26.2.0's signature. Its files go under $MONITOR_OUTPUT_DIR (./monitor_output), read
    when it is made, as msprobe reads it. `opt_ty` is ignored, as there."""

    def __init__(self, config_file_path: str, process_group: Any = None, params_have_main_grad: bool = True,
                 opt_ty: Optional[str] = None) -> None:
        self._config_path = os.fspath(config_file_path)
        self._output_root = os.environ.get("MONITOR_OUTPUT_DIR", "./monitor_output")
        # DYNAMIC_MONITOR=true: nothing is watched until the config file says dynamic_on.
        self._switch = (_C.MonitorSwitch(self._config_path, self._output_root)
                        if os.environ.get("DYNAMIC_MONITOR", "False").lower() == "true" else None)
        self._session = None if self._switch else self._new_session()
        self._monitor = self._session.task_processor if self._session else None
        self._params_have_main_grad = bool(params_have_main_grad)
        self._process_group = process_group
        self._params: List[Tuple[str, torch.nn.Parameter]] = []
        self._optimizer: Optional[OptimizerView] = None
        self._chunks: List[torch.nn.Module] = []
        self._grad_acc_steps = 1
        self._next_step = 0
        self._has_peers = False
        self._run_folder = ""  # dynamic_on: every monitor it starts writes into the first's folder
        self._handles: List[Any] = []
        self._stack_handles: List[Any] = []  # stack_info's, removed once its file is written
        self._restore: List[Tuple[Any, str, Any]] = []  # cc_distribution's: what it replaced
        _LIVE.add(self)

    def _new_session(self) -> Any:
        return _C.monitor_session(self._config_path, self._output_root, PACKAGE_DIR)

    def set_monitor(self, model: Any, optimizer: torch.optim.Optimizer, grad_acc_steps: int = 1,
                    tp_group: Any = None, dp_group: Any = None, start_iteration: int = 0) -> None:
        """Watches `model` (a module, or a list of model chunks) and steps with `optimizer`."""
        self._grad_acc_steps = _int_argument("grad_acc_steps", grad_acc_steps, 1)
        self._next_step = _int_argument("start_iteration", start_iteration, 0)
        self._chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        self._wrap_step(optimizer)
        if self._monitor is not None:
            self._attach(starts_now=False)

    def _attach(self, starts_now: bool) -> None:
        # The monitor's hooks on the model, from step self._next_step on.
        chunks = self._chunks
        self._params = []
        for vpp, chunk in enumerate(chunks):
            for name, param in chunk.named_parameters():
                tag = self._monitor.parameter_tag(vpp, name) if param.requires_grad else None
                if tag is not None:
                    self._params.append((tag, param))
        self._monitor.begin(self._next_step, current_rank(), self._grad_acc_steps, starts_now, self._run_folder)
        self._has_peers = _has_peers()
        self._monitor.set_has_peers(self._has_peers)
        self._run_folder = self._run_folder or self._monitor.run_folder
        self._monitor.place(*self._group_place(), {f"{vpp}:{name}": type(module).__name__
                                                   for vpp, chunk in enumerate(chunks)
                                                   for name, module in chunk.named_modules()})
        self._monitor.watch([(name, param) for name, param in self._params])
        for vpp, chunk in enumerate(chunks):
            self._hook_modules(vpp, chunk)
        self._wrap_collectives()
        self._wrap_fsdp2_reduce()

    def _wrap_collectives(self) -> None:
        # cc_distribution: msprobe's collectives replaced, in torch.distributed and its c10d
        # module alike, and Work.wait, where an asynchronous call is looked at.
        collectives = self._monitor.collectives
        dist = torch.distributed
        if collectives is None or not dist.is_available():
            return
        for name in collectives.wrapped_names:
            original = getattr(dist, name, None)
            if original is None:
                continue
            wrapper = collectives.wrapper(name, original)
            for space in (dist, dist.distributed_c10d):
                self._restore.append((space, name, getattr(space, name, original)))
                setattr(space, name, wrapper)
        work = getattr(dist, "Work", None)
        if work is not None:
            self._restore.append((work, "wait", work.wait))
            work.wait = collectives.wait_wrapper(work.wait, work)

    def _wrap_fsdp2_reduce(self) -> None:
        # FSDP2 hands each rank's unsharded gradients to its reduce-scatter and sets the sharded
        # parameter's .grad from what comes back: no gradient accumulates on the parameters the
        # monitor watches. msprobe replaces foreach_reduce (and reloads the module that calls it);
        # here the name is replaced where it is looked up, and put back at the end.
        if not any(hasattr(m, "_get_fsdp_state") for c in self._chunks for m in c.modules()):
            return  # no FSDP2 module (nor its import, which fails on torch 1.13's Python 3.11)
        group_module = _fsdp2_param_group_module()
        if group_module is None:
            return
        tags = {id(param): tag for tag, param in self._params}
        original, unreduced = group_module.foreach_reduce, self._monitor.unreduced

        def foreach_reduce(fsdp_params: Any, unsharded_grads: Any, *args: Any, **kwargs: Any) -> Any:
            for fsdp_param, grad in zip(fsdp_params, unsharded_grads):
                tag = tags.get(id(getattr(fsdp_param, "sharded_param", None)))
                if tag is not None:
                    unreduced(tag, grad)
            return original(fsdp_params, unsharded_grads, *args, **kwargs)

        self._restore.append((group_module, "foreach_reduce", original))
        group_module.foreach_reduce = foreach_reduce

    def _detach(self) -> None:
        # The hooks off the model; what the monitor holds is written first.
        for handle in self._handles + self._stack_handles:
            handle.remove()
        self._handles.clear()
        self._stack_handles.clear()
        for space, name, original in reversed(self._restore):
            setattr(space, name, original)
        self._restore.clear()
        if self._monitor is not None:
            self._monitor.drain()
        self._session = self._monitor = None

    def _group_place(self) -> Tuple[int, List[int]]:
        # anomaly.json's pp_stage and group_mates: this rank in the monitor's group, and its ranks.
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return 0, [0]
        group = self._process_group if isinstance(self._process_group, dist.ProcessGroup) else dist.group.WORLD
        return dist.get_group_rank(group, dist.get_rank()), list(dist.get_process_group_ranks(group))

    def _hook_modules(self, vpp: int, chunk: torch.nn.Module) -> None:
        # xy_distribution: C++ hooks on the watched modules, as msprobe hooks them (the forward
        # with its keyword arguments); the backward is taken on the forward's own autograd nodes.
        for name, module in chunk.named_modules():
            stack_hook = self._monitor.stack_hook(vpp, name)
            if stack_hook is not None:  # first, as msprobe registers it
                self._stack_handles.append(module.register_forward_hook(stack_hook, with_kwargs=True)
                                           if _HOOKS_TAKE_KWARGS else module.register_forward_hook(stack_hook))
            tag = self._monitor.module_tag(vpp, name)
            if tag is None or module.__class__.__name__ == "FullyShardedDataParallel":
                continue  # msprobe skips FSDP1's wrapper: its inner module is the one watched
            pre, post = self._monitor.module_hooks(tag)
            if _HOOKS_TAKE_KWARGS:
                self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
                self._handles.append(module.register_forward_hook(post, with_kwargs=True))
            else:  # torch 1.x: no keyword arguments reach a hook
                self._handles.append(module.register_forward_pre_hook(pre))
                self._handles.append(module.register_forward_hook(
                    lambda m, args, output, post=post: post(m, args, None, output)))

    def _wrap_step(self, optimizer: torch.optim.Optimizer) -> None:
        # msprobe replaces the instance's step: the class's, and other optimizers, stay as they are.
        self._optimizer = optimizer_view(optimizer, self._params_have_main_grad)
        original = optimizer.step
        monitor = self

        def step(*args: Any, **kwargs: Any) -> Any:
            watching = monitor._monitor
            if watching is None:  # dynamic_on, off: the step goes on as it is
                out = original(*args, **kwargs)
            else:
                out = monitor._watched_step(watching, original, args, kwargs)
            monitor._next_step += 1
            if monitor._switch is not None and monitor._switch.poll():
                monitor._detach()  # a config changed while on replaces the monitor, as msprobe's
                monitor._session = monitor._new_session()
                monitor._monitor = monitor._session.task_processor
                monitor._attach(starts_now=True)
            elif watching is not None and watching.finished and monitor._switch is None:
                optimizer.step = original  # msprobe removes its hooks after collect_times steps
            return out

        step.__wrapped__ = original  # type: ignore[attr-defined]
        optimizer.step = step

    def _watched_step(self, watching: Any, original: Any, args: tuple, kwargs: dict) -> Any:
        if not self._has_peers and _has_peers():  # a process group made after set_monitor
            self._has_peers = True
            watching.set_has_peers(True)
        stop = watching.stops_run()
        if stop:  # print_struct and cc_log_only end the run, with msprobe's words
            raise Exception(stop)
        collects, grads, moments, after_step = watching.step_reads()
        if collects:
            watching.before_step(self._step_parameters(grads, moments), self._optimizer.has_state())
        out = original(*args, **kwargs)
        if collects and after_step:  # param_distribution; the next step's moments read ahead
            watching.after_step(self._step_parameters(False, moments))
        watching.end_step()
        if self._stack_handles and not watching.stacks_pending:
            for handle in self._stack_handles:
                handle.remove()
            self._stack_handles.clear()
        if watching.finished:
            self._detach()
            if self._switch is not None:
                self._switch.finish()  # dynamic_on back to false, in the file
        return out

    def _step_parameters(self, grads: bool, moments: bool) -> list:
        # Only what the monitor reads: its C++ side says which (step_reads()).
        return self._optimizer.parameters(self._params, grads, moments) if self._optimizer is not None else []

    def drain(self) -> None:
        """Returns once every written step is on disk."""
        if self._monitor is not None:
            self._monitor.drain()
