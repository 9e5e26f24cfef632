"""The `msprobe-cpp` console command of an installed package. `--version`, `--help` and a bare
command are answered from the extension's file, without loading it: loading it imports torch
first, seconds for a line of text. Everything else is msprobe_cpp.__main__'s.

A module of its own, beside the package: importing anything inside msprobe_cpp runs its
__init__, which imports torch."""
import importlib.util
import os
import sys
from typing import List, Optional


def _torch_check():
    """msprobe_cpp/_torch_check.py, loaded by its path: the package itself is not imported."""
    spec = importlib.util.find_spec("msprobe_cpp")  # finds, does not import, a top-level package
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "_torch_check.py")
    loader = importlib.util.spec_from_file_location("msprobe_cpp_torch_check", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def without_torch(args: List[str]) -> Optional[int]:
    """The answer to `args` without torch, or None where it needs the extension loaded."""
    if args not in ([], ["--version"], ["-h"], ["--help"]):
        return None
    check = _torch_check()
    library = check.extension_file() if check else None
    if library is None:
        return None
    if args == ["--version"]:
        version = check.text_in(library, b"\nmsprobe_cpp-version:", b"\n")
        if version is None:
            return None
        sys.stdout.write(f"msprobe-cpp {version}\n")
        return 0
    usage = check.text_in(library, b"usage: msprobe-cpp check", b"\0")
    if usage is None:
        return None
    sys.stdout.write("usage: msprobe-cpp check" + usage)
    return 0 if args else 2


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    answered = without_torch(args)
    if answered is not None:
        return answered
    from msprobe_cpp.__main__ import main as full
    return full(args)


if __name__ == "__main__":
    sys.exit(main())
