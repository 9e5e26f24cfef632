"""Before the extension loads: is it built for this interpreter's torch? An extension built against
one torch and loaded under another either fails with an undefined symbol or aborts the process
inside the loader (`terminate called after throwing ... std::system_error`), which no program can
catch. The torch it was compiled against is a string compiled into the library
(csrc/bind/module.cpp); it is read from the file, never by loading it, and a mismatch is an
ImportError naming both torches and the rebuild command."""
import glob
import importlib.machinery
import mmap
import os
from typing import Any, Optional, Tuple

MARKER = b"\nmsprobe_cpp-built-for-torch:"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def extension_file(package_dir: str = PACKAGE_DIR) -> Optional[str]:
    """The _C library this package would load (the first of the interpreter's suffixes found)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        found = glob.glob(os.path.join(glob.escape(package_dir), "_C" + suffix))
        if found:
            return found[0]
    return None


def text_in(library: str, start: bytes, end: bytes) -> Optional[str]:
    """The text compiled into `library` that begins with `start`, up to `end` (neither included),
    read from its bytes without loading it; None when it holds none."""
    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(start)
        if at < 0:
            return None
        return data[at + len(start):data.find(end, at + len(start))].decode("utf-8", "replace")


def built_for(library: str) -> Optional[Tuple[str, str]]:
    """(torch version, torch's __init__.py) that `library` was compiled against; None when it
    records none."""
    text = text_in(library, MARKER, b"\n")
    if text is None:
        return None
    version, _, init_file = text.partition("|")
    return version, init_file


def check_built_for(torch: Any) -> None:
    library = extension_file()
    recorded = built_for(library) if library else None
    if recorded is None:
        return  # no extension here (the import says so), or one from before the record
    built, init_file = recorded
    running = torch.__version__
    if built == running:
        return
    where = os.path.dirname(PACKAGE_DIR)
    raise ImportError(
        f"msprobe_cpp's extension was built for torch {built} ({init_file}), but this interpreter has "
        f"torch {running} ({torch.__file__}): rebuild it for this torch, from the msprobe_cpp checkout: "
        f"`pip install --no-build-isolation --force-reinstall .` (installed package), or "
        f"`bash -c 'source tools/common.sh; build'` (the source tree's package, {where})")
