#!/usr/bin/env python3
"""Fails (exit 1) where a function defined under csrc/ is longer than LIMIT lines, from its
signature's first line to its closing brace. A reader of this project's clang-formatted sources
(namespaces not indented, so a function is defined at column 0, or at column 2 inside a class),
not of C++ in general. Lambdas count in the function that holds them.

    python3 tools/function_sizes.py [--quiet]
"""
import re
import sys
from pathlib import Path

LIMIT = 70
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try|namespace|struct|class|enum|union|extern)\b")
# The end of a function's signature: its parameter list, then qualifiers, a trailing return type
# or a constructor's initializer list.
SIGNATURE_END = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*(->\s*[^{]+)?\s*\{\s*$")


def functions(path: Path):
    """(name, first line, length) of each function defined in `path`."""
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if indent > 2 or not line.strip() or line.lstrip().startswith(("//", "#", "}")) or CONTROL.match(line):
            i += 1
            continue
        # The statement that starts here, up to the line that ends it: `;` (a declaration), or
        # `{` (a definition, when what comes before reads like a signature).
        j = i
        while j < len(lines) and not re.search(r"[;{}]\s*(//.*)?$", lines[j]):
            j += 1
        signature = " ".join(s.strip() for s in lines[i:j + 1])
        if j == len(lines) or not lines[j].rstrip().endswith("{") or "(" not in signature or not (
                SIGNATURE_END.search(signature) or re.search(r"\)\s*:\s*\w+[({]", signature)):
            i += 1
            continue
        depth, end = 0, j
        for end in range(j, len(lines)):
            code = re.sub(r"//.*", "", re.sub(r"'(\\.|[^'])'|\"(\\.|[^\"])*\"", "", lines[end]))
            depth += code.count("{") - code.count("}")
            if depth == 0:
                break
        name = re.search(r"([\w:~<>]+)\s*\(", signature)
        yield (name.group(1) if name else signature[:40]), i + 1, end - i + 1
        i = end + 1


def main() -> int:
    root = Path(__file__).resolve().parent.parent / "csrc"
    quiet = "--quiet" in sys.argv
    over = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".cpp", ".h"):
            continue
        for name, line, length in functions(path):
            where = f"{path.relative_to(root.parent)}:{line}"
            if length > LIMIT:
                over.append(f"{where}: {name} is {length} lines (at most {LIMIT})")
            elif not quiet and length > LIMIT * 3 // 4:
                print(f"{where}: {name} {length} lines")
    for line in over:
        print(line)
    if over:
        return 1
    if quiet:
        print(f"function sizes in csrc/: every function within {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
