#!/usr/bin/env python3
"""The stop path's walk (issue 54), counted: torch.matmul makes NaN under overflow_check L1 and
the tool stops the run there. Run by tools/stop_walk.sh, in a Python that preloads
tools/walk/walk_hooks.c into an extension built with -finstrument-functions. Counted on the
stopping thread, from the hook's entry to the OverflowError:

- files entered: the csrc/ files whose functions ran (a header's inline functions are the
  header's), and re-entries: each time a file is entered again after control went to another;
- lock acquisitions: the mutexes our code locked (pthread_mutex_lock called from the extension),
  by the file whose code took each;
- crossings into Python: the Python functions the engine called (a frame whose caller is the
  program's frame that made the call: C++ pushes no frame of its own).

A clean step runs first, so that what a session does once (said-once lines, caches) is not
counted."""
import collections
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_walk(dump: str) -> Tuple[str, List[str]]:
    import torch
    import msprobe_cpp

    hooks = ctypes.CDLL(None)  # the preloaded probes are in the global scope
    hooks.walk_write.restype = ctypes.c_long
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1e38, 1e38], [1.0, 1.0]]))
    debugger = msprobe_cpp.PrecisionDebugger(dump_path=dump, task="overflow_check", level="L1")
    clean = torch.tensor([[1.0, 1.0]])
    bad = torch.tensor([[1e38, -1e38]])  # 1e38*1e38 + 1e38*(-1e38): inf - inf, NaN in float32

    def step(x: torch.Tensor) -> None:
        debugger.start(model)
        try:
            walk(x)
        finally:
            debugger.stop()
            debugger.step()

    crossings: List[str] = []

    def walk(x: torch.Tensor) -> None:
        here = sys._getframe()

        def profile(frame, event, arg):  # noqa: ANN001
            if event == "call" and frame.f_back is here:
                crossings.append(f"{os.path.relpath(frame.f_code.co_filename, ROOT)}:"
                                 f"{frame.f_code.co_name}")

        if x is bad:
            sys.setprofile(profile)
            hooks.walk_begin()
        try:
            torch.matmul(x, model.weight.t())
        finally:
            hooks.walk_end()
            sys.setprofile(None)

    step(clean)
    try:
        step(bad)
        raise SystemExit("stop_walk: the planted NaN did not stop the run")
    except msprobe_cpp.OverflowError as e:
        assert e.call == "Torch.matmul.0.forward" and e.origin == "op", (e.call, e.origin)
    events = os.path.join(dump, "walk_events.txt")
    if hooks.walk_write(events.encode(), b"/msprobe_cpp/_C") < 0:
        raise SystemExit(f"stop_walk: cannot write {events}")
    return events, crossings


def resolve(library: str, offsets: List[str], inlines: bool) -> List[List[str]]:
    """Each offset's source locations, innermost first (the function's own unless `inlines`)."""
    if inlines:  # an address's chain of inlined calls has no end marker: each is asked on its own
        return [subprocess.run(["addr2line", "-i", "-e", library, o], capture_output=True, text=True,
                               check=True).stdout.splitlines() for o in offsets]
    out = subprocess.run(["addr2line", "-e", library], input="\n".join(offsets) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    return [[line] for line in out]


def ours(location: str) -> str:
    """"<repo>/csrc/core/x.cpp:12" -> "core/x.cpp"; "" for a file outside csrc/."""
    path = location.rsplit(":", 1)[0]
    marker = os.sep + "csrc" + os.sep
    return path.split(marker, 1)[1] if marker in path else ""


def count(events_file: str, crossings: List[str]) -> Dict[str, object]:
    enters: List[Tuple[str, str]] = []
    locks: List[Tuple[str, str]] = []
    with open(events_file) as f:
        for line in f:
            kind, library, offset = line.split()
            (enters if kind == "enter" else locks).append((library, offset))
    library = enters[0][0] if enters else locks[0][0]
    files = [f for f in (ours(chain[0]) for chain in resolve(library, [o for _, o in enters], False))
             if f]
    # A visit: entries of one file in a row.
    visits = [f for i, f in enumerate(files) if i == 0 or f != files[i - 1]]
    per_file = collections.Counter(visits)
    lock_files = []
    for chain in resolve(library, [o for _, o in locks], True):
        lock_files.append(next((ours(c) for c in chain if ours(c)), "(outside csrc)"))
    return {
        "files_entered": len(per_file),
        "re_entries": len(visits) - len(per_file),
        "entered_more_than_once": {f: n for f, n in per_file.most_common() if n > 1},
        "lock_acquisitions": len(locks),
        "locks_by_file": dict(collections.Counter(lock_files).most_common()),
        "crossings_into_python": len(crossings),
        "crossings": crossings,
        "visits": visits,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as dump:
        events, crossings = run_walk(dump)
        counts = count(events, crossings)
    visits = counts.pop("visits")
    print(json.dumps(counts, indent=1))
    if "--visits" in sys.argv:
        print("\n".join(visits))


if __name__ == "__main__":
    main()
