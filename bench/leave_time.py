"""How long `dist.destroy_process_group()` takes at the end of a clean run, with the tool
(overflow_check, its peer-stop watcher: rank 0 tells every watcher it is leaving and waits for
them, docs/debugger.md "The store's host leaving") and without it. N gloo ranks on 127.0.0.1
train a Linear(4, 4) for 3 steps, gradients averaged by all_reduce, meet at a barrier, and time
their destroy_process_group(). Also says whether any rank printed c10d's TCPStore warning.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build-torch2/pkg MSPROBE_CPP_PACKAGE_ROOT=build-torch2/pkg \\
        build-torch2/venv/bin/python bench/leave_time.py [--ranks 3] [--repeats 3]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "python"))
from gloo import free_port  # noqa: E402

RANK = r"""
import json, os, sys, tempfile, time
import torch, torch.distributed as dist
rank, world, tool = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "tool"
torch.manual_seed(rank)
dist.init_process_group("gloo", rank=rank, world_size=world)
model = torch.nn.Linear(4, 4)
if tool:
    import msprobe_cpp
    out = tempfile.mkdtemp()
    config = os.path.join(out, "config.json")
    with open(config, "w") as f:
        json.dump({"task": "overflow_check", "level": "L1", "dump_path": out}, f)
    debugger = msprobe_cpp.PrecisionDebugger(config_path=config)
for step in range(3):
    if tool:
        debugger.start(model)
    model(torch.randn(2, 4)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    if tool:
        debugger.stop()
        debugger.step()
dist.barrier()
began = time.perf_counter()
dist.destroy_process_group()
print("LEFT", rank, (time.perf_counter() - began) * 1000, flush=True)
"""


def run(world: int, tool: bool) -> tuple:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "rank.py"
        script.write_text(RANK)
        procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), "tool" if tool else "bare"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                 for r in range(world)]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    times = {}
    for text in outputs:
        for line in text.splitlines():
            if line.startswith("LEFT "):
                _, rank, ms = line.split()
                times[int(rank)] = float(ms)
    warned = any("recvValueWithTimeout" in text or "TCPStore" in text for text in outputs)
    return times, warned


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch
    rows = {"bare": [], "tool": []}
    warnings = {"bare": 0, "tool": 0}
    for _ in range(args.repeats):
        for mode in ("bare", "tool"):
            times, warned = run(args.ranks, mode == "tool")
            rows[mode].append(times)
            warnings[mode] += warned
    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {args.ranks} gloo ranks, "
          f"{args.repeats} runs each; destroy_process_group() in ms, median (range) over the runs")
    print("| rank | bare | with the tool |")
    print("|---|---|---|")
    for rank in range(args.ranks):
        cells = []
        for mode in ("bare", "tool"):
            values = [t[rank] for t in rows[mode] if rank in t]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "-")
        print(f"| {rank} | {cells[0]} | {cells[1]} |")
    print(f"runs with a c10d TCPStore warning: bare {warnings['bare']}, with the tool {warnings['tool']}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
