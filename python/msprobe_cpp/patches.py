"""The one registry of what the tool puts into the program it observes: the attributes it replaces
(torch's APIs, GradScaler.scale, an optimizer class's step, Module.__getstate__, the calls whose
failures a peer's stop explains) and the hooks it registers (modules', the optimizer step's).
Everything goes in through replace() or hook(), under a kind, and comes out through remove(),
which restores each attribute exactly as it was, in the reverse order."""
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

_MISSING = object()


class Patches:
    def __init__(self) -> None:
        # (kind, owner, attribute, what owner.__dict__ held: _MISSING where it was inherited)
        self._replaced: List[Tuple[str, Any, str, Any]] = []
        self._hooks: List[Tuple[str, Any]] = []  # (kind, RemovableHandle)
        self._at_removal: Dict[str, List[Callable[[], None]]] = {}
        # How many patches of each kind are in: start() asks at every step, of a registry that
        # holds a thousand API wrappers.
        self._counts: Dict[str, int] = {}
        self.closed = False  # remove() of everything ran: nothing goes in any more

    def replace(self, kind: str, owner: Any, attr: str, wrapper: Any) -> None:
        """Puts `wrapper` in place of owner.attr. An attribute that the class or the object
        inherits (Tensor methods live in torch._C._TensorBase; an object's methods in its class)
        is deleted again at removal, not shadowed."""
        own_attributes = getattr(owner, "__dict__", None)
        own = own_attributes.get(attr, _MISSING) if own_attributes is not None else getattr(owner, attr)
        self._replaced.append((kind, owner, attr, own))
        self._counts[kind] = self._counts.get(kind, 0) + 1
        setattr(owner, attr, wrapper)

    def hook(self, kind: str, handles: Iterable[Any]) -> None:
        """Registered hooks (their RemovableHandles)."""
        handles = list(handles)
        self._hooks += [(kind, h) for h in handles]
        self._counts[kind] = self._counts.get(kind, 0) + len(handles)

    def at_removal(self, kind: str, call: Callable[[], None]) -> None:
        """`call()` runs when `kind` is removed (the last of its patches is out)."""
        self._at_removal.setdefault(kind, []).append(call)

    def installed(self, kind: str) -> bool:
        return self._counts.get(kind, 0) > 0

    def count(self, kind: str) -> int:
        """How many patches of `kind` are in (attributes replaced and hooks registered)."""
        return self._counts.get(kind, 0)

    def replaced(self, kind: str) -> List[Tuple[Any, str]]:
        return [(owner, attr) for k, owner, attr, _ in self._replaced if k == kind]

    def hook_ids(self, kinds: Sequence[str]) -> Set[int]:
        return {h.id for k, h in self._hooks if k in kinds}

    def remove(self, kinds: Optional[Sequence[str]] = None) -> None:
        """Takes out every patch of `kinds` (all when None), the last put in first."""
        def chosen(kind: str) -> bool:
            return kinds is None or kind in kinds

        for kind, handle in reversed(self._hooks):
            if chosen(kind):
                handle.remove()
        self._hooks = [(k, h) for k, h in self._hooks if not chosen(k)]
        for kind, owner, attr, own in reversed(self._replaced):
            if not chosen(kind):
                continue
            if own is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, own)
        self._replaced = [entry for entry in self._replaced if not chosen(entry[0])]
        self._counts = {k: n for k, n in self._counts.items() if not chosen(k)}
        for kind in [k for k in self._at_removal if chosen(k)]:
            for call in self._at_removal.pop(kind):
                call()
        if kinds is None:
            self.closed = True
