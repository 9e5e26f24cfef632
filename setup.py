"""Builds the msprobe_cpp package and its extension msprobe_cpp._C.

    /usr/bin/python3 setup.py build_ext --inplace     # what tools/*.sh run (no build isolation)
"""
import glob
import os
import shutil

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

ROOT = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join(ROOT, "build", "generated_py")


def shipped_rules_source() -> str:
    """The same compiled-in rules file that CMake generates for the CLI."""
    with open(os.path.join(ROOT, "rules", "ignore_rules.yaml")) as f:
        rules = f.read()
    with open(os.path.join(ROOT, "csrc", "core", "shipped_rules.cpp.in")) as f:
        template = f.read()
    os.makedirs(GENERATED, exist_ok=True)
    out = os.path.join(GENERATED, "shipped_rules.cpp")
    text = template.replace("@MSPROBE_SHIPPED_RULES@", rules)
    if not os.path.exists(out) or open(out).read() != text:
        with open(out, "w") as f:
            f.write(text)
    return os.path.relpath(out, ROOT)


def package_rules() -> None:
    """The package carries its own copy of the YAML files it reads at run time."""
    dest = os.path.join(ROOT, "python", "msprobe_cpp", "_rules")
    os.makedirs(dest, exist_ok=True)
    for name in ("support_wrap_ops.yaml", "ignore_rules.yaml"):
        shutil.copyfile(os.path.join(ROOT, "rules", name), os.path.join(dest, name))


package_rules()
sources = sorted(glob.glob("csrc/core/*.cpp") + glob.glob("csrc/torch/*.cpp") + glob.glob("csrc/bind/*.cpp"))
sources.append(shipped_rules_source())

setup(
    name="msprobe_cpp",
    version="0.1.0",
    description="C++ re-implementation of msprobe's PyTorch data dump with live overflow detection",
    package_dir={"": "python"},
    packages=["msprobe_cpp"],
    package_data={"msprobe_cpp": ["_rules/*.yaml"]},
    ext_modules=[
        CppExtension(
            name="msprobe_cpp._C",
            sources=sources,
            include_dirs=[os.path.join(ROOT, "csrc")],
            libraries=["yaml-cpp"],
            # torch's headers as system headers: -Wextra is for our code, not theirs.
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-std=c++17", "-fvisibility=hidden"]
            + [f"-isystem{p}" for p in include_paths()],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
