"""msprobe_cpp: msprobe's PyTorch data dump, in C++, with live overflow detection.

    import msprobe_cpp
    debugger = msprobe_cpp.PrecisionDebugger(config_path="config.json")
    debugger.start(model)
    ...  # forward, backward, optimizer step
    debugger.stop()
    debugger.step()
"""
from ._C import ConfigError, RulesError, WriteError
from .debugger import PrecisionDebugger
from .errors import OverflowError  # noqa: A004 - msprobe_cpp.OverflowError, a RuntimeError

__all__ = ["PrecisionDebugger", "OverflowError", "ConfigError", "RulesError", "WriteError"]
