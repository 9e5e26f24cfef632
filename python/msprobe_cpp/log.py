"""The tool's lines, on the logger "msprobe_cpp".

By default the logger has one handler of its own, writing each line as it is to the `sys.stderr` of
the moment (a notebook's cell, when Jupyter has replaced it), and it does not propagate, so a
program that configures the root logger does not see every line twice. To route the lines:

    logging.getLogger("msprobe_cpp").setLevel(logging.ERROR)   # quiet: only failures to write
    logging.getLogger("msprobe_cpp").handlers = [my_handler]    # or propagate = True

Levels: INFO for what is expected (a step the loss scaler skips, NaN a model absorbed), WARNING
for a flagged step, a stop and what may cost data, ERROR for a dump that could not be written.
"""
import logging
import sys

from . import _C

logger = logging.getLogger("msprobe_cpp")


class _CurrentStderr(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is when a line is written."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


default_handler = _CurrentStderr()
default_handler.setFormatter(logging.Formatter("%(message)s"))


def _configure() -> None:
    if not logger.handlers:
        logger.addHandler(default_handler)
        logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def say(level: int, text: str) -> None:
    """A line, in order with those the C++ side says (they share one queue)."""
    _C.say(level, text)


def warn(text: str) -> None:
    say(logging.WARNING, f"msprobe_cpp: warning: {text}")


def _deliver(level: int, text: str) -> None:
    logger.log(level, text)


def close() -> None:
    """At exit: the lines still queued go out; later ones (threads ending after Python's exit
    handlers) go to stderr as they are, since the logging module may be gone by then."""
    _C._set_log_sink(None)


_configure()
_C._set_log_sink(_deliver)
