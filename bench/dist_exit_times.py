"""How long a DistributedDataParallel job (gloo, CPU, N ranks on 127.0.0.1) takes to end when one
rank goes, with the tool (overflow_check, L1, as in tests/python/ddp_worker.py) and without it:

  (a) store host killed: the ranks train the tiny model of ddp_worker.py for many steps; about 2 s
      after every rank is past step 20, the parent SIGKILLs rank 0 (it hosts the TCPStore). Timed:
      from the kill until the last surviving rank's process has exited (each ends on the gloo
      error, which the worker records, and re-raises).
  (b) an op overflow on rank 0: with the tool, an fp16 multiplication in rank 0's forward
      overflows at step 5 and the tool stops it; without the tool rank 0 raises a plain
      RuntimeError at the same point. Timed: from the moment rank 0 raises (the time.time() the
      worker records when the exception reaches it) until the last rank's process has exited;
      also from the fault (rank 0 entering the faulty step).

Nobody catches anything (ddp_worker.py --no-catch-all): each process ends as an uncaught error
would end it. Prints a table: median and range, in seconds.

    OMP_NUM_THREADS=1 python bench/dist_exit_times.py --torch-label 1.13 [--ranks 4] [--repeats 3]

The package is MSPROBE_CPP_PACKAGE_ROOT's (like the tests), else python/ of this checkout.
"""
import argparse
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "python"
WORKER = TESTS / "ddp_worker.py"
PACKAGE_ROOT = pathlib.Path(os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", ROOT / "python"))
LIMIT_S = 180.0  # per run: past it every process is killed and the run counts as "> LIMIT_S"
READY_STEP = 20


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(out: pathlib.Path, ranks: int, args: List[str]) -> List[subprocess.Popen]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", MSPROBE_CPP_PACKAGE_ROOT=str(PACKAGE_ROOT),
               PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), str(TESTS)]))
    procs = []
    for r in range(ranks):
        log = open(out / f"log_rank{r}.txt", "w")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(out), *args], env=dict(env, RANK=str(r)),
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    return procs


def kill_all(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        p.wait()


def wait_exits(procs: List[subprocess.Popen], deadline: float) -> List[Optional[float]]:
    """time.time() at which each process was seen to have exited (polled every 2 ms); None for
    one still running at the deadline (then all are killed)."""
    exits: List[Optional[float]] = [None] * len(procs)
    while time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if exits[i] is None and p.poll() is not None:
                exits[i] = time.time()
        if all(e is not None for e in exits):
            return exits
        time.sleep(0.002)
    kill_all(procs)
    return exits


def results(out: pathlib.Path, ranks: int) -> List[Optional[dict]]:
    found = []
    for r in range(ranks):
        path = out / f"result_rank{r}.json"
        found.append(json.loads(path.read_text()) if path.exists() else None)
    return found


def ending(res: Optional[dict]) -> str:
    if res is None:
        return "no result"
    raised = res.get("raised")
    if raised is None:
        return "finished"
    return f"{raised['type']}: {raised['message'].splitlines()[0][:70]}"


def tool_args(tool: bool) -> List[str]:
    return ["--task", "overflow_check", "--level", "L1"] if tool else ["--bare"]


def store_host_killed(ranks: int, tool: bool) -> Dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp)
        procs = start(out, ranks, tool_args(tool) + ["--steps", "1000000", "--ready-step", str(READY_STEP),
                                                     "--no-save", "--no-catch-all"])
        deadline = time.monotonic() + LIMIT_S
        while not all((out / f"ready_rank{r}").exists() for r in range(ranks)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                kill_all(procs)
                raise SystemExit("a rank failed before training: " + (out / "log_rank0.txt").read_text()[-2000:])
            time.sleep(0.01)
        time.sleep(2.0)
        os.kill(procs[0].pid, signal.SIGKILL)
        killed_at = time.time()
        exits = wait_exits(procs[1:], time.monotonic() + LIMIT_S)
        procs[0].wait()
        found = results(out, ranks)
        seconds = None if any(e is None for e in exits) else max(exits) - killed_at
        return {"seconds": seconds, "endings": [ending(r) for r in found[1:]]}


def op_overflow(ranks: int, tool: bool) -> Dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp)
        mode = "fp16_op" if tool else "plain_raise"
        procs = start(out, ranks, tool_args(tool) + ["--mode", mode, "--bad-rank", "0", "--bad-step", "5",
                                                     "--steps", "1000000", "--no-save", "--no-catch-all"])
        exits = wait_exits(procs, time.monotonic() + LIMIT_S)
        found = results(out, ranks)
        bad = found[0] or {}
        raised_at = (bad.get("raised") or {}).get("at")
        fault_at = bad.get("fault_at")
        done = not any(e is None for e in exits) and raised_at is not None
        return {"seconds": max(exits) - raised_at if done else None,
                "from_fault": max(exits) - fault_at if done and fault_at else None,
                "endings": [ending(r) for r in found]}


def summary(values: List[Optional[float]]) -> str:
    if any(v is None for v in values):
        done = [v for v in values if v is not None]
        return f"{sum(v is None for v in values)} of {len(values)} past {LIMIT_S:.0f} s" + \
            (f"; others {', '.join(f'{v:.2f}' for v in done)}" if done else "")
    return f"{statistics.median(values):6.2f}  [{min(values):.2f} .. {max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-label", default=None, help="the torch's name in the table (default: its version)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()
    import torch
    label = args.torch_label or torch.__version__
    figures: Dict[str, List[dict]] = {}
    for _ in range(args.repeats):  # interleaved: a machine's slow moment spreads over every case
        for tool in (False, True):
            figures.setdefault(f"a/{tool}", []).append(store_host_killed(args.ranks, tool))
            figures.setdefault(f"b/{tool}", []).append(op_overflow(args.ranks, tool))
    print(f"torch {label} ({torch.__version__}), {args.ranks} gloo ranks on CPU, {args.repeats} repeats; "
          f"seconds, median [min .. max]")
    print(f"{'scenario':56s} {'without the tool':28s} {'with the tool (overflow_check L1)':28s}")
    rows = [("(a) store host (rank 0) SIGKILLed: kill -> last exit", "a", "seconds"),
            ("(b) op overflow on rank 0: raise -> last exit", "b", "seconds"),
            ("(b) op overflow on rank 0: fault -> last exit", "b", "from_fault")]
    for name, key, field in rows:
        cells = [summary([f[field] for f in figures[f"{key}/{tool}"]]) for tool in (False, True)]
        print(f"{name:56s} {cells[0]:28s} {cells[1]:28s}")
    print("how the ranks ended (first repeat):")
    for key, what in (("a", "(a) survivors"), ("b", "(b) every rank")):
        for tool in (False, True):
            print(f"  {what}, {'with' if tool else 'without'} the tool: {figures[f'{key}/{tool}'][0]['endings']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "label": label, "ranks": args.ranks, "figures": figures}, f,
                      indent=1)


if __name__ == "__main__":
    main()
