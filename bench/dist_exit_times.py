"""How long a DistributedDataParallel job (gloo, CPU, N ranks on 127.0.0.1) takes to end when one
rank goes, with the tool (overflow_check, L1: tests/python/rank_worker.py's defaults) and without it:

  (a) store host killed: the ranks train the tiny DDP model of rank_worker.py for many steps; about 2 s
      after every rank is past step 20, the parent SIGKILLs rank 0 (it hosts the TCPStore). Timed:
      from the kill until the last surviving rank's process has exited (each ends on the gloo
      error, which the worker records, and re-raises).
  (b) an op overflow on rank 0: with the tool, an fp16 multiplication in rank 0's forward
      overflows at step 5 and the tool stops it; without the tool rank 0 raises a plain
      RuntimeError at the same point. Timed: from the moment rank 0 raises (the time.time() the
      worker records when the exception reaches it) until the last rank's process has exited;
      also from the fault (rank 0 entering the faulty step).

Nobody catches anything (rank_worker.py --reraise all): each process ends as an uncaught error
would end it. Prints a table: median and range, in seconds.

    OMP_NUM_THREADS=1 python bench/dist_exit_times.py --torch-label 1.13 [--ranks 4] [--repeats 3]

The package is MSPROBE_CPP_PACKAGE_ROOT's (like the tests), else python/ of this checkout.
"""
import argparse
import json
import os
import pathlib
import signal
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
from dist_runs import Launch, load_results  # noqa: E402

LIMIT_S = 180.0  # per run: past it every process is killed and the run counts as "> LIMIT_S"
READY_STEP = 20
POLL_S = 0.002  # how often the processes' exits are looked for: the resolution of the figures


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
        launch = Launch(out, ranks, tool_args(tool) + ["--steps", "1000000", "--ready-step", str(READY_STEP),
                                                       "--no-save", "--reraise", "all"])
        deadline = time.monotonic() + LIMIT_S
        while not all((out / f"ready_rank{r}").exists() for r in range(ranks)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in launch.procs):
                launch.kill()
                raise SystemExit("a rank failed before training: " + launch.log(0)[-2000:])
            time.sleep(0.01)
        time.sleep(2.0)
        os.kill(launch.procs[0].pid, signal.SIGKILL)
        killed_at = time.time()
        launch.wait(LIMIT_S, poll_s=POLL_S)
        exits = launch.exits[1:]
        found = load_results(out, ranks)
        seconds = None if any(e is None for e in exits) else max(exits) - killed_at
        return {"seconds": seconds, "endings": [ending(r) for r in found[1:]]}


def op_overflow(ranks: int, tool: bool) -> Dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp)
        mode = "fp16_op" if tool else "plain_raise"
        launch = Launch(out, ranks, tool_args(tool) + ["--mode", mode, "--bad-rank", "0", "--bad-step", "5",
                                                       "--steps", "1000000", "--no-save", "--reraise", "all"])
        launch.wait(LIMIT_S, poll_s=POLL_S)
        exits = launch.exits
        found = load_results(out, ranks)
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
    ap.add_argument("--cases", default="ab", help="which scenarios: a, b or ab (default)")
    args = ap.parse_args()
    import torch
    label = args.torch_label or torch.__version__
    figures: Dict[str, List[dict]] = {}
    for _ in range(args.repeats):  # interleaved: a machine's slow moment spreads over every case
        for tool in (False, True):
            if "a" in args.cases:
                figures.setdefault(f"a/{tool}", []).append(store_host_killed(args.ranks, tool))
            if "b" in args.cases:
                figures.setdefault(f"b/{tool}", []).append(op_overflow(args.ranks, tool))
    print(f"torch {label} ({torch.__version__}), {args.ranks} gloo ranks on CPU, {args.repeats} repeats; "
          f"seconds, median [min .. max]")
    print(f"{'scenario':56s} {'without the tool':28s} {'with the tool (overflow_check L1)':28s}")
    rows = [("(a) store host (rank 0) SIGKILLed: kill -> last exit", "a", "seconds"),
            ("(b) op overflow on rank 0: raise -> last exit", "b", "seconds"),
            ("(b) op overflow on rank 0: fault -> last exit", "b", "from_fault")]
    for name, key, field in rows:
        if key not in args.cases:
            continue
        cells = [summary([f[field] for f in figures[f"{key}/{tool}"]]) for tool in (False, True)]
        print(f"{name:56s} {cells[0]:28s} {cells[1]:28s}")
    print("how the ranks ended (first repeat):")
    for key, what in (("a", "(a) survivors"), ("b", "(b) every rank")):
        if key not in args.cases:
            continue
        for tool in (False, True):
            print(f"  {what}, {'with' if tool else 'without'} the tool: {figures[f'{key}/{tool}'][0]['endings']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "label": label, "ranks": args.ranks, "figures": figures}, f,
                      indent=1)


if __name__ == "__main__":
    main()
