"""Every line the tool says goes through Python's logging, logger "msprobe_cpp": the C++ side's
(scaler skips, step summaries, headroom, warnings) and the Python side's, in the order said, from
any thread. By default one handler writes them to the `sys.stderr` of the moment, so a terminal
shows what it always showed and a notebook (whose sys.stderr is not fd 2) shows them in the cell.

The demo (examples/train_overflow_demo.py) is the story: five steps the loss scaler skips, an fp16
op that overflows at step 8, a bad parameter at step 11."""
import json
import logging
import re
import subprocess
import sys
import threading
from typing import Dict, List

import pytest

import msprobe_cpp
from msprobe_cpp import _C
from testenv import PACKAGE_ROOT, ROOT

DEMO = """
import io, json, logging, sys
sys.path.insert(0, {package!r}); sys.path.insert(0, {examples!r})
mode = set(sys.argv[1].split(","))
if "stringio" in mode:
    sys.stderr = io.StringIO()  # as Jupyter's kernel does, before anything is imported
import msprobe_cpp  # first: the demo would put the source tree's package on the path
logger = logging.getLogger("msprobe_cpp")
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])
if "handler" in mode:
    logger.handlers = [Keep()]
if "error" in mode:
    logger.setLevel(logging.ERROR)
import train_overflow_demo
status = train_overflow_demo.main()
said = sys.stderr.getvalue() if "stringio" in mode else None
with open(sys.argv[2], "w") as f:
    json.dump({{"status": status, "records": records, "stringio": said}}, f)
"""

SKIPPED = [f"msprobe_cpp: step {s}: gradients overflowed at scale {2 ** (32 - n)}; the loss scaler "
           "skipped the step" for n, s in enumerate([0, 1, 2, 3, 7])]


def tool_lines(text: str) -> List[str]:
    """The tool's lines of a stream: its own, and the indented lines of its step summaries."""
    out, in_summary = [], False
    for line in text.splitlines():
        if line.startswith("msprobe_cpp: "):
            out.append(line)
            in_summary = " flagged: " in line
        elif in_summary and line.startswith("  "):
            out.append(line)
        else:
            in_summary = False
    return out


def run_demo(tmp_path, mode: str) -> Dict:
    script = tmp_path / "run_demo.py"
    script.write_text(DEMO.format(package=str(PACKAGE_ROOT), examples=str(ROOT / "examples")))
    result = tmp_path / f"{mode}.json"
    p = subprocess.run([sys.executable, str(script), mode, str(result)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    # The dump's paths are the run's folder: "<run>" in every run, so that runs compare.
    out = json.loads(result.read_text().replace(json.dumps(str(tmp_path))[1:-1], "<run>"))
    out["stderr"] = p.stderr.replace(str(tmp_path), "<run>")
    out["stdout"] = p.stdout
    assert "Training stopped by msprobe_cpp" in p.stdout and "Ending the run" in p.stdout  # the story ran
    out["folder"] = tmp_path
    return out


@pytest.fixture(scope="module")
def terminal(tmp_path_factory) -> Dict:
    """The demo as a terminal shows it: the default handler, on fd 2."""
    return run_demo(tmp_path_factory.mktemp("terminal"), "plain")


def test_a_terminal_shows_the_story_on_stderr(terminal):
    lines = tool_lines(terminal["stderr"])
    assert [line for line in lines if "the loss scaler skipped" in line] == SKIPPED
    summaries = [line for line in lines if " flagged: " in line]
    assert [s.split(" flagged")[0] for s in summaries] == ["msprobe_cpp: step 8", "msprobe_cpp: step 11"]
    assert any(line.startswith("  first anomaly: Tensor.__mul__.3.forward") for line in lines)


def test_a_handler_on_the_logger_receives_every_line_and_nothing_reaches_fd2(tmp_path, terminal):
    run = run_demo(tmp_path, "handler")
    assert tool_lines(run["stderr"]) == []
    received = [line for _, message in run["records"] for line in message.splitlines()]
    assert received == tool_lines(terminal["stderr"])
    levels = {message.splitlines()[0]: level for level, message in run["records"]}
    assert all(levels[line] == "INFO" for line in SKIPPED)  # expected: the scaler's own business
    assert levels["msprobe_cpp: step 8 flagged: 5 anomalous calls (1 critical, 2 high, 2 medium)"] == "WARNING"


def test_with_sys_stderr_replaced_as_in_jupyter_the_lines_arrive_there(tmp_path, terminal):
    run = run_demo(tmp_path, "stringio")
    assert tool_lines(run["stderr"]) == []  # not on fd 2, which a notebook's cell never shows
    assert tool_lines(run["stringio"]) == tool_lines(terminal["stderr"])


def test_level_error_silences_the_story(tmp_path):
    run = run_demo(tmp_path, "stringio,error")
    assert tool_lines(run["stderr"]) == [] and tool_lines(run["stringio"]) == []
    assert run["records"] == []


@pytest.fixture
def kept():
    """The logger's records, for tests in this process; the default handler put back after."""
    logger = logging.getLogger("msprobe_cpp")
    records: List[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handlers, level = logger.handlers[:], logger.level
    logger.handlers = [Keep()]
    logger.setLevel(logging.INFO)
    yield records
    logger.handlers, _ = handlers, logger.setLevel(level)


def by_thread(records: List[logging.LogRecord]) -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = {}
    for r in records:
        t, i = r.getMessage().split(":")
        out.setdefault(int(t), []).append(int(i))
    return out


def test_lines_of_threads_python_never_saw_arrive_at_once_in_order(kept):
    # As the autograd engine's device threads say them: each takes the GIL to deliver.
    _C._say_on_threads(4, 300, False)
    assert by_thread(kept) == {t: list(range(300)) for t in range(4)}
    assert {r.thread for r in kept} - {threading.get_ident()}, "delivered by the threads that said them"


def test_lines_of_a_thread_that_may_not_take_the_gil_wait_for_one_that_has_it(kept):
    # As the dump writer's thread says them: queued, then delivered by the next debugger call.
    _C._say_on_threads(2, 50, True)
    assert kept == []
    _C._deliver_said_lines()
    assert by_thread(kept) == {0: list(range(50)), 1: list(range(50))}
    assert {r.thread for r in kept} == {threading.get_ident()}


def test_python_and_cpp_lines_share_one_order(kept, tmp_path):
    msprobe_cpp.log.warn("first")
    _C._say_on_threads(1, 3, True)  # queued
    msprobe_cpp.log.say(logging.INFO, "then")  # delivers what was queued before it
    assert [r.getMessage() for r in kept] == ["msprobe_cpp: warning: first", "0:0", "0:1", "0:2", "then"]


def test_a_failing_handler_loses_no_line_and_changes_nothing(tmp_path, capfd):
    logger = logging.getLogger("msprobe_cpp")

    class Broken(logging.Handler):
        def emit(self, record):
            raise RuntimeError("handler down")

        def handleError(self, record):
            raise  # as a strict handler does: the exception reaches our call

    handlers = logger.handlers[:]
    logger.handlers = [Broken()]
    try:
        msprobe_cpp.log.warn("still said")
    finally:
        logger.handlers = handlers
    assert "msprobe_cpp: warning: still said" in capfd.readouterr().err


STOP_THEN_DIE = """
import os, sys, json
sys.path.insert(0, {package!r}); sys.path.insert(0, {tests!r})
import torch, msprobe_cpp
from models import compute_loss, make_batches, make_model, make_optimizer
torch.set_num_threads(1)
model = make_model("mlp")
opt = make_optimizer(model)
dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=sys.argv[1], level="L1",
                                    async_dump=True)
for i, (x, y) in enumerate(make_batches(model, 4)):
    if i == 2:
        with torch.no_grad():
            next(model.parameters())[0, 0] = float("nan")
    dbg.start(model)
    try:
        opt.zero_grad()
        compute_loss(model, x, y).backward()
        opt.step()
    except msprobe_cpp.OverflowError:
        os._exit(3)  # dies at once: no exit handler runs, no buffer is flushed
    dbg.stop()
    dbg.step()
"""


def test_the_lines_of_a_stop_are_out_before_the_process_dies(tmp_path):
    script = tmp_path / "die.py"
    script.write_text(STOP_THEN_DIE.format(package=str(PACKAGE_ROOT), tests=str(ROOT / "tests" / "python")))
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "dump")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 3, p.stderr[-3000:]
    lines = tool_lines(p.stderr)
    assert lines and lines[0].startswith("msprobe_cpp: on: "), p.stderr  # the first start's line
    assert lines[1].startswith("msprobe_cpp: step 2 flagged: "), p.stderr
    assert any(line.startswith("  first anomaly: ") and "origin parameter" in line for line in lines)


def test_check_on_the_demos_dump_names_the_live_stops_verdict(terminal, cli):
    """Issue 44: `check` once named the causal mask's masked_fill as step 11's probable origin; the
    stop named the NaN weight, and overflow_report.json beside dump.json says so."""
    folder = terminal["folder"] / "demo_dump" / "step11" / "rank"
    first = json.loads((folder / "overflow_report.json").read_text())["first_anomaly"]
    assert (first["origin"], first["parameter"]) == ("parameter", "blocks.1.mlp.fc1.weight")
    out = subprocess.run([str(cli), "check", str(folder / "dump.json"), "--format", "text"],
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert (f"  the live stop (overflow_report.json): {first['api_name']}, origin parameter, "
            "parameter blocks.1.mlp.fc1.weight") in lines, out.stdout
    live = lines.index(f"  the live stop (overflow_report.json): {first['api_name']}, origin parameter, "
                       "parameter blocks.1.mlp.fc1.weight")
    offline = next(i for i, line in enumerate(lines) if line.startswith("  offline reading"))
    assert live < offline  # the stop's verdict first


def test_the_first_start_says_once_what_the_tool_does_to_the_run(tmp_path):
    """Issue 44: nothing said the tool was on, or with what."""
    import torch
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname, record.getMessage()))
    logger = logging.getLogger("msprobe_cpp")
    keep = Keep()
    logger.addHandler(keep)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", level="mix", dump_path=str(tmp_path / "d"))
        for _ in range(2):
            debugger.start(model)
            model(torch.randn(1, 2))
            debugger.stop()
            debugger.step()
        debugger._release()
    finally:
        logger.removeHandler(keep)
    on = [(level, text) for level, text in records if text.startswith("msprobe_cpp: on: ")]
    assert len(on) == 1, records
    level, text = on[0]
    assert level == "INFO"
    assert re.match(r"msprobe_cpp: on: task overflow_check, level mix; [1-9][0-9]+ torch APIs and ", text), text
    assert text.endswith(f" torch APIs and 2 modules hooked; flagged steps are dumped under {tmp_path / 'd'}"), text
