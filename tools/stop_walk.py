#!/usr/bin/env python3
"""The stop path's walk (issue 54), counted: torch.matmul makes inf under overflow_check L1 (1e38 * 1e38 in float32) and
the tool stops the run there. Run by tools/stop_walk.sh, in a Python that preloads
tools/walk/walk_hooks.c into an extension built at -O0 with -finstrument-functions. Counted on the
stopping thread, from the hook's entry to the OverflowError:

- files entered: the csrc/ files called into from another file (or from Python), a header's
  inline functions being the header's; an entry is a distinct (caller function, callee function)
  pair across files, so that a loop is one entry; re-entries: the entries into a file beyond its
  first (a file called again from another place: control went back and forth); the same for
  source files alone (.cpp: the headers' inline helpers left out);
- lock acquisitions: the mutexes locked (pthread_mutex_lock), each time, by the file whose code
  asked for it;
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
    bad = torch.tensor([[1e38, -1e38]])  # 1e38 * 1e38: inf in float32

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

        weight = model.weight.t()
        begin, end = hooks.walk_begin, hooks.walk_end  # looked up before the walk
        if x is bad:
            sys.setprofile(profile)
            begin()
        try:
            torch.matmul(x, weight)
        finally:
            end()
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


def resolve(library: str, offsets: List[str]) -> Dict[str, Tuple[str, str]]:
    """Each offset's (function, csrc/ file or ""): addr2line on the -O0 build, where no function
    is inlined, so that a call site is in its caller."""
    unique = sorted(set(offsets))
    out = subprocess.run(["addr2line", "-f", "-C", "-e", library], input="\n".join(unique) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    return {o: (out[2 * k], ours(out[2 * k + 1])) for k, o in enumerate(unique)}


def ours(location: str) -> str:
    """"<repo>/csrc/core/x.cpp:12" -> "core/x.cpp"; "" for a file outside csrc/."""
    path = location.rsplit(":", 1)[0]
    marker = os.sep + "csrc" + os.sep
    return path.split(marker, 1)[1] if marker in path else ""


def count(events_file: str, crossings: List[str]) -> Dict[str, object]:
    calls: List[List[str]] = []
    locks: List[List[str]] = []
    with open(events_file) as f:
        for line in f:
            kind, *rest = line.split()
            (calls if kind == "call" else locks).append(rest)
    library = next(part for row in calls + locks for part in row[::2] if part != "-")
    where = resolve(library, [off for row in calls + locks for lib, off in zip(row[::2], row[1::2])
                              if lib != "-"])
    # An entry: a call from a function of one file (or from outside csrc/: Python, torch) into a
    # function of another; each distinct (caller, callee) pair counts once, so that a loop over
    # fields is one entry, not one per field.
    edges: Dict[Tuple[str, str], str] = {}  # (caller, callee) -> the callee's file, in order
    for lib_fn, fn, lib_site, site in calls:
        callee, callee_file = where[fn] if lib_fn != "-" else ("", "")
        caller, caller_file = where[site] if lib_site != "-" else ("(outside)", "")
        if callee_file and callee_file != caller_file:
            edges.setdefault((caller, callee), callee_file)
    per_file = collections.Counter(edges.values())
    sources = collections.Counter(f for f in edges.values() if f.endswith(".cpp"))
    # Our locks: those the extension's own code takes (not Python's or torch's, inside a call the
    # engine made), each belonging to the first frame in csrc/ besides Guarded's.
    lock_files, lock_chains = [], []
    for row in locks:
        if not row or row[0] == "-":
            continue
        frames = [where[off] for lib, off in zip(row[::2], row[1::2]) if lib != "-"]
        lock_files.append(next((f for _, f in frames if f and f != "core/guarded.h"), "(pybind11)"))
        lock_chains.append(" <- ".join(fn.split("(")[0] for fn, f in frames if f)[:300])
    return {
        "files_entered": len(per_file),
        "re_entries": len(edges) - len(per_file),
        "source_files_entered": len(sources),
        "source_file_re_entries": sum(sources.values()) - len(sources),
        "entries_by_source_file": {f: n for f, n in sources.most_common()},
        "lock_acquisitions": len(lock_files),
        "locks_by_file": dict(collections.Counter(lock_files).most_common()),
        "crossings_into_python": len(crossings),
        "crossings": crossings,
        "edges": [f"{file}: {a} -> {b}" for (a, b), file in edges.items()],
        "lock_chains": lock_chains,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as dump:
        events, crossings = run_walk(dump)
        counts = count(events, crossings)
    edges, chains = counts.pop("edges"), counts.pop("lock_chains")
    print(json.dumps(counts, indent=1))
    if "--edges" in sys.argv:
        print("\n".join(edges))
    if "--locks" in sys.argv:
        print("\n".join(chains))


if __name__ == "__main__":
    main()
