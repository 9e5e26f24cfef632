"""Installs and removes the C++ API wrappers: msprobe 1.1.1's wrap list (rules/support_wrap_ops.yaml),
the dtype casts and FSDP2's collectives under task overflow_check, and the config's extra_apis;
and under overflow_check the markers of torch.empty and its kin, whose memory is unwritten."""
import difflib
import hashlib
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed
import torch.nn.functional

from . import _C, compile_seam, peer_stop
from .patches import Patches
from .errors import DistributedStopError, OverflowError

RULES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rules")

# YAML section -> (object whose attributes are wrapped, call-name prefix)
_NAMESPACES = {
    "torch": (torch, "Torch"),
    "tensor": (torch.Tensor, "Tensor"),
    "functional": (torch.nn.functional, "Functional"),
    "distributed": (torch.distributed, "Distributed"),
    "vf": (torch._VF, "VF"),
}

_MISSING = object()


def _process_group_facts(group: Any) -> Optional[Tuple[List[int], str]]:
    """A process group argument as msprobe records it: its ranks, and the md5 of their text."""
    try:
        ranks = list(torch.distributed.get_process_group_ranks(group))
    except Exception:  # noqa: BLE001 - then the record says the type alone, as msprobe's does
        return None
    return ranks, hashlib.md5(str(ranks).encode("utf-8")).hexdigest()


if torch.distributed.is_available():
    _C.set_process_group_facts(torch.distributed.ProcessGroup, _process_group_facts)
_SECTION_OF_PREFIX = {prefix: section for section, (_, prefix) in _NAMESPACES.items()}


def resolve(section: str, name: str) -> Optional[Tuple[Any, str, Any]]:
    """(owner, attribute, callable) of API `name` of a section in the running torch, or None where
    it lacks it (msprobe skips those too). A dotted torch name (linalg.norm) is an attribute of
    its submodule."""
    owner = _NAMESPACES[section][0]
    *path, attr = name.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    original = getattr(owner, attr, _MISSING)
    if original is _MISSING or not callable(original) or isinstance(original, type):
        return None
    return owner, attr, original


def check_extra_apis(names: List[str], label: Callable[[int], str]) -> List[Tuple[str, str]]:
    """(section, name) of each "Tensor.view"-like name; ConfigError with a did-you-mean for one the
    running torch does not have."""
    out = []
    for i, full in enumerate(names):
        prefix, name = full.split(".", 1)
        section = _SECTION_OF_PREFIX[prefix]
        if resolve(section, name) is None:
            owner = _NAMESPACES[section][0]
            close = difflib.get_close_matches(name, [n for n in dir(owner) if not n.startswith("_")], n=1)
            hint = f'; did you mean "{prefix}.{close[0]}"?' if close else ""
            raise _C.ConfigError(f"{label(i)}: {full!r} is no API of this torch ({torch.__version__})"
                                 f"{hint}")
        out.append((section, name))
    return out


def compiling_probe() -> Optional[Callable[[], bool]]:
    """torch.compile's "am I being traced" test (PyTorch 2.x), or None where there is none."""
    compiler = getattr(torch, "compiler", None)
    probe = getattr(compiler, "is_compiling", None)
    if probe is None:
        probe = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return probe if callable(probe) else None


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
# The code that runs a compiled region: torch's compile runtime (AOTAutograd's wrappers, inductor's
# helpers) and the modules inductor generates (in its cache folder, "torchinductor_<user>").
_COMPILED_RUNTIME = tuple(os.path.join(_TORCH_DIR, d) + os.sep for d in ("_inductor", "_functorch", "_dynamo"))
_compiled_model_seen = [False]


def mark_compiled_model_seen() -> None:
    """From now on the hooks look at who calls them: see _compile_aware and compile_seam."""
    _compiled_model_seen[0] = True
    _C.watch_compiled_runtime(list(_COMPILED_RUNTIME), ["torchinductor"])


# (section, name) -> (original, what replaces it): compile_seam's hooks, made once for good.
_TRACEABLE: Dict[Tuple[str, str], Tuple[Any, Any]] = {}


def _traceable(call_name: str, owner: Any, original: Any) -> Any:
    made = _TRACEABLE.get(call_name)
    if made is not None and made[0] is original:
        return made[1]
    call = compile_seam.traceable(_C.ApiHook(call_name, original), original)
    wrapper = _C.as_method(call) if owner is torch.Tensor else call
    _TRACEABLE[call_name] = (original, wrapper)
    return wrapper


def _compile_aware(hook: Any, original: Any, is_compiling: Callable[[], bool]) -> Callable[..., Any]:
    """Under torch.compile the wrapper is inlined by the tracer, which folds is_compiling() to True
    and so traces the original call: compiled regions are left alone (neither recorded nor judged,
    never broken into pieces), and eager calls go to the hook. A compiled region's own run time
    (the buffers inductor's code allocates, AOTAutograd's backward) calls torch eagerly too: once a
    compiled model was started, those calls, told by their caller's file, are left alone as well."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_compiling() or (_compiled_model_seen[0] and _C.compiled_runtime_file(sys._getframe(1).f_code.co_filename)):
            return original(*args, **kwargs)
        return hook(*args, **kwargs)
    wrapper.__name__ = getattr(original, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(original, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    return wrapper


def _coordinated(call: Callable[..., Any]) -> Callable[..., Any]:
    """A torch.distributed wrapper: under a coordinated stop (peer_stop.py) a collective is not
    entered once the run is stopping, and one that fails because a peer stopped (gloo reports
    the closed connection) says so, with this rank's records written."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        guard = peer_stop.active()
        if guard is None:
            return call(*args, **kwargs)
        guard.check()
        try:
            return call(*args, **kwargs)
        except (OverflowError, DistributedStopError):
            raise
        except RuntimeError as e:
            guard.after_collective_failure(e)
            raise
    wrapper.__name__ = getattr(call, "__name__", "wrapper")
    return wrapper


def _work_class() -> Optional[type]:
    """torch.distributed's Work, whose wait() ends every collective: the synchronous ones call it
    inside torch.distributed, an asynchronous one's caller calls it (DeepSpeed's ZeRO-3 gathers
    its parameters so, and holds its own references to the collectives, taken before any hook).
    A wait that fails because a peer stopped and left then raises that stop (_coordinated)."""
    if not torch.distributed.is_available():
        return None
    c10d = getattr(torch._C, "_distributed_c10d", None)
    work = getattr(c10d, "Work", None)
    return work if isinstance(work, type) and callable(getattr(work, "wait", None)) else None


# Their memory holds whatever the allocator left: NaN/inf there, read before it is written, is no
# anomaly (FSDP2 narrows its all-gather buffer before the all-gather fills it). Not recorded,
# as msprobe records none of them; only marked.
_UNWRITTEN_MAKERS = [(torch, "empty"), (torch, "empty_like"), (torch, "empty_strided"),
                     (torch.Tensor, "new_empty"), (torch.Tensor, "new_empty_strided")]


# The writers of such memory that msprobe's list does not hook: DeepSpeed's ZeRO copies each
# gradient into its slice of one torch.empty partition (Tensor.copy_), then narrows the next slice
# while it is still unwritten. Not recorded either; what they write is noted as written (the
# hooked writers, fill_, add_, __setitem__, note it in their hook).
_UNWRITTEN_WRITERS = [(torch.Tensor, "copy_"), (torch.Tensor, "zero_")]


def _noting_writes(original: Any, is_compiling: Optional[Callable[[], bool]]) -> Callable[..., Any]:
    written = _C.note_written

    def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        done = original(tensor, *args, **kwargs)
        if is_compiling is None or not is_compiling():
            written(tensor)
        return done
    return _named_like(wrapper, original)


# FSDP1 frees its unsharded flat parameter's storage after each use and allocates it again with
# _alloc_storage (a storage resize_, no torch.empty) before the all-gather fills it: the same
# leftover memory, split by torch.chunk for gloo's all_gather while it is still unwritten. The
# modules that imported it, by torch version.
_STORAGE_ALLOCATORS = ["torch.distributed.fsdp._flat_param", "torch.distributed.fsdp.flat_param"]


def _marking_allocated_storage(original: Any) -> Callable[..., Any]:
    mark = _C.mark_unwritten

    def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        done = original(tensor, *args, **kwargs)
        mark(tensor)
        return done
    return _named_like(wrapper, original)


def _named_like(wrapper: Callable[..., Any], original: Any) -> Callable[..., Any]:
    wrapper.__name__ = getattr(original, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(original, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    return wrapper


def _marking_unwritten(original: Any, is_compiling: Optional[Callable[[], bool]]) -> Callable[..., Any]:
    mark = _C.mark_unwritten

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        if is_compiling is None or not is_compiling():
            mark(made)
        return made
    return _named_like(wrapper, original)


def install(patches: Patches, watching: bool = False, extra: Sequence[Tuple[str, str]] = (),
            wrap_ops_path: str = os.path.join(RULES_DIR, "support_wrap_ops.yaml"),
            call_name: Callable[[str, str], str] = lambda prefix, name: f"{prefix}.{name}") -> None:
    """msprobe's list; with `watching` (task overflow_check) the casts too; then `extra`. Into
    `patches` under the kind "api"; once. `call_name(prefix, name)`: what the calls are recorded
    as (the session's api_call_name)."""
    if patches.installed("api"):
        return
    ops: Dict[str, List[str]] = _C.load_wrap_ops(wrap_ops_path)
    wanted = [(section, name) for section in _NAMESPACES for name in ops.get(section, [])]
    if watching:
        wanted += [("tensor", name) for name in ops.get("overflow_casts", [])]
        wanted += [("distributed", name) for name in ops.get("overflow_collectives", [])]
    wanted += list(extra)
    is_compiling = compiling_probe()
    seam = is_compiling is not None and compile_seam.supported()
    done = set()
    for section, name in wanted:
        if (section, name) in done:
            continue
        done.add((section, name))
        prefix = _NAMESPACES[section][1]
        if section == "distributed" and not torch.distributed.is_available():
            continue
        found = resolve(section, name)
        if found is None:
            continue  # not in this torch version
        owner, attr, original = found
        if seam:
            wrapper = _traceable(call_name(prefix, name), owner, original)
        else:
            hook = _C.ApiHook(call_name(prefix, name), original)
            if is_compiling is not None:
                wrapper = _compile_aware(hook, original, is_compiling)  # a function: binds as a method
            else:
                wrapper = _C.as_method(hook) if owner is torch.Tensor else hook
        if section == "distributed":
            wrapper = _coordinated(wrapper)
        if seam:
            compile_seam.installed(owner, attr, original, wrapper)
        patches.replace("api", owner, attr, wrapper)
    if seam:
        compile_seam.register_made()
    if watching:
        for owner, attr in _UNWRITTEN_MAKERS:
            original = getattr(owner, attr, None)
            if original is not None:
                patches.replace("api", owner, attr, _marking_unwritten(original, is_compiling))
        work = _work_class()
        if work is not None:
            patches.replace("api", work, "wait", _coordinated(work.wait))
        for owner, attr in _UNWRITTEN_WRITERS:
            original = getattr(owner, attr, None)
            if original is not None and (owner, attr) not in patches.replaced("api"):
                patches.replace("api", owner, attr, _noting_writes(original, is_compiling))
        for module_name in _STORAGE_ALLOCATORS:
            module = sys.modules.get(module_name)  # imported by the program's FSDP, if any
            original = getattr(module, "_alloc_storage", None)
            if original is not None:
                patches.replace("api", module, "_alloc_storage", _marking_allocated_storage(original))
    patches.at_removal("api", compile_seam.removed_all)
