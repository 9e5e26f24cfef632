"""Before the extension loads: is it built for this interpreter's torch? An extension built against
one torch and loaded under another either fails with an undefined symbol or aborts the process
inside the loader (`terminate called after throwing ... std::system_error`), which no program can
catch. The build records its torch (_built_for.py); a mismatch is an ImportError naming both."""
import os
from typing import Any


def check_built_for(torch: Any) -> None:
    try:
        from . import _built_for
    except ImportError:
        return  # a build from before the record: nothing to compare
    built, running = _built_for.TORCH_VERSION, torch.__version__
    if built == running:
        return
    where = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    raise ImportError(
        f"msprobe_cpp's extension was built for torch {built} ({_built_for.TORCH_INIT_FILE}), but this "
        f"interpreter has torch {running} ({torch.__file__}): rebuild it for this torch, from the "
        f"msprobe_cpp checkout: `pip install --no-build-isolation --force-reinstall .` (installed "
        f"package), or `bash -c 'source tools/common.sh; build'` (the source tree's package, {where})")
