#!/usr/bin/env python3
"""Fails (exit 1) where csrc/ breaks one of the rules of docs/architecture.md that a reader can
check line by line:

- crossing: the GIL is taken or released, a Python reference counted by hand, or a Python error
  set, tested, cleared, fetched or restored outside the crossing class (csrc/live/crossing/);
- ownership: a class holds a reference to a Guarded<...>: guarded state is reached only by the
  class that owns it;
- gil: a function whose comment says "GIL required" has no PythonCrossing::assert_gil() in its
  definition (the claim is checked in debug builds, as pybind11's gil.h checks its own);
- raw-object: a raw PyObject* outside live/crossing/ and the bindings (bind/): elsewhere a
  pybind11::handle (borrowed, or kept with PythonCrossing::keep) or a pybind11::object (owned)
  says whose reference it is, and the casts to frame and code objects are PythonFrames';
- task: a class derived from TaskProcessor that live/session/task_registry.cpp does not register
  (a task is a folder and one registration, not a world of its own);
- backward-hook: an autograd hook (a tensor's register_hook, a node's pre or post hook) added
  outside live/hooks/: a task sees a call's gradient through the backward recorder
  (add_gradient_callback), not through a hook of its own.

    python3 tools/architecture_checks.py [--quiet] [--root DIR]
"""
import re
import sys
from pathlib import Path

CROSSING_HOME = "live/crossing/"
CROSSING = re.compile(
    r"\b(Py_X?INCREF|Py_X?DECREF|Py_CLEAR|Py_SETREF|PyGILState_Ensure|PyGILState_Release|"
    r"PyErr_\w+|python_error|gil_scoped_acquire|gil_scoped_release)\b"
    r"|\.(inc_ref|dec_ref|restore)\(\)")
# A reference to guarded state kept as a member, a constructor parameter or a local alias.
GUARDED_REFERENCE = re.compile(r"\bGuarded<[^;(){}]*>\s*&")
RAW_OBJECT = re.compile(r"\bPyObject\s*\*")
HOOKS_HOME = "live/hooks/"
BACKWARD_HOOK = re.compile(r"(\.|->)(register_hook|add_post_hook|add_pre_hook|add_tensor_pre_hook)\s*[(<]")
TASK_CLASS = re.compile(r"\b(?:class|struct)\s+(\w+)[^;{]*:\s*[^;{]*\bpublic\s+TaskProcessor\b")
TASK_REGISTRY = "live/session/task_registry.cpp"


def code_lines(path: Path):
    for number, line in enumerate(path.read_text().split("\n"), 1):
        code = re.sub(r"//.*", "", re.sub(r"\"(\\.|[^\"])*\"", "\"\"", line))
        yield number, code


GIL_CLAIM = "GIL required"
DECLARED_NAME = re.compile(r"(~?\w+)\s*\($")


def gil_claims(path: Path):
    """The functions whose comment (the lines just above the declaration, or on its line) says
    "GIL required": (name, line)."""
    lines = path.read_text().split("\n")
    claimed = False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("//"):
            claimed = claimed or GIL_CLAIM in stripped
            continue
        code = re.sub(r"//.*", "", stripped)
        if (claimed or GIL_CLAIM in line) and "(" in code:
            name = DECLARED_NAME.search(code[:code.index("(") + 1])
            if name:
                yield name.group(1), number
        claimed = False


def definitions(csrc: Path, name: str):
    """Each definition of `name` (a free function or a member): its file, line and body."""
    head = re.compile(r"^[^\s/#].*\b(?:\w+::)?" + re.escape(name) + r"\s*\(")
    for path in sorted(csrc.rglob("*")):
        if path.suffix not in (".cpp", ".h"):
            continue
        text = path.read_text()
        lines = text.split("\n")
        for number, line in enumerate(lines, 1):
            if not head.search(line) or line.rstrip().endswith(";"):
                continue
            rest = "\n".join(lines[number - 1:])
            brace, semi = rest.find("{"), rest.find(";")
            if brace < 0 or (0 <= semi < brace):
                continue  # a declaration or a call
            depth, end = 0, brace
            for end in range(brace, len(rest)):
                depth += {"{": 1, "}": -1}.get(rest[end], 0)
                if depth == 0:
                    break
            yield path, number, rest[brace:end + 1]


def gil_violations(csrc: Path):
    for path in sorted(csrc.rglob("*")):
        if path.suffix not in (".cpp", ".h") or path.relative_to(csrc).as_posix().startswith(CROSSING_HOME):
            continue
        for name, number in gil_claims(path):
            for where, line, body in definitions(csrc, name):
                if "assert_gil()" not in body:
                    yield ("gil", f"csrc/{where.relative_to(csrc).as_posix()}:{line}",
                           f"{name}: claimed at csrc/{path.relative_to(csrc).as_posix()}:{number}")


def task_violations(csrc: Path):
    registry = csrc / TASK_REGISTRY
    registered = registry.read_text() if registry.exists() else ""
    for path in sorted(csrc.rglob("*.h")):
        for number, code in code_lines(path):
            match = TASK_CLASS.search(code)
            if match and f"make<{match.group(1)}>" not in registered:
                yield ("task", f"csrc/{path.relative_to(csrc).as_posix()}:{number}",
                       f"{match.group(1)} is not registered in csrc/{TASK_REGISTRY}")


def violations(csrc: Path):
    yield from gil_violations(csrc)
    yield from task_violations(csrc)
    for path in sorted(csrc.rglob("*")):
        if path.suffix not in (".cpp", ".h"):
            continue
        relative = path.relative_to(csrc).as_posix()
        raw_exempt = relative.startswith(CROSSING_HOME) or relative.startswith("bind/")
        for number, code in code_lines(path):
            where = f"csrc/{relative}:{number}"
            if not relative.startswith(CROSSING_HOME) and CROSSING.search(code):
                yield "crossing", where, code.strip()
            if not relative.startswith(HOOKS_HOME) and BACKWARD_HOOK.search(code):
                yield "backward-hook", where, code.strip()
            if relative != "core/guarded.h" and GUARDED_REFERENCE.search(code):
                yield "ownership", where, code.strip()
            if not raw_exempt and RAW_OBJECT.search(code):
                yield "raw-object", where, code.strip()


def main() -> int:
    args = sys.argv[1:]
    root = Path(args[args.index("--root") + 1]) if "--root" in args else Path(__file__).resolve().parent.parent
    found = list(violations(root / "csrc"))
    for rule, where, code in found:
        hint = {"crossing": "go through PythonCrossing (csrc/live/crossing/python_crossing.h)",
                "ownership": "only the owner reaches its Guarded state: pass values, not the state",
                "gil": "its comment says GIL required: begin it with PythonCrossing::assert_gil()",
                "raw-object": "take a pybind11::handle (borrowed) or object (owned), or go through "
                              "the crossing (RAW_OBJECT_LEFT counts what is left)",
                "task": "add it to kRegistrations (docs/architecture.md, Adding a task)",
                "backward-hook": "see the gradient through hooks/backward_recorder.h "
                                 "(add_gradient_callback)"}[rule]
        print(f"{where}: {rule}: {code}  -- {hint}")
    if not found and "--quiet" not in args:
        print("architecture checks: the crossing, ownership, GIL, raw-object, task and backward-hook "
              "rules hold in csrc/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
