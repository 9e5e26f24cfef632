"""Where the tests run: the repository's paths, the package under test, and the devices a test is
parametrized over. A plain module, so that test modules import it by name; a test module that
imported conftest would depend on how pytest happened to load it."""
import os
import pathlib
from typing import List

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "msprobe-1.1.1"
# Where the package msprobe_cpp is imported from: the source tree (built in place against
# Debian's torch), or the folder tools/test.sh builds against torch 2.x. Subprocesses get it too.
PACKAGE_ROOT = pathlib.Path(os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", ROOT / "python"))
TESTS = ROOT / "tests" / "python"


def devices() -> List[str]:
    """cpu always; cuda whenever this machine has it, so the same tests prove the GPU path.
    "cpu-generic" runs CPU tensors through the reductions that other devices use."""
    import torch
    return ["cpu", "cpu-generic"] + (["cuda"] if torch.cuda.is_available() else [])


# Set by conftest's `device` fixture while it forces the device path for CPU tensors, whose sums
# are float32 there.
GENERIC_PATH = [False]


def float32_sums(t) -> bool:
    """Whether `t`'s statistics come from the device path, whose Mean and Norm accumulate in
    float32 (float64 for float64 tensors)."""
    return t.device.type != "cpu" or GENERIC_PATH[0]


ON_LINE = "msprobe_cpp: on: "  # the INFO line of a debugger's first start() (issue 44)


def said_besides_on_line(text: str) -> str:
    """A process's output without the line every debugger says at its first start(): what a
    clean run must otherwise leave empty."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(ON_LINE))
