"""Why did the op overflow? Replays an API call that made NaN/inf from finite inputs, with the
original (unhooked) torch function and the same arguments:

- wider: 16-bit floating inputs as float32, float32 as float64. Finite there: a range problem.
  Not finite there either: the op is undefined for these inputs (log of 0, 0/0).
- on the CPU in the same dtype, when the call ran on an accelerator: msprobe's normal (the CPU
  overflows too) or abnormal (only the device's kernel does) overflow.

Used live, at an op-origin stop (the debugger gives the call's arguments), and offline by
`msprobe-cpp replay DUMP_DIR` (replay_dump.py rebuilds the arguments from dump_tensor_data/)."""
import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from . import _C

# What each dtype is replayed in, one step wider.
WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}

# Ops whose result depends on the random generator: a replay would draw other numbers (and move
# the generator the training uses).
RANDOM_APIS = frozenset({
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
    "fused_dropout", "native_dropout", "rrelu", "rrelu_", "gumbel_softmax", "bernoulli", "bernoulli_",
    "multinomial", "normal", "normal_", "uniform_", "exponential_", "geometric_", "cauchy_",
    "log_normal_", "random_", "poisson", "randperm",
})

# A hint for an op that is undefined at some inputs, by API name.
UNDEFINED_HINTS = {
    "log": "log of 0?", "log2": "log of 0?", "log10": "log of 0?", "log1p": "log of -1?",
    "log_softmax": "a row of -inf?", "div": "division by 0?", "__truediv__": "division by 0?",
    "__rtruediv__": "division by 0?", "__div__": "division by 0?", "true_divide": "division by 0?",
    "reciprocal": "1/0?", "rsqrt": "rsqrt of 0?", "sqrt": "sqrt of a negative?", "pow": "0 to a negative power?",
    "__pow__": "0 to a negative power?", "softmax": "a row of -inf?", "acos": "outside [-1, 1]?",
    "asin": "outside [-1, 1]?", "atanh": "outside (-1, 1)?",
}


def api_of(call: str) -> Tuple[str, str]:
    """("Tensor", "__mul__") of "Tensor.__mul__.0.forward"; ("Functional", "linear") ...; the
    core's parser (_C.parse_call_name), ("", "") for a name it does not parse."""
    parsed = _C.parse_call_name(call)
    return (parsed["section"], parsed["api"]) if parsed else ("", "")


def in_place(api: str, kwargs: Dict[str, Any]) -> bool:
    if api.startswith("__i") and api.endswith("__"):
        return True  # __iadd__, __imul__, ...
    if api.endswith("_") and not api.endswith("__"):
        return True
    return kwargs.get("inplace") is True or kwargs.get("out") is not None


def why_not(call: str, kwargs: Dict[str, Any]) -> Optional[str]:
    """Why the call cannot be replayed, or None when it can."""
    section, api = api_of(call)
    if section == "Module":
        return "a module call (its API calls are replayed, not the module)"
    parsed = _C.parse_call_name(call)
    if parsed is None:
        return "not a call name this tool writes"
    if parsed["backward"]:
        return "a backward call (the autograd engine's, not an API call)"
    if section == "Distributed":
        return "a collective (the other ranks would have to run it too)"
    if api in RANDOM_APIS or api.startswith("rand"):
        return "a random op (a replay would draw other numbers)"
    if in_place(api, kwargs):
        return "an in-place call (its inputs are overwritten)"
    return None


def _map(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


@contextlib.contextmanager
def _plain(devices: List[str]) -> Iterator[None]:
    """No autograd and no autocast: the op runs in the dtypes it is given."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        for device in sorted(set(devices) | {"cpu"}):
            try:
                stack.enter_context(torch.autocast(device_type=device, enabled=False))
            except (RuntimeError, ValueError, TypeError, AttributeError):
                pass  # a device type autocast does not know
        yield


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _outcome(result: Any) -> Tuple[bool, Optional[float], Optional[float], List[str]]:
    """Finite?, max, min over the floating outputs, and the non-finite kinds present."""
    finite, hi, lo, kinds = True, None, None, []
    for t in _tensors(result):
        if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
            continue
        t = t.detach()
        if t.is_complex():
            t = t.abs()
        t64 = t.to(torch.float64)
        found = [("NaN", bool(torch.isnan(t64).any())), ("+inf", bool(torch.isposinf(t64).any())),
                 ("-inf", bool(torch.isneginf(t64).any()))]
        for kind, present in found:
            if present and kind not in kinds:
                kinds.append(kind)
        finite = finite and not any(p for _, p in found)
        ok = t64[torch.isfinite(t64)]
        if ok.numel():
            hi = max(hi, float(ok.max())) if hi is not None else float(ok.max())
            lo = min(lo, float(ok.min())) if lo is not None else float(ok.min())
    return finite, hi, lo, kinds


def _run(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any],
         unhooked: Callable[[Callable[[], Any]], Any], devices: List[str]) -> Any:
    with _plain(devices):
        return unhooked(lambda: fn(*args, **kwargs))


def _error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, MemoryError) or "out of memory" in text.lower():
        return "not replayed: out of memory"
    return f"not replayed: {type(e).__name__}: {text}"[:300]


def replay_call(call: str, fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any],
                dtype: Optional[torch.dtype] = None,
                unhooked: Callable[[Callable[[], Any]], Any] = lambda f: f(),
                same_dtype_on_cpu: bool = False) -> Dict[str, Any]:
    """Replays `call` (its record name) with the original function `fn`.

    `dtype`: the dtype that overflowed (the anomalous output's); by default the first floating
    input's. The same-dtype CPU replay is made when the call ran on an accelerator, or always with
    `same_dtype_on_cpu` (offline: the recording device is not known). Returns {"replay": [result, ...], "not_replayed": str or None}; each result has kind
    ("wider" or "cpu"), dtype, device, finite, max and min (over the finite elements; None when
    there is none) and verdict (one line)."""
    out: Dict[str, Any] = {"replay": [], "not_replayed": None}
    reason = why_not(call, kwargs)
    if reason:
        out["not_replayed"] = f"not replayed: {reason}"
        return out
    inputs = [t for t in _tensors((args, kwargs)) if t.is_floating_point()]
    if dtype is None:
        dtype = inputs[0].dtype if inputs else None
    devices = sorted({t.device.type for t in _tensors((args, kwargs))})
    _, api = api_of(call)
    notes: List[str] = []
    wide = WIDER.get(dtype) if dtype is not None else None
    if wide is None:
        notes.append("not replayed wider: " + (f"{_dtype_name(dtype)} has nothing wider here" if dtype is not None
                                               else "no floating-point input"))
    else:
        def replayed_in(to: torch.dtype) -> Tuple[bool, Optional[float], Optional[float], List[str]]:
            def widen(t: torch.Tensor) -> torch.Tensor:
                if t.is_floating_point() and t.dtype in WIDER and torch.finfo(t.dtype).bits < torch.finfo(to).bits:
                    return t.detach().to(to)
                return t.detach()
            return _outcome(_run(fn, _map(args, widen), _map(kwargs, widen), unhooked, devices))
        try:
            finite, hi, lo, kinds = replayed_in(wide)
            name, narrow = _dtype_name(wide), _dtype_name(dtype)
            limit = torch.finfo(dtype).max
            peak = max(abs(hi or 0.0), abs(lo or 0.0))
            # A 16-bit op that computes in float32 inside (layer_norm's variance, a reduction under
            # autocast) overflows there in the float32 replay too: float64 tells an intermediate
            # overflow from an undefined op.
            deeper = WIDER.get(wide) if not finite else None
            deep = replayed_in(deeper) if deeper is not None else None
            if deep is not None and deep[0]:
                first_kinds = " and ".join(kinds)
                wide, name = deeper, _dtype_name(deeper)
                finite, hi, lo, kinds = deep
                verdict = (f"replay in {_dtype_name(WIDER[dtype])}: {first_kinds} as well; replay in {name}: "
                           f"finite (max {max(abs(hi or 0.0), abs(lo or 0.0)):.3g}): an intermediate overflow "
                           f"(a variance or a sum inside the op exceeds {_dtype_name(WIDER[dtype])}); keep this "
                           f"op in {name} or scale its inputs")
            elif finite and peak > limit:
                verdict = (f"replay in {name}: finite (max {peak:.3g} > {narrow} max {limit:g}): the values "
                           f"exceed {narrow}; keep this op in {name} or scale its inputs")
            elif finite:
                verdict = (f"replay in {name}: finite (max {peak:.3g}, within {narrow}'s range): only its "
                           f"intermediate values exceed {narrow}; keep this op in {name}")
            else:
                hint = UNDEFINED_HINTS.get(api.split(".")[-1], "")
                verdict = (f"replay in {name}: {' and '.join(kinds)} as well: the op is undefined here"
                           + (f" ({hint})" if hint else ""))
            out["replay"].append({"kind": "wider", "dtype": str(wide), "device": devices[0] if devices else "cpu",
                                  "finite": finite, "max": hi, "min": lo, "verdict": verdict})
        except Exception as e:  # noqa: BLE001 - a replay must never cost the stop
            notes.append(_error(e))
    if (same_dtype_on_cpu or any(d != "cpu" for d in devices)) and dtype is not None:
        try:
            result = _run(fn, _map(args, lambda t: t.detach().to("cpu")),
                          _map(kwargs, lambda t: t.detach().to("cpu")), unhooked, ["cpu"])
            finite, hi, lo, kinds = _outcome(result)
            name = _dtype_name(dtype)
            verdict = (f"CPU replay in {name} overflows too: a normal overflow" if not finite else
                       "CPU replay is finite: an abnormal overflow (the device's kernel)")
            out["replay"].append({"kind": "cpu", "dtype": str(dtype), "device": "cpu", "finite": finite,
                                  "max": hi, "min": lo, "verdict": verdict})
        except Exception as e:  # noqa: BLE001
            notes.append(_error(e).replace("not replayed:", "not replayed on the CPU:", 1))
    if not out["replay"]:
        out["not_replayed"] = "; ".join(notes) or "not replayed"
    elif notes:
        out["not_replayed"] = "; ".join(notes)
    return out


def _dtype_of(name: str) -> Optional[torch.dtype]:
    value = getattr(torch, name.replace("torch.", ""), None) if name else None
    return value if isinstance(value, torch.dtype) else None


def live_replay(call: str, original: Optional[Callable[..., Any]], args: Optional[Tuple[Any, ...]],
                kwargs: Optional[Dict[str, Any]], dtype: str, gone: Optional[str] = None) -> Dict[str, Any]:
    """What the engine calls at an op-origin stop: the call's arguments as its wrapper had them
    (kept until its batch was judged, under batched sync); None, with `gone` saying why, when
    they cannot be used."""
    if original is None or args is None:
        reason = why_not(call, {}) or gone or "its arguments are not held any more"
        return {"replay": [], "not_replayed": f"not replayed: {reason}"}
    from msprobe_cpp import _C
    # All of it unhooked: the casts and checks are torch calls too, and none is the user's.
    return _C.call_unhooked(lambda: replay_call(call, original, tuple(args), dict(kwargs or {}), _dtype_of(dtype)))
