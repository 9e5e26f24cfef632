#!/usr/bin/env python3
"""Fails (exit 1) where csrc/ breaks one of the rules of docs/architecture.md that a reader can
check line by line:

- crossing: the GIL is taken or released, a Python reference counted by hand, or a Python error
  cleared, fetched or restored outside the crossing class (csrc/live/crossing/);
- ownership: a class holds a reference to a Guarded<...>: guarded state is reached only by the
  class that owns it.

    python3 tools/architecture_checks.py [--quiet] [--root DIR]
"""
import re
import sys
from pathlib import Path

CROSSING_HOME = "live/crossing/"
CROSSING = re.compile(
    r"\b(Py_X?INCREF|Py_X?DECREF|Py_CLEAR|Py_SETREF|PyGILState_Ensure|PyGILState_Release|"
    r"PyErr_Clear|PyErr_Fetch|PyErr_Restore|gil_scoped_acquire|gil_scoped_release)\b"
    r"|\.(inc_ref|dec_ref)\(\)")
# A reference to guarded state kept as a member, a constructor parameter or a local alias.
GUARDED_REFERENCE = re.compile(r"\bGuarded<[^;(){}]*>\s*&")


def code_lines(path: Path):
    for number, line in enumerate(path.read_text().split("\n"), 1):
        code = re.sub(r"//.*", "", re.sub(r"\"(\\.|[^\"])*\"", "\"\"", line))
        yield number, code


def violations(csrc: Path):
    for path in sorted(csrc.rglob("*")):
        if path.suffix not in (".cpp", ".h"):
            continue
        relative = path.relative_to(csrc).as_posix()
        for number, code in code_lines(path):
            where = f"csrc/{relative}:{number}"
            if not relative.startswith(CROSSING_HOME) and CROSSING.search(code):
                yield "crossing", where, code.strip()
            if relative != "core/guarded.h" and GUARDED_REFERENCE.search(code):
                yield "ownership", where, code.strip()


def main() -> int:
    args = sys.argv[1:]
    root = Path(args[args.index("--root") + 1]) if "--root" in args else Path(__file__).resolve().parent.parent
    found = list(violations(root / "csrc"))
    for rule, where, code in found:
        hint = ("go through PythonCrossing (csrc/live/crossing/python_crossing.h)" if rule == "crossing"
                else "only the owner reaches its Guarded state: pass values, not the state")
        print(f"{where}: {rule}: {code}  -- {hint}")
    if not found and "--quiet" not in args:
        print("architecture checks: the crossing and ownership rules hold in csrc/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
