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
    from msprobe_cpp import _built_for
    assert _built_for.TORCH_VERSION == torch.__version__
    assert pathlib.Path(_built_for.TORCH_INIT_FILE).resolve() == pathlib.Path(torch.__file__).resolve()


def test_a_package_built_for_another_torch_is_an_import_error_naming_both(tmp_path):
    package = tmp_path / "msprobe_cpp"
    shutil.copytree(PACKAGE_ROOT / "msprobe_cpp", package)
    (package / "_built_for.py").write_text('TORCH_VERSION = "9.9.9"\nTORCH_INIT_FILE = "/elsewhere/torch/__init__.py"\n')
    done = import_from(tmp_path)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: msprobe_cpp's extension was built for torch 9.9.9 "
                           "(/elsewhere/torch/__init__.py), but this interpreter has torch "
                           f"{torch.__version__}"), done.stderr
    assert "pip install --no-build-isolation --force-reinstall ." in last


OTHER = ROOT / "build-torch2" / "pkg" if torch.__version__.startswith("1.") else ROOT / "python"


@pytest.mark.skipif(not (OTHER / "msprobe_cpp" / "_built_for.py").exists(),
                    reason="the other torch's build is not here (tools/common.sh torch2_build / build)")
def test_the_other_torchs_real_build_is_refused_before_it_loads():
    done = import_from(OTHER)
    assert done.returncode == 1 and "terminate called" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ImportError: msprobe_cpp's extension was built for torch "), \
        done.stderr
