"""msprobe_cpp._C shares pybind11's type registry with the torch it is built for.

pybind11 keeps its registry in the interpreter under a key made of its internals version and the
platform's ABI (`__pybind11_internals_v4_gcc_libstdcpp_cxxabi1011__`, `__pybind11_internals_v12_
system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1__`). The key is one string literal in each binary:
an extension built with another key registers its types in a registry of its own, and torch's
types are then foreign to it. torch 2.14 stopped stating the key's parts
(torch._C._PYBIND11_*), and an empty value passed for each made `__pybind11_internals_v12__`."""
import pathlib
import re

import torch  # noqa: F401 - loads libtorch_python, whose path /proc/self/maps then gives

from msprobe_cpp import _C

KEY = re.compile(rb"__pybind11_internals_v\d+[A-Za-z0-9_]*?__(?![A-Za-z0-9])")


def loaded_library(name: str) -> pathlib.Path:
    for line in pathlib.Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if pathlib.Path(path).name.startswith(name):
            return pathlib.Path(path)
    raise AssertionError(f"{name} is not loaded in this process")


def internals_keys(path: pathlib.Path) -> set:
    return {m.group(0).decode() for m in KEY.finditer(path.read_bytes())}


def test_the_extension_uses_the_key_of_its_torch():
    ours = internals_keys(pathlib.Path(_C.__file__))
    torchs = internals_keys(loaded_library("libtorch_python"))
    assert len(torchs) == 1, torchs
    assert ours == torchs, f"{_C.__file__}: {ours}; torch {torch.__version__}: {torchs}"

