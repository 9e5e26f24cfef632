"""zygote.py, which forks the multi-process tests' ranks from a warm interpreter: a forked rank
runs its script as `python script.py` would (arguments, folder, environment, log, exit status,
exit handlers, an uncaught exception, a kill), and a launch whose environment differs from the
server's gets a server of its own."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from dist_runs import _env, run_python
from zygote import WarmForks

SCRIPT = """
import atexit, os, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "rank", os.environ.get("RANK"), flush=True)
print("main", __name__, os.path.basename(__file__), flush=True)
atexit.register(lambda: open("atexit_ran", "w").write("yes"))
if sys.argv[1] == "raise":
    raise ValueError("boom")
if sys.argv[1] == "sleep":
    import time
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def fork(tmp_path: pathlib.Path, arg: str, **env: str):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    run = tmp_path / arg
    run.mkdir()
    rank = WarmForks.start([sys.executable, str(script), arg], dict(_env(), RANK="1", **env), str(run),
                           str(run / "process0.log"))
    return rank, run


def test_a_forked_rank_runs_its_script_as_python_would(tmp_path):
    rank, run = fork(tmp_path, "3")
    assert rank is not None
    assert rank.wait(timeout=60) == 3
    log = (run / "process0.log").read_text()
    assert f"argv ['3'] cwd {run} rank 1" in log and "main __main__ script.py" in log, log
    assert (run / "atexit_ran").read_text() == "yes"  # the interpreter's own exit ran


def test_an_uncaught_exception_exits_1_with_its_traceback_in_the_log(tmp_path):
    rank, run = fork(tmp_path, "raise")
    assert rank.wait(timeout=60) == 1
    log = (run / "process0.log").read_text()
    assert "ValueError: boom" in log and (run / "atexit_ran").exists(), log


def test_a_killed_rank_reports_its_signal_in_its_own_process_group(tmp_path):
    rank, run = fork(tmp_path, "sleep")
    deadline = time.monotonic() + 60
    while "main __main__" not in (run / "process0.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.getpgid(rank.pid) == rank.pid
    os.killpg(rank.pid, signal.SIGKILL)
    assert rank.wait(timeout=60) == -signal.SIGKILL


def test_another_environment_gets_a_server_of_its_own(tmp_path):
    rank, _ = fork(tmp_path, "0")
    assert rank.wait(timeout=60) == 0
    other, run = fork(tmp_path, "4", OMP_NUM_THREADS="2")
    assert other.wait(timeout=60) == 4
    assert other._forks is not rank._forks and other._forks.env["OMP_NUM_THREADS"] == "2"
    assert "rank 1" in (run / "process0.log").read_text()


def test_a_command_that_is_not_a_script_of_this_python_starts_afresh(tmp_path):
    assert WarmForks.start(["/bin/true"], dict(_env()), str(tmp_path), str(tmp_path / "log")) is None
    assert WarmForks.start([sys.executable, "-m", "torch.distributed.run"], dict(_env()), str(tmp_path),
                           str(tmp_path / "log")) is None


def test_the_wait_times_out_like_popens(tmp_path):
    rank, _ = fork(tmp_path, "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        rank.wait(timeout=0.2)
    os.killpg(rank.pid, signal.SIGKILL)
    rank.wait(timeout=60)


def test_run_python_gives_what_subprocess_run_gives_for_minus_c(tmp_path):
    """stdout and stderr apart, the exit status, the arguments, and sys.path[0] as `-c` has it."""
    code = "import sys; print('out', sys.argv[1:], sys.path[0]); print('err', file=sys.stderr); sys.exit(3)"
    forked = run_python(["-c", code, "a"], env=dict(_env()), cwd=tmp_path, timeout=60)
    fresh = subprocess.run([sys.executable, "-c", code, "a"], env=dict(_env()), cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout == "out ['a'] \n" and forked.returncode == 3
