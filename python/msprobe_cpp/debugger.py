"""PrecisionDebugger: msprobe's entry point, backed by the C++ session."""
import atexit
import json
import logging
import operator
import reprlib
import os
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch

from . import _C
from . import api_hooks
from . import log
from .errors import Overflow, OverflowError
from .grad_probe import GradProbe
from .gradient_guard import install_gradient_guard, optimizer_settings, scaler_checked, scaler_skips
from . import deepspeed_engine
from .loss_scalers import LossScaleSource, watch_grad_scalers
from .patches import Patches
from .plain_copies import keep_copies_plain
from . import peer_stop
from .peer_stop import PeerStop
from .replay import live_replay
from .started_models import StartedModels
from .ranks import current_rank

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames under here are torch's, not the user's line an overflow stop names.
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _register_pre_hook(module: torch.nn.Module, hook: Any) -> Any:
    """With keyword arguments where PyTorch can pass them (2.0 and later)."""
    try:
        return module.register_forward_pre_hook(hook, with_kwargs=True)
    except TypeError:
        return module.register_forward_pre_hook(hook)


def _json_like(value: Any) -> Any:
    """A keyword's value as JSON holds it: a path as a string, an integer-like (numpy's) as an int,
    a range, tuple, set or other iterable (not a string or a dict) as a list of such values. Which
    key takes which is the engine's to check (config.cpp), not this function's."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if value is None or isinstance(value, (str, bytes, bool, float, dict)):
        return value
    if hasattr(value, "__index__"):
        try:
            return operator.index(value)
        except TypeError:  # an array of several, or of floats: a list below, or named by the check
            pass
    if hasattr(value, "__iter__"):
        try:
            return [_json_like(v) for v in value]
        except TypeError:  # a 0-d array: iterable in name only
            pass
    return value


def _keyword_value(name: str, value: Any) -> Any:
    """A keyword argument as the JSON the engine validates. What cannot be JSON at all is a
    ConfigError here."""
    try:
        value = _json_like(value)
        # No NaN or infinity, no lone surrogate, nothing nested past what a config can mean.
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeError):
        shown = reprlib.repr(value)  # bounded in depth and length
        raise _C.ConfigError(f"PrecisionDebugger({name}=...): expected a JSON-like value (numbers, strings, "
                             f"lists; no NaN or infinity), got {shown}") from None
    return value


def _python_side(me: Any) -> Dict[str, Any]:
    """What the overflow guard hands its findings to (python_objects.h), by name. The callbacks
    reach the debugger through the weak reference `me`: the session must not keep it alive."""
    def peer() -> Optional[PeerStop]:
        debugger = me()
        return (debugger._peer or None) if debugger is not None else None

    def on_flagged(overflow: Overflow) -> None:
        debugger = me()
        if debugger is not None:
            debugger._flagged(overflow)

    def on_stop(overflow: Overflow, notify: bool) -> None:
        # The stop's one Overflow: on_overflow's (where the stop is the step's first notice), then
        # the other ranks' under torch.distributed, whatever on_overflow raised.
        try:
            if notify:
                on_flagged(overflow)
        finally:
            coordinator = peer()
            if coordinator is not None:
                coordinator.publish(overflow)

    def raise_peer_stop() -> None:
        coordinator = peer()
        if coordinator is not None:
            coordinator.check()

    def mark_collective_input(call: str) -> None:
        coordinator = peer()
        if coordinator is not None:
            coordinator.mark_collective_input(call)

    def collective_input_rank(call: str) -> Optional[int]:
        coordinator = peer()
        return coordinator.collective_input_rank(call) if coordinator is not None else None

    engine = torch.autograd.Variable._execution_engine  # type: ignore[attr-defined]
    return dict(overflow_type=Overflow, error_type=OverflowError, on_flagged=on_flagged,
                queue_callback=engine.queue_callback, on_stop=on_stop, raise_peer_stop=raise_peer_stop,
                mark_collective_input=mark_collective_input, collective_input_rank=collective_input_rank,
                replay=live_replay)


class _OnTheDebugger:
    """msprobe's start/stop/step/forward_backward_dump_end are classmethods acting on its one
    debugger: `PrecisionDebugger.start()` is the same call as `debugger.start()`, once a debugger
    exists (the live one: the last made)."""

    def __init__(self, method: Callable[..., Any]) -> None:
        self._method = method
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, debugger: Any, owner: type) -> Callable[..., Any]:
        if debugger is None:
            debugger = owner._instance  # type: ignore[attr-defined]
            if debugger is None:
                name = self._name

                def no_debugger(*args: Any, **kwargs: Any) -> None:
                    raise RuntimeError(f"PrecisionDebugger.{name}(): no PrecisionDebugger exists yet; "
                                       "make one first (PrecisionDebugger(config_path=...))")
                return no_debugger
        return self._method.__get__(debugger, owner)


class PrecisionDebugger:
    """Collects msprobe-format dumps of a training run, and guards it against overflows.

    PrecisionDebugger(config_path="config.json") reads msprobe's config.json; keyword arguments
    (task, dump_path, level, step, rank, and every overflow_check key: stop_on, action,
    stop_level, overflow_nums, ...) override it, or configure it alone without a file. `model`
    is the model start() uses when given none; `on_overflow(overflow)` is called at each step's
    first flagged call, whatever the action. A bad config raises ConfigError before any hook is
    installed.
    """

    _instance: Optional["PrecisionDebugger"] = None

    def __init__(self, config_path: Optional[Any] = None, task: Optional[str] = None,
                 dump_path: Optional[Any] = None, level: Optional[str] = None,
                 model: Optional[Any] = None, step: Optional[Iterable[Any]] = None,
                 rank: Optional[Iterable[Any]] = None,
                 on_overflow: Optional[Callable[[Overflow], None]] = None,
                 **overflow_options: Any) -> None:
        given: Dict[str, Any] = dict(task=task, dump_path=dump_path, level=level, step=step, rank=rank,
                                     **overflow_options)
        overrides = {k: _keyword_value(k, v) for k, v in given.items() if v is not None}
        path = os.fspath(config_path) if config_path is not None else ""
        self._session = _C.Session(path, json.dumps(overrides), PACKAGE_DIR, TORCH_DIR)
        self._extra_apis = api_hooks.check_extra_apis(
            self._session.extra_apis,
            (lambda i: f"PrecisionDebugger(extra_apis=...)[{i}]") if "extra_apis" in overrides
            else (lambda i: f"{path}: extra_apis[{i}]"))
        self._models = StartedModels(model)
        self._on_overflow = on_overflow
        self._overflow: Optional[Overflow] = None
        # Everything put into the program: API wrappers, module and optimizer hooks, GradScaler's
        # scale(), Module.__getstate__ (saved and copied models carry none of our hooks).
        self._patches = Patches()
        self._loss_scale = LossScaleSource()
        # Each started DeepSpeed engine's look at its optimizer's settings, run at every start().
        self._engine_looks: List[Callable[[], None]] = []
        # The stepping optimizer's tensors (_C.OptimizerTensors) while a step whose calls are left
        # runs (begin_optimizer_step).
        self._stepping: Any = None
        # torch.distributed with overflow_check: the coordinated stop; False where it cannot be had.
        self._peer: Any = None
        if self._session.watching:
            self._session.set_python_side(**_python_side(weakref.ref(self)))
        # Tasks grad_probe (monitor(model) is its whole API; start(), stop() and step() do nothing)
        # and free_benchmark (the API hooks run each selected call again).
        self._task: Any = None
        if self._session.task == "grad_probe":
            self._task = GradProbe(self._session, self._patches)
        elif self._session.task == "free_benchmark":
            self._task = self._session.task_processor

        for warning in self._session.config_warnings:
            log.warn(warning)
        previous = PrecisionDebugger._instance
        if previous is not None and not previous._patches.closed:
            log.warn("a new PrecisionDebugger replaces the live one: the earlier one's hooks are removed "
                     "and it collects nothing more")
            previous._release()
        PrecisionDebugger._instance = self
        _C.set_current_session(self._session)

    @property
    def dump_path(self) -> str:
        return self._session.dump_path

    @property
    def overflow(self) -> Optional[Overflow]:
        """The finding that flagged the current (or, until the next start(), the last) step; None
        while it is clean."""
        return self._overflow

    @property
    def headroom(self) -> List[Dict[str, Any]]:
        """Every float16/bfloat16 call site warned of (overflow_check.headroom), with its largest
        magnitude in each of its last steps: [{"site", "dtype", "history": [{"step", "max",
        "fraction"}]}]."""
        return self._session.headroom

    @_OnTheDebugger
    def start(self, model: Optional[Any] = None, loss_scaler: Any = None, token_range: Any = None,
              rank_id: Optional[int] = None, scheduled_tokens: Any = None) -> None:
        """Begins (or resumes) collection for the current step; installs hooks the first time.

        `model`: a module or a list of them; each new one is hooked in addition to those before
        it. `loss_scaler`: any object with get_scale(), and step_skipped() where a skipped step
        can keep its scale (a torch GradScaler and a DeepSpeed engine's are found by themselves).
        `rank_id` (msprobe 26.x): the rank folder's number, where torch.distributed gives none.
        `scheduled_tokens` (26.x): {request_id: tokens, ...} in batch order; with the config's
        request_id, this step describes that request's rows only. `token_range` (26.x, inference
        serving) is refused."""
        if token_range is not None:
            raise ValueError("PrecisionDebugger.start: token_range is msprobe 26.x's for inference serving, "
                             "which msprobe_cpp does not support; leave it out")
        if rank_id is not None and (isinstance(rank_id, bool) or not isinstance(rank_id, int) or rank_id < 0):
            raise ValueError(f"PrecisionDebugger.start: rank_id: expected an integer >= 0, got {rank_id!r}")
        if not self._session.dumps_calls:
            return
        if self._patches.closed or self._session.finished:
            self._release()
            return
        models = self._models.given(model)
        if self._session.modules_hooked and not models and not self._models.live():
            raise ValueError(f"PrecisionDebugger.start: level {self._session.level} records modules, "
                             "so start(model) needs the model")
        if loss_scaler is not None:
            if not callable(getattr(loss_scaler, "get_scale", None)):
                raise TypeError("PrecisionDebugger.start: loss_scaler needs a get_scale() method")
            self._loss_scale.given = loss_scaler
        new_models = self._models.new(models)
        for m in new_models:
            if self._loss_scale.given is None and deepspeed_engine.is_engine(m):
                self._loss_scale.given = deepspeed_engine.loss_scaler(m)  # None unless fp16
        if self._session.apis_hooked:
            api_hooks.install(self._patches, self._session.watching, self._extra_apis,
                              os.path.join(api_hooks.RULES_DIR, self._session.wrap_list),
                              self._session.api_call_name)
        if self._session.watching:
            watch_grad_scalers(self._patches, weakref.WeakMethod(self._saw_grad_scaler))
        if self._session.watching or self._session.names_optimizer:
            install_gradient_guard(self._patches, weakref.WeakMethod(self._before_optimizer_step),
                                   weakref.WeakMethod(self._after_optimizer_step))
        for m in new_models:
            if hasattr(m, "_orig_mod"):  # torch.compile's OptimizedModule
                self._warn_once("compiled", "a torch.compile'd model: the calls inside its compiled regions are "
                                "left alone (neither recorded nor judged); run the model uncompiled (its "
                                "_orig_mod) to watch them")
                api_hooks.mark_compiled_model_seen()
            self._add_model(m)
        if self._patches.installed("module"):
            keep_copies_plain(self._patches, ("module", "dump"))
        if self._peer is None and self._session.watching and current_rank() >= 0:
            self._peer = peer_stop.create(self._session, self._patches) or False
        if self._peer:
            self._peer.check()
        if current_rank() <= 0 and self._session.first_time("on line"):  # the same on every rank: rank 0 says it
            log.say(logging.INFO, self._session.on_line(self._patches.count("api"), self._models.hooked_modules))
        rank = current_rank() if rank_id is None or current_rank() >= 0 else rank_id
        if self._session.start(rank, bool(new_models), scheduled_tokens):  # the step's first start()
            self._overflow = None
            self._loss_scale.scaled_by = None
            for look in self._engine_looks:
                look()
        if self._loss_scale.given is not None and self._loss_scale.scaled_by is None:
            self._note_scale(self._loss_scale.given)

    @_OnTheDebugger
    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        """msprobe 26.x's level debug: records `variable` (a tensor, int, float or str, or lists,
        tuples and dicts of them) in the step's debug.json as "<name>.<n>.debug", and with
        `save_backward` its tensors' gradients, as they arrive, as "<name>_grad.<n>.debug". Does
        nothing at other levels."""
        if self._patches.closed:
            return
        self._session.save(variable, name, save_backward, current_rank())

    @_OnTheDebugger
    def stop(self) -> None:
        """Ends collection for now and writes the step's files."""
        if not self._session.dumps_calls:
            return
        if self._peer:
            self._peer.check()
        self._session.stop()

    @_OnTheDebugger
    def step(self) -> None:
        """Moves to the next step; after the last configured step every hook is removed.

        With a loss scaler, this is where a skipped step is told apart from a missed overflow:
        it raises OverflowError when the scale did not drop after non-finite gradients, or fell
        below min_loss_scale."""
        if not self._session.dumps_calls:
            return
        if self._peer:
            self._peer.check()
        scaler, self._loss_scale.scaled_by = self._loss_scale.scaled_by, None
        if scaler is not None:
            skipped = getattr(scaler, "step_skipped", None)  # a scaler that says so (DeepSpeed's)
            self._session.judge_loss_scale(_C.call_unhooked(lambda: float(scaler.get_scale())),
                                           bool(skipped()) if callable(skipped) else False)
        self._session.step()
        if self._session.finished:
            self._release()

    @_OnTheDebugger
    def drain(self) -> None:
        """Returns once every step handed to the writer thread (async_dump, on by default) is on
        disk: for a script that reads the dump while it trains. Our extension."""
        self._session.drain_writes()
        if isinstance(self._task, GradProbe):
            self._task.drain()

    @_OnTheDebugger
    def monitor(self, model: Any) -> None:
        """Task grad_probe: summarizes `model`'s gradients before each optimizer step (msprobe's
        monitor). Under any other task it does nothing, as msprobe's."""
        if not isinstance(self._task, GradProbe):
            self._warn_once("monitor", f"monitor() does nothing under task {self._session.task}: it is "
                            "grad_probe's")
            return
        self._task.monitor(model)

    @_OnTheDebugger
    def forward_backward_dump_end(self) -> None:
        """Ends the collected block, placed after the forward and before loss.backward(): the
        block's forward calls and, when loss.backward() runs, their backward are recorded; nothing
        else is until the next start() (the optimizer, say)."""
        self._session.pause()

    def _module_dump(self, module: torch.nn.Module, dump_name: str) -> None:
        self._module_dump_end()
        pre, post = _C.module_hooks(dump_name, type(module).__name__, True, True)
        self._patches.hook("dump", [_register_pre_hook(module, pre), module.register_forward_hook(post)])
        keep_copies_plain(self._patches, ("module", "dump"))
        self._session.set_module_dump(True)

    def _module_dump_end(self) -> None:
        self._patches.remove(["dump"])
        self._session.set_module_dump(False)

    def _write_at_exit(self) -> None:
        """A script that ends after start() without stop() gets its step written, as msprobe's."""
        if self._patches.closed:
            return
        try:
            self._session.stop_at_exit()
        except Exception as e:  # noqa: BLE001 - the interpreter is ending: say it, raise nothing
            log.warn(f"the step started last could not be written at exit: {e}")

    def _let_go_of_models(self) -> None:
        """At exit: the program's models are no longer kept alive by the class's debugger, so
        they go when the program's own names go. A DDP model holds its process group: kept to
        the interpreter's last collection, its connections stayed open, and the ranks still
        waiting on this one in a collective waited that long (issue 42)."""
        self._models.let_go()

    def _warn_once(self, cause: str, text: str) -> None:
        if self._session.first_time(cause):
            log.warn(text)

    def _flagged(self, overflow: Overflow) -> None:
        self._overflow = overflow
        if self._on_overflow is not None:
            self._on_overflow(overflow)

    def _note_scale(self, scaler: Any) -> None:
        self._loss_scale.scaled_by = scaler
        self._session.set_loss_scaled(_C.call_unhooked(lambda: float(scaler.get_scale())))

    def _saw_grad_scaler(self, scaler: Any) -> None:
        """A torch GradScaler's scale() is called: this step's loss is scaled."""
        if self._loss_scale.given is None and self._loss_scale.scaled_by is None and scaler.is_enabled():
            self._note_scale(scaler)

    def _add_model(self, model: torch.nn.Module) -> None:
        """Hooks the model's modules: records at L0 and mix; at L1 with overflow_check only the
        enclosing module is tracked (no module records and no backward hooks, so nothing about
        the model's autograd graph changes). A second model's names carry a prefix (`model1.`),
        so they can't be taken for the first one's."""
        prefix = self._models.add(model)
        record = self._session.modules_hooked
        if not (record or self._session.watching):
            return
        compiled = getattr(model, "_orig_mod", None)
        if isinstance(compiled, torch.nn.Module):
            # A compiled region is left alone: no module hook inside it (the tracer would have to
            # break its graph at each). What comes out of it is marked, so that NaN/inf it made is
            # named as made there, at the first recorded call that meets it.
            if self._session.watching:
                self._patches.hook("module", [model.register_forward_hook(
                    lambda module, inputs, output: self._session.mark_compiled_outputs(output))])
                self._hook_started_model(model, type(compiled).__name__)
                for name, p in compiled.named_parameters():
                    self._session.add_model_tensor(prefix + name, p, False)
                for name, b in compiled.named_buffers():
                    self._session.add_model_tensor(prefix + name, b, True)
            return
        for name, module in model.named_modules():
            if module is model or not self._models.hook_once(module):
                continue  # the root passed to start() is not itself recorded
            pre, post = _C.module_hooks(prefix + name, type(module).__name__, record)
            self._patches.hook("module", [_register_pre_hook(module, pre), module.register_forward_hook(post)])
        if self._session.watching:
            self._hook_started_model(model, type(model).__name__)
            for name, p in model.named_parameters():
                self._session.add_model_tensor(prefix + name, p, False)
            for name, b in model.named_buffers():
                self._session.add_model_tensor(prefix + name, b, True)
            if deepspeed_engine.is_engine(model):
                look = deepspeed_engine.attach(model, prefix, self._session, self._patches,
                                               weakref.WeakMethod(self._before_wrapped_step))
                if look is not None:
                    self._engine_looks.append(look)

    def _before_wrapped_step(self, optimizer: Any) -> None:
        """A DeepSpeed engine's optimizer step is about to step `optimizer`: its numeric settings
        (an lr of inf) are looked at before the step's first collective and before ZeRO's fp32
        partitions are written, so that a stop leaves every weight as it was and reaches the other
        ranks in this step. (A plain torch optimizer's lr of inf is seen after its step.)"""
        if self._patches.closed:
            return
        if self._peer:
            self._peer.check()
        if self._session.judges_optimizer:
            self._session.judge_optimizer_settings(type(optimizer).__name__, optimizer_settings(optimizer))

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Dict[str, Any]) -> None:
        """An optimizer is about to write the gradients into the parameters: the last point where
        NaN/inf in them does no damage. Gradients that no hooked call made (DDP's all-reduce,
        FSDP's reduce-scatter, a compiled backward) are seen here. One look at each gradient, in
        place on the CPU (_C.OptimizerTensors), or none where the step's GradScaler just looked
        (gradient_guard.scaler_checked). The optimizer's state (exp_avg_sq, momentum) is looked
        at the same way: NaN/inf written there before the step (a checkpoint's, an update L0 does
        not see) stops here, before the parameters take it."""
        if self._patches.closed:
            return
        self._session.optimizer_step_begins()
        if self._peer:
            self._peer.check()
        if not (self._session.watching and self._session.judges_optimizer):
            return  # not a started step of this debugger, or one its step or rank list leaves out
        tensors = self._session.optimizer_tensors(optimizer, bool(self._models.live()))
        # Its GradScaler found these gradients finite a moment ago: no second look.
        scaled_by = self._loss_scale.scaled_by
        if scaled_by is None or not scaler_checked(scaled_by, optimizer):
            bad = tensors.nonfinite_gradients()
            if bad and scaler_skips(optimizer, kwargs):
                return  # a step the loss scaler skips inside the optimizer (step() judges the scale)
            if bad:
                if self._peer and self._peer.wait_for_peer():
                    # The rank whose backward made them stopped: origin peer.
                    self._peer.check(gradients=[name for name, _ in bad])
                self._session.judge_optimizer_gradients(type(optimizer).__name__, bad, bool(self._peer))
        # The state the step writes along with the gradients (L0 records none of its calls).
        bad_state = tensors.nonfinite_state()  # none for plain SGD, or before the first step
        if bad_state:
            key, name = bad_state[0]
            self._session.judge_optimizer_state(type(optimizer).__name__, key, name, len(bad_state) - 1)
        if self._session.begin_optimizer_step(bool(args) or kwargs.get("closure") is not None):
            self._stepping = tensors

    def _after_optimizer_step(self, optimizer: Any) -> None:
        """The step's calls were not judged one by one (overflow_check; begin_optimizer_step): one
        look at what it wrote, the parameters it updated and its state, all finite before it."""
        tensors, self._stepping = self._stepping, None
        if self._patches.closed:
            return
        self._session.optimizer_step_ends()
        if not self._session.end_optimizer_step():
            return
        if tensors is None or not tensors.of(optimizer):
            tensors = self._session.optimizer_tensors(optimizer, bool(self._models.live()))
        bad = tensors.nonfinite_written()
        if bad:
            self._session.judge_optimizer_update(type(optimizer).__name__, bad)

    def _hook_started_model(self, model: torch.nn.Module, class_name: str) -> None:
        """The started model itself is not recorded (msprobe records none), but the guard judges
        what it returns: held NaN/inf is caught there, and at L0 a loss made in its own forward
        is seen there. Registered after every other hook of the model, so that it runs last."""
        pre, post = _C.model_hooks(class_name)
        self._patches.hook("module", [_register_pre_hook(model, pre), model.register_forward_hook(post)])

    def _release(self) -> None:
        """Removes every hook; the debugger collects nothing more, and (async_dump) every step it
        handed over is on disk when this returns."""
        self.drain()
        self._patches.remove()
        self._models.let_go_of_modules()
        if self._peer:
            self._peer.close()
        if PrecisionDebugger._instance is self:
            _C.set_current_session(None)


@atexit.register
def _drain_writes_at_exit() -> None:
    """async_dump: the steps handed over to the write thread are on disk before the process ends."""
    debugger = PrecisionDebugger._instance
    if debugger is not None:
        debugger.drain()


def module_dump(module: torch.nn.Module, dump_name: str) -> None:
    """From here until module_dump_end(), only `module`'s own forward and backward are recorded,
    as Module.<dump_name>.<ClassName>.forward.<n> / .backward.<n>: the API calls and the child
    modules inside it, and every other call, are not (msprobe's module_dump)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module_dump: module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(dump_name, str):
        raise TypeError(f"module_dump: dump_name must be a str, got {type(dump_name).__name__}")
    debugger = PrecisionDebugger._instance
    if debugger is None or debugger._patches.closed:
        raise RuntimeError("module_dump: no live PrecisionDebugger; make one and start() it first")
    debugger._module_dump(module, dump_name)


def module_dump_end() -> None:
    """Recording goes back to normal, and module_dump()'s hooks are removed."""
    debugger = PrecisionDebugger._instance
    if debugger is not None:
        debugger._module_dump_end()


def write_at_exit() -> None:
    """At interpreter exit: the live debugger's started step is written, then the session is let
    go while the interpreter can still take its Python objects."""
    debugger = PrecisionDebugger._instance
    if debugger is not None:
        debugger._write_at_exit()
        debugger._let_go_of_models()
    _C.set_current_session(None)
