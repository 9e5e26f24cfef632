"""How every multi-process test and bench starts the ranks of rank_worker.py, and reads them back.

    run = run_ranks(out, world, ["--mode", "nan_batch", "--bad-rank", "1"], timeout=60.0)
    assert run.returncodes == [0] * world, run.context()
    run.results[r], run.state(r), run.folder(step, r), run.step_folders(), run.logs

The ranks are one process each (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), one torchrun
(torchrun=True), or one rank_worker.py --spawn WORLD (spawn=True). run_ranks gives them a hard
timeout after which every process is killed and the test fails; once one process exits with an
error, it kills the others (they would wait for it in a collective until the timeout), and it
starts them again, at most twice, when a rank lost the race for the free port. A bench that times
the processes itself starts a Launch and waits on it. Results: OUT/result_rank<r>.json,
OUT/state_rank<r>.pt, the dump under OUT/dump; each process's output in OUT/process<i>.log.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import pytest
import torch

from gloo import free_port
from testenv import PACKAGE_ROOT, TESTS
from zygote import WarmForks

WORKER = TESTS / "rank_worker.py"
# test_peer_stop.py's and bench/peer_stop_overhead.py's run: the small model with its gradients
# averaged by hand, plain SGD, every flagged step written.
PEER_RUN = ["--model", "small", "--wrap", "all_reduce", "--momentum", "0", "--overflow-nums", "-1", "--no-save"]
# The store's port taken between our probe and its bind: torch 1.13 says "Address already in use",
# torch 2.x "address already in use" (EADDRINUSE); compared in lower case.
PORT_TAKEN = "address already in use"
# torchrun's rendezvous unless told otherwise (torchrun_args): one node, a port of its own choosing.
# Options are spelled with underscores: torch 1.13's torchrun knows no other spelling.
TORCHRUN_STANDALONE = ("--standalone",)
# Each started process leads a process group of its own (killing the group kills torchrun's workers
# with it) but stays in our session: a session of its own is a scheduler autogroup of its own,
# which a loaded machine starves (bench/peer_stop_overhead.py's steps ran 1.4x slower).
OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
# Ranks forked from a warm interpreter that imported torch once (zygote.py): set by conftest.py for
# the tests (MSPROBE_TEST_WARM_FORKS=0 leaves it off); benches that time whole processes start
# each afresh.
FORK_FROM_WARM = False


@dataclass
class Run:
    out: pathlib.Path
    world: int
    returncodes: List[int]
    logs: List[str]  # each process's stdout and stderr together
    results: List[dict] = field(default_factory=list)
    ended_at: float = 0.0  # time.time() when the last process had exited
    seconds: float = 0.0

    def state(self, rank: int) -> Dict[str, torch.Tensor]:
        return torch.load(self.out / f"state_rank{rank}.pt")

    def folder(self, step: int, rank: int) -> pathlib.Path:
        return self.out / "dump" / f"step{step}" / f"rank{rank}"

    def step_folders(self) -> List[str]:
        dump = self.out / "dump"
        return sorted(p.name for p in dump.iterdir() if p.name.startswith("step")) if dump.exists() else []

    def context(self) -> str:
        """What a failing assertion shows: each process's output, and each rank's result."""
        parts = [f"--- process {i} (status {rc}):\n{log}" for i, (rc, log) in
                 enumerate(zip(self.returncodes, self.logs))]
        for r in self.results:
            shown = {k: v for k, v in r.items() if k not in ("args", "losses")}
            parts.append(f"--- result of rank {r.get('rank')}: {json.dumps(shown, indent=1)[:6000]}")
        return "\n".join(parts)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    package = PACKAGE_ROOT.resolve()  # the processes run in OUT: no path may be relative
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", MSPROBE_CPP_PACKAGE_ROOT=str(package),
               PYTHONPATH=os.pathsep.join([str(package), str(TESTS)]))
    return env


def _torchrun_workaround(out: pathlib.Path) -> List[str]:
    """torch 1.13's torchrun under Python 3.11 cannot start with its defaults: Std.from_str("0")
    finds no Std.NONE (3.11's IntFlag iteration leaves the zero member out), so `redirects` and
    `tee` are None and start_processes fails. Redirecting stderr (tee'd to the console too) into
    a log folder is a value it does parse."""
    try:
        from torch.distributed.elastic.multiprocessing.api import Std
        broken = Std.from_str("0") is None
    except Exception:  # noqa: BLE001 - a torch without it: nothing to work around
        return []
    return ["--redirects", "2", "--tee", "2", "--log_dir", str(out / "torchrun_logs")] if broken else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (killed, not yet reaped by its parent) is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _standalone_on_a_free_port(torchrun_args: Sequence[str]) -> List[str]:
    """torch 1.13's --standalone rendezvous always takes port 29400, which two runs at once (the
    suite's two pytest workers) both want: there it becomes what it stands for, on a free port,
    as torch 2's --standalone does itself."""
    if "--standalone" not in torchrun_args or int(torch.__version__.split(".")[0]) >= 2:
        return list(torchrun_args)
    rest = [a for a in torchrun_args if a != "--standalone"]
    return ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"localhost:{free_port()}",
            "--rdzv_id", f"standalone-{os.getpid()}-{time.monotonic_ns()}", "--nnodes", "1", *rest]


class Launch:
    """The started processes of one run. Each one's output goes to a file: a pipe that nobody reads
    while the launcher waits on another process fills up and blocks its rank inside a collective."""

    def __init__(self, out: pathlib.Path, world: int, args: Sequence[str], *, torchrun: bool = False,
                 spawn: bool = False, worker: pathlib.Path = WORKER,
                 torchrun_args: Sequence[str] = TORCHRUN_STANDALONE, preload: Sequence[str] = (),
                 env: Optional[Dict[str, str]] = None) -> None:
        self.out = pathlib.Path(out).absolute()
        self.out.mkdir(parents=True, exist_ok=True)
        # An earlier launch's pid file in this folder may name a process that is not ours now.
        for stale in self.out.glob("pid_rank*"):
            stale.unlink()
        env, script = dict(_env(), **(env or {})), [str(worker), str(self.out)]
        if torchrun:
            torchrun_args = _standalone_on_a_free_port(torchrun_args)
            cmds = [[sys.executable, "-m", "torch.distributed.run", *torchrun_args, "--nproc_per_node",
                     str(world), *_torchrun_workaround(self.out), *script, *args]]
            envs = [env]
        elif spawn:
            cmds = [[sys.executable, *script, "--spawn", str(world), *args]]
            envs = [dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))]
        else:
            port = str(free_port())
            cmds = [[sys.executable, *script, *args] for _ in range(world)]
            envs = [dict(env, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
                    for r in range(world)]
        self.log_paths = [self.out / f"process{i}.log" for i in range(len(cmds))]
        self.started = time.time()
        self.procs: List[subprocess.Popen] = []
        for cmd, e, log in zip(cmds, envs, self.log_paths):
            # In OUT: a file a rank writes by a relative path lands in the run's folder.
            self.procs.append(start_python(cmd[1:], env=e, cwd=self.out, log=log, preload=preload,
                                           warm=not (torchrun or spawn)))
        self.exits: List[Optional[float]] = [None] * len(self.procs)  # time.time() of each exit

    def poll(self) -> bool:
        """Notes the time of every exit since the last poll; whether every process has ended."""
        for i, p in enumerate(self.procs):
            if self.exits[i] is None and p.poll() is not None:
                self.exits[i] = time.time()
        return all(e is not None for e in self.exits)

    def wait(self, timeout: float, *, poll_s: float = 0.05, stop_at_failure: bool = False) -> bool:
        """Waits at most `timeout` seconds for every process to end; past it kills them all (their
        exits stay None) and returns False. stop_at_failure: the first exit with an error status
        kills the others (False if one outlives SIGKILL)."""
        deadline = time.monotonic() + timeout
        while not self.poll():
            if stop_at_failure and any(p.returncode not in (None, 0) for p in self.procs):
                self.kill()
                return self.poll()
            if time.monotonic() > deadline:
                self.kill()
                return False
            time.sleep(poll_s)
        return True

    def kill(self) -> None:
        """Every process of the run: each started one's process group, and every worker by the pid
        it wrote at its start (a worker in a group of its own); then reaps them."""
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def worker_pids(self) -> List[int]:
        pids = []
        for f in self.out.glob("pid_rank*"):
            try:
                pids.append(int(f.read_text()))
            except ValueError:  # a rank between creating its file and writing its pid
                pass
        return pids

    def log(self, i: int) -> str:
        return self.log_paths[i].read_text(errors="replace")


def start_python(args: Sequence[str], *, env: Dict[str, str], cwd: pathlib.Path, log: pathlib.Path,
                 preload: Sequence[str] = (), warm: bool = True) -> Any:
    """subprocess.Popen([sys.executable, *args]) in a process group of its own, its stdout and
    stderr into `log`; forked from a warm server (a Popen-like zygote.ForkedRank) where
    FORK_FROM_WARM and `warm`. preload: what the script imports besides torch."""
    cmd = [sys.executable, *args]
    forked = WarmForks.start(cmd, env, str(cwd), str(log), preload) if FORK_FROM_WARM and warm else None
    if forked is not None:
        return forked
    with open(log, "w") as f:
        return subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, **OWN_GROUP)


def run_python(args: Sequence[str], *, env: Dict[str, str], cwd: Optional[pathlib.Path] = None,
               timeout: float, preload: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """subprocess.run([sys.executable, *args], capture_output=True, text=True) of a script, or of
    `-c CODE` (run from a file, sys.path[0] the folder as for -c), forked from a warm server where
    FORK_FROM_WARM (zygote.py). preload: what the script imports besides torch."""
    cmd, cwd = [sys.executable, *args], str(cwd or os.getcwd())
    with tempfile.TemporaryDirectory(prefix="run_python_") as scratch:
        more = {"stderr": os.path.join(scratch, "stderr")}
        forked_cmd = cmd
        if args[0] == "-c":
            script = os.path.join(scratch, "code.py")
            pathlib.Path(script).write_text(args[1])
            forked_cmd, more["path0"] = [sys.executable, script, *args[2:]], ""
        stdout = os.path.join(scratch, "stdout")
        proc = WarmForks.start(forked_cmd, env, cwd, stdout, preload, **more) if FORK_FROM_WARM else None
        if proc is None:
            return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, pathlib.Path(stdout).read_text(errors="replace"),
                                           pathlib.Path(more["stderr"]).read_text(errors="replace"))


def load_results(out: pathlib.Path, world: int) -> List[Optional[dict]]:
    """Each rank's result_rank<r>.json, None for a rank that left none."""
    paths = [pathlib.Path(out) / f"result_rank{r}.json" for r in range(world)]
    return [json.loads(p.read_text()) if p.exists() else None for p in paths]


def run_ranks(out: pathlib.Path, world: int, args: Sequence[str], *, timeout: float = 60.0,
              torchrun: bool = False, read_results: bool = True, spawn: bool = False,
              worker: pathlib.Path = WORKER, torchrun_args: Sequence[str] = TORCHRUN_STANDALONE,
              preload: Sequence[str] = (), env: Optional[Dict[str, str]] = None) -> Run:
    """Runs `world` ranks of rank_worker.py (or `worker`, a script with the same command line and
    the same files) on OUT with `args` and waits at most `timeout` seconds (each try) for every
    process to end, else kills them all and fails the test (a hang). torchrun_args: torchrun's
    options before --nproc_per_node (a static rendezvous, --max_restarts). preload: the modules
    the worker imports besides torch, for a warm fork (zygote.py); env: variables of every rank."""
    for attempt in range(3):
        launch = Launch(out, world, args, torchrun=torchrun, spawn=spawn, worker=worker,
                        torchrun_args=torchrun_args, preload=preload, env=env)
        ended = launch.wait(timeout, stop_at_failure=True)
        logs = [launch.log(i) for i in range(len(launch.procs))]
        if not ended:
            shown = "\n".join(f"--- process {i}:\n{text[-4000:]}" for i, text in enumerate(logs))
            pytest.fail(f"hung: not every process had ended after {timeout:.0f} s (all killed)\n{shown}")
        # The free port can be taken between our probe and the master binding it: only then is
        # another try worth it (torchrun --standalone picks its own).
        failed = any(p.returncode != 0 for p in launch.procs)
        if torchrun or not (failed and any(PORT_TAKEN in text.lower() for text in logs)):
            break
    # Nothing of the run may outlive it (torchrun's workers, a worker's leftover children).
    leftovers = [pid for pid in launch.worker_pids() if _alive(pid)]
    if leftovers:
        launch.kill()
        pytest.fail(f"worker processes {leftovers} outlived the run (killed)")
    run = Run(pathlib.Path(out), world, [p.returncode for p in launch.procs], logs, ended_at=max(launch.exits),
              seconds=max(launch.exits) - launch.started)
    if read_results:
        for r, result in enumerate(load_results(out, world)):
            assert result is not None, f"rank {r} left no result:\n{run.context()}"
            run.results.append(result)
    return run


def clean_bare_run(out: pathlib.Path, world: int, args: Sequence[str], timeout: float) -> Run:
    """The run without the tool (--bare): the reference of a clean run. It must finish on every
    rank, raising nothing."""
    run = run_ranks(out, world, ["--bare", *args], timeout=timeout)
    assert run.returncodes == [0] * world, run.context()
    assert all(r["raised"] is None and r["finished"] for r in run.results), run.context()
    return run


def assert_states_equal(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor], what: str) -> None:
    assert sorted(a) == sorted(b), what
    unequal = [k for k in a if not (a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]))]
    assert not unequal, f"{what}: not bit-identical: {unequal}"


def assert_finite_state(state: Dict[str, torch.Tensor], what: str) -> None:
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    assert not bad, f"{what}: NaN/inf in {bad}"


def error_name(rec: Optional[dict]) -> str:
    return "nothing" if rec is None else f"{rec['type']}: {rec['message'][:300]}"
