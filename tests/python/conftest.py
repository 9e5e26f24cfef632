import os
import pathlib
import sys
from typing import List

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "msprobe-1.1.1"
# Where the package msprobe_cpp is imported from: the source tree (built in place against
# Debian's torch), or the folder tools/test.sh builds against torch 2.x. Subprocesses get it too.
PACKAGE_ROOT = pathlib.Path(os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", ROOT / "python"))
sys.path.insert(0, str(PACKAGE_ROOT))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def devices() -> List[str]:
    """cpu always; cuda whenever this machine has it, so the same tests prove the GPU path.
    "cpu-generic" runs CPU tensors through the reductions that other devices use."""
    import torch
    return ["cpu", "cpu-generic"] + (["cuda"] if torch.cuda.is_available() else [])


GENERIC_PATH = [False]  # the device path is forced for CPU tensors: sums are float32 there


def float32_sums(t) -> bool:
    """Whether `t`'s statistics come from the device path, whose Mean and Norm accumulate in
    float32 (float64 for float64 tensors)."""
    return t.device.type != "cpu" or GENERIC_PATH[0]


@pytest.fixture
def device(request):
    """The parametrized device name, as a torch device string; sets the statistics path."""
    from msprobe_cpp import _C
    name = request.param
    _C._force_generic_statistics(name == "cpu-generic")
    GENERIC_PATH[0] = name == "cpu-generic"
    yield "cpu" if name == "cpu-generic" else name
    _C._force_generic_statistics(False)
    GENERIC_PATH[0] = False


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("MSPROBE_CPP_BIN", ROOT / "build" / "bin" / "msprobe-cpp"))
    if not path.exists():
        pytest.fail(f"{path} not built: run the README's build first")
    return path


@pytest.fixture(scope="session")
def fixtures() -> pathlib.Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def no_debugger_left_behind():
    """A test that fails midway must not leave hooks installed for the next one."""
    yield
    if "msprobe_cpp" in sys.modules:
        from msprobe_cpp import PrecisionDebugger
        if PrecisionDebugger._instance is not None:
            PrecisionDebugger._instance._release()
            PrecisionDebugger._instance = None
