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

from . import _C
from ._C import ConfigError, RulesError, WriteError
from .debugger import PrecisionDebugger
from .errors import Overflow, OverflowError  # noqa: A004 - msprobe_cpp.OverflowError, a RuntimeError

__version__: str = _C.__version__

__all__ = ["PrecisionDebugger", "Overflow", "OverflowError", "ConfigError", "RulesError", "WriteError"]

# Sessions hold Python objects: let go of the live one while the interpreter can still take them.
atexit.register(_C.set_current_session, None)
