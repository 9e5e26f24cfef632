"""The compile seam of torch 2.x without a Python frame per eager call.

A hooked API is the C hook as a builtin function named like the original (ApiHook.function), set
in the original's place, so an eager call
costs what it costs on torch 1.13. torch.compile is told to trace each one as the original it
replaced (torch._dynamo.substitute_in_graph): compiled regions are neither recorded nor broken
into graphs. What a compiled region's run time calls eagerly is told apart in C, by the caller's
file (_C.watch_compiled_runtime).

torch._dynamo takes seconds to import, and a process that never compiles should not pay them: the
hooks made before it is imported are registered once it is, by a finder on sys.meta_path that
wraps its loader. dynamo keys its rules by id(), so a registered hook is kept for the life of the
process, and api_hooks.py reuses it at every install instead of making another.

Where torch has no substitute_in_graph (before 2.5), api_hooks.py keeps its Python wrapper."""
import importlib.abc
import importlib.machinery
import sys
from typing import Any, Callable, List, Optional, Tuple

import torch

from . import _C, log

_DYNAMO = "torch._dynamo"
_pending: List[Tuple[Any, Any]] = []  # (hook's call, original) waiting for dynamo's import
_kept: List[Any] = []  # every registered call, alive for good: dynamo's rules hold their id()
# (owner, attribute, original, what replaces it) of the hooks in place now.
_installed: List[Tuple[Any, str, Any, Any]] = []


def installed(owner: Any, attr: str, original: Any, wrapper: Any) -> None:
    _installed.append((owner, attr, original, wrapper))


def removed_all() -> None:
    _installed.clear()


class _OriginalsInPlace:
    """dynamo builds its map of torch's functions to their rules once, from torch's attributes as
    they are then (while it imports, or at its first use): our hooks must not be in it (they would
    be called with fake tensors instead of being traced as the originals), so the originals are
    put back for that moment."""

    def __enter__(self) -> None:
        for owner, attr, original, _ in _installed:
            setattr(owner, attr, original)

    def __exit__(self, *exc: Any) -> None:
        for owner, attr, _, wrapper in _installed:
            setattr(owner, attr, wrapper)


def _rule_map_of_originals() -> None:
    from torch._dynamo import trace_rules
    with _OriginalsInPlace():
        trace_rules.get_torch_obj_rule_map()


def supported() -> bool:
    """Whether this torch's dynamo can be told to trace a C callable as another (torch >= 2.5)."""
    try:
        return torch.torch_version.TorchVersion(torch.__version__) >= (2, 5)
    except Exception:  # noqa: BLE001 - an unparsable version: the Python wrapper stays
        return False


def _register(call: Any, original: Any) -> None:
    from torch._dynamo import substitute_in_graph

    def traced_as_original(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    substitute_in_graph(call, skip_signature_check=True)(traced_as_original)


def _watch_compiling_flag() -> None:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and "_is_compiling_flag" in vars(compiler):
        _C.watch_compiling_flag(vars(compiler), "_is_compiling_flag")


def _register_pending() -> None:
    _rule_map_of_originals()
    while _pending:
        call, original = _pending.pop(0)
        try:
            _register(call, original)
        except Exception as e:  # noqa: BLE001 - a torch whose dynamo refuses: compiled code breaks there
            log.warn(f"torch.compile will break its graph at {getattr(original, '__name__', original)}: {e}")


class _AfterDynamoLoads(importlib.abc.MetaPathFinder):
    """Finds torch._dynamo as the other finders do, and registers the pending hooks once its
    module has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            with _OriginalsInPlace():
                run(module)
            _register_pending()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def traceable(hook: Any, original: Any) -> Callable[..., Any]:
    """The callable to set in `original`'s place: `hook` itself to an eager caller, `original` to
    torch.compile."""
    name = getattr(original, "__name__", "hook")
    # The signature the Python wrapper had (torch's code inspects some APIs'), then the doc.
    doc = f"{name}(*args, **kwargs)\n--\n\n{getattr(original, '__doc__', None) or ''}"
    call = hook.function(name, doc, getattr(original, "__module__", None))
    _watch_compiling_flag()
    _kept.append(call)
    _pending.append((call, original))
    if _DYNAMO not in sys.modules and not any(isinstance(f, _AfterDynamoLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoLoads())
    return call


def register_made() -> None:
    """Registers the hooks traceable() made, where dynamo is imported already (else its import
    does): once for all of an install, since each registration puts every installed original
    back for a moment (a thousand hooks registered one by one took 0.2 s at the first start)."""
    if _pending and _DYNAMO in sys.modules:
        _register_pending()
