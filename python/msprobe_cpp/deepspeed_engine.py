"""A DeepSpeed engine given to start(): what it keeps outside the module that the guard must see.

- Its optimizer is a ZeRO (or fp16/bf16) wrapper around the program's optimizer, which steps the
  wrapper's fp32 partitions, not the module's parameters; under ZeRO-3 each parameter is an
  empty placeholder and this rank's shard of it is `p.ds_tensor`. They are given to the guard as
  the model's tensors, so that the looks before and after the optimizer's step cover the
  partitions (NaN/inf there stops before DeepSpeed copies it into the weights), and NaN in a
  shard is named as the parameter's.
- Its fp16 loss scaler (DeepSpeed's DynamicLossScaler) has no get_scale(), and with hysteresis
  it skips a first overflow without lowering the scale. DeepSpeedLossScaler reads the scale and
  the wrapper's own `overflow` flag, which says that the step was skipped.

Nothing here imports deepspeed: an engine is told by its class's module."""
from typing import Any, Callable, Iterable, List, Optional, Tuple


def is_engine(model: Any) -> bool:
    return type(model).__module__.startswith("deepspeed.") and hasattr(model, "optimizer") and \
        hasattr(model, "module")


def _base_optimizer(engine: Any) -> Any:
    wrapper = getattr(engine, "optimizer", None)
    return getattr(wrapper, "optimizer", wrapper)


# The wrappers' fp32 master copies: ZeRO-1/2's partitions, ZeRO-3's (its optimizer is handed
# each one only for the length of its step), the bf16 and fp16 ZeRO-0 optimizers' flat groups.
_FP32_COPIES = ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat",
                "fp32_groups_flat_partition", "fp32_groups_flat")


def _tensors(value: Any) -> List[Any]:
    import torch
    items = value if isinstance(value, (list, tuple)) else [value]
    return [t for t in items if isinstance(t, torch.Tensor)]


def zero_partitions(engine: Any, prefix: str, named_parameters: Iterable[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """(name, tensor) of what the engine keeps of its module's parameters outside them: each
    ZeRO-3 parameter's shard (`<name>.ds_tensor`: NaN written there is the parameter's), the
    wrapper's fp32 master copies (`zero.<attribute>[<i>]`), and any other tensor the program's
    optimizer steps (`zero.param_groups[<g>][<i>]`)."""
    out, seen = [], set()
    for name, p in named_parameters:
        seen.add(id(p))
        shard = getattr(p, "ds_tensor", None)
        if shard is not None:
            out.append((f"{prefix}{name}.ds_tensor", shard))
            seen.add(id(shard))
    wrapper = getattr(engine, "optimizer", None)
    for attr in _FP32_COPIES:
        for i, t in enumerate(_tensors(getattr(wrapper, attr, None))):
            if id(t) not in seen:
                out.append((f"{prefix}zero.{attr}[{i}]", t))
                seen.add(id(t))
    base = _base_optimizer(engine)
    for g, group in enumerate(getattr(base, "param_groups", ())):
        for i, p in enumerate(group.get("params", ())):
            if id(p) not in seen:
                out.append((f"{prefix}zero.param_groups[{g}][{i}]", p))
                seen.add(id(p))
    return out


def gate_optimizer_step(engine: Any, patches: Any, before: Callable[[Any], None]) -> Optional[Callable[[], None]]:
    """The engine's optimizer's step (ZeRO's wrapper, the bf16 and fp16 optimizers', or the plain
    torch optimizer of an fp32 ZeRO-0 engine): `before(base optimizer)` runs first, while every
    rank is still before the step's first collective (the gradient norm's all-reduce), so that a
    stop there reaches the others in the same step, and before ZeRO's fp32 partitions are
    written. Returns the same look, to run at each step's start() too: ZeRO-0 makes no collective
    between its optimizer's step and the next backward, so a rank could be a step ahead when
    another stops there; settings changed by then (a scheduler's lr) are seen before any
    collective of the step."""
    wrapper = getattr(engine, "optimizer", None)
    if wrapper is None or not callable(getattr(wrapper, "step", None)):
        return None
    original, base = wrapper.step, _base_optimizer(engine)

    def step(*args: Any, **kwargs: Any) -> Any:
        before(base)
        return original(*args, **kwargs)
    patches.replace("module", wrapper, "step", step)
    return lambda: before(base)


def attach(engine: Any, prefix: str, session: Any, patches: Any,
           before: Callable[[], Optional[Callable[[Any], None]]]) -> Optional[Callable[[], None]]:
    """A started engine given to the guard: its shards and fp32 copies as the model's tensors
    (session.add_model_tensor) and its optimizer's step gated; `before()` returns the debugger's
    look at a base optimizer, or None once the debugger is gone (a weakref.WeakMethod: the patch
    keeps no debugger alive). Returns gate_optimizer_step's look."""
    for name, t in zero_partitions(engine, prefix, engine.named_parameters()):
        session.add_model_tensor(name, t, False)

    def look(base: Any) -> None:
        method = before()
        if method is not None:
            method(base)
    return gate_optimizer_step(engine, patches, look)


class DeepSpeedLossScaler:
    """get_scale() and step_skipped() of a DeepSpeed engine's fp16 loss scaler."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def get_scale(self) -> float:
        wrapper = self._engine.optimizer
        # ZeRO's and the fused fp16 optimizer's DynamicLossScaler; the unfused one's config.
        for holder in (getattr(wrapper, "loss_scaler", None), getattr(wrapper, "loss_scale_config", None)):
            scale = getattr(holder, "cur_scale", None)
            if scale is not None:
                return float(scale)
        return float(getattr(wrapper, "cur_scale", getattr(wrapper, "loss_scale", 1.0)))

    def step_skipped(self) -> bool:
        """DeepSpeed's optimizer found the gradients non-finite in its last step and skipped it."""
        return bool(getattr(self._engine.optimizer, "overflow", False))


def loss_scaler(engine: Any) -> Optional[DeepSpeedLossScaler]:
    """The engine's scaler when it trains in fp16 (DeepSpeed scales no bf16 or fp32 loss)."""
    fp16 = getattr(engine, "fp16_enabled", None)
    if callable(fp16) and fp16() and hasattr(engine.optimizer, "overflow"):
        return DeepSpeedLossScaler(engine)
    return None
