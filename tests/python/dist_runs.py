"""What test_ddp.py and test_fsdp2.py share: starting the ranks of ddp_worker.py / fsdp_worker.py
(one process per rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, one torchrun, or one launcher
that starts them with torch.multiprocessing.spawn: ddp_spawn.py), a hard
timeout after which every process is killed and the test fails, and reading back each rank's
result_rank<r>.json, state_rank<r>.pt and dump folders."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import pytest
import torch

from gloo import free_port
from testenv import PACKAGE_ROOT, TESTS


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
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               MSPROBE_CPP_PACKAGE_ROOT=str(PACKAGE_ROOT),
               PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), str(TESTS)]))
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


def _kill(procs: Sequence[subprocess.Popen], out: pathlib.Path) -> None:
    """Every process of the run: each started one's process group (torchrun's workers with it),
    and every worker by the pid it wrote at its start (a worker in a group of its own)."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid_file in out.glob("pid_rank*"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


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


def run_ranks(out: pathlib.Path, world: int, args: Sequence[str], *, worker: str = "ddp_worker.py",
              timeout: float = 60.0, torchrun: bool = False, read_results: bool = True,
              spawn: bool = False) -> Run:
    """Starts `world` ranks of `worker` on OUT with `args`; waits at most `timeout` seconds for
    every process to end, else kills them all and fails the test (a hang). spawn: one ddp_spawn.py
    launcher that runs `world` ranks of ddp_worker.py under torch.multiprocessing.spawn."""
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    script = str(TESTS / worker)
    if torchrun:
        cmds = [[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
                 *_torchrun_workaround(out), script, str(out), *args]]
        envs = [env]
    elif spawn:
        assert worker == "ddp_worker.py", "ddp_spawn.py runs ddp_worker.py's ranks"
        cmds = [[sys.executable, str(TESTS / "ddp_spawn.py"), str(out), str(world), *args]]
        envs = [dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))]
    else:
        port = str(free_port())
        cmds = [[sys.executable, script, str(out), *args] for _ in range(world)]
        envs = [dict(env, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
                for r in range(world)]
    started = time.monotonic()
    procs = [subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for cmd, e in zip(cmds, envs)]
    deadline = started + timeout
    logs: List[str] = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=max(0.5, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        _kill(procs, out)
        shown = []
        for i, p in enumerate(procs):
            try:
                text = p.communicate(timeout=10)[0] or ""
            except subprocess.TimeoutExpired:
                text = "(no output: it did not end after SIGKILL)"
            shown.append(f"--- process {i}:\n{text[-4000:]}")
        pytest.fail(f"hung: not every process had ended after {timeout:.0f} s (all killed)\n" + "\n".join(shown))
    ended_at = time.time()
    seconds = time.monotonic() - started
    # Nothing of the run may outlive it (torchrun's workers, a worker's leftover children).
    leftovers = [int(f.read_text()) for f in out.glob("pid_rank*") if f.read_text().strip()]
    leftovers = [pid for pid in leftovers if _alive(pid)]
    if leftovers:
        _kill(procs, out)
        pytest.fail(f"worker processes {leftovers} outlived the run (killed)")
    run = Run(out, world, [p.returncode for p in procs], logs, ended_at=ended_at, seconds=seconds)
    if read_results:
        for r in range(world):
            path = out / f"result_rank{r}.json"
            assert path.exists(), f"rank {r} left no result:\n{run.context()}"
            run.results.append(json.loads(path.read_text()))
    return run


def clean_bare_run(out: pathlib.Path, world: int, args: Sequence[str], timeout: float, **kw) -> Run:
    """The run without the tool (--bare): the reference of a clean run. It must finish on every
    rank, raising nothing."""
    run = run_ranks(out, world, ["--bare", *args], timeout=timeout, **kw)
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
