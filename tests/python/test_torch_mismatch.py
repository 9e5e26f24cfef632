"""An extension built for one torch, imported under another, is an ImportError that names both
and the command that rebuilds (issue 33): never a crash inside the loader, which no program can
catch (`terminate called after throwing ... std::system_error`)."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

from testenv import PACKAGE_ROOT, ROOT


def import_from(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import msprobe_cpp"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root)), timeout=120)


def test_the_build_records_the_torch_it_is_built_for():
    from msprobe_cpp import _torch_check
    library = _torch_check.extension_file()
    version, init_file = _torch_check.built_for(library)
    assert version == torch.__version__
    assert pathlib.Path(init_file).resolve() == pathlib.Path(torch.__file__).resolve()
    assert not (pathlib.Path(library).parent / "_built_for.py").exists()  # nothing beside it can disagree


def test_a_package_built_for_another_torch_is_an_import_error_naming_both(tmp_path):
    from msprobe_cpp import _torch_check
    package = tmp_path / "msprobe_cpp"
    shutil.copytree(PACKAGE_ROOT / "msprobe_cpp", package)
    library = pathlib.Path(_torch_check.extension_file(str(package)))
    data = library.read_bytes()
    at = data.index(_torch_check.MARKER) + len(_torch_check.MARKER)
    end = data.index(b"\n", at)
    # What another torch's build says of itself (never loaded: refused first, so the bytes after
    # it may move).
    library.write_bytes(data[:at] + b"9.9.9|/elsewhere/torch/__init__.py" + data[end:])
    done = import_from(tmp_path)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: msprobe_cpp's extension was built for torch 9.9.9 "
                           "(/elsewhere/torch/__init__.py), but this interpreter has torch "
                           f"{torch.__version__}"), done.stderr
    assert "pip install --no-build-isolation --force-reinstall ." in last


OTHER = ROOT / "build-torch2" / "pkg" if torch.__version__.startswith("1.") else ROOT / "python"


def other_library() -> pathlib.Path:
    return next(iter(sorted((OTHER / "msprobe_cpp").glob("_C.*.so"))), OTHER / "none")


@pytest.mark.skipif(not other_library().exists(),
                    reason="the other torch's build is not here (tools/common.sh torch2_build / build)")
@pytest.mark.parametrize("beside", ["its-own-package", "this-package"])
def test_the_other_torchs_real_build_is_refused_before_it_loads(tmp_path, beside):
    """Issue 44: what the library was compiled against decides, whatever package files lie beside
    it (a shared build folder once put 1.13's library beside files written for 2.13)."""
    root = OTHER
    if beside == "this-package":
        root = tmp_path
        shutil.copytree(PACKAGE_ROOT / "msprobe_cpp", tmp_path / "msprobe_cpp")
        for mine in (tmp_path / "msprobe_cpp").glob("_C.*.so"):
            mine.unlink()
        shutil.copy2(other_library(), tmp_path / "msprobe_cpp" / other_library().name)
    done = import_from(root)
    assert done.returncode == 1 and "terminate called" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ImportError: msprobe_cpp's extension was built for torch "), \
        done.stderr
