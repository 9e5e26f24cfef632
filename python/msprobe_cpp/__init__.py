"""msprobe_cpp: msprobe's PyTorch data dump, in C++, with live overflow detection.

    import msprobe_cpp
    debugger = msprobe_cpp.PrecisionDebugger(config_path="config.json")
    debugger.start(model)
    ...  # forward, backward, optimizer step
    debugger.stop()
    debugger.step()
"""
import atexit

import torch  # noqa: F401 - torch's libraries and Python types are in place before _C loads

from ._torch_check import check_built_for

check_built_for(torch)
from . import _C  # noqa: E402
from . import log  # noqa: E402

# Registered first, so it runs last: the lines the other exit handlers say still reach the logger.
atexit.register(log.close)
from ._C import ConfigError, RulesError, WriteError
from .debugger import PrecisionDebugger, module_dump, module_dump_end, write_at_exit
from .errors import DistributedStopError, Overflow, OverflowError  # noqa: A004 - a RuntimeError
from .monitor import TrainerMon
from .seed import seed_all

__version__: str = _C.__version__

# Tracebacks name a class by its __module__: the users' name, not the extension's.
for _error in (ConfigError, RulesError, WriteError):
    _error.__module__ = __name__
del _error

__all__ = ["PrecisionDebugger", "TrainerMon", "seed_all", "module_dump", "module_dump_end", "Overflow",
           "OverflowError", "DistributedStopError", "ConfigError", "RulesError", "WriteError"]

atexit.register(write_at_exit)
