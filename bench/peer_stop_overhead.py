"""What the coordinated stop costs while nothing is wrong: 3 gloo ranks on 127.0.0.1 train the
small model of tests/python/peer_worker.py (gradients averaged by all_reduce), uninstrumented
("bare"), under overflow_check without the coordination ("uncoordinated"), and with it
("coordinated"), in interleaved rounds; prints the median seconds per step (slowest rank) and the
ratios.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peer_stop_overhead.py [--steps 40] [--rounds 3]
"""
import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "python" / "peer_worker.py"
WORLD = 3
MODES = {"bare": "bare", "uncoordinated": "uncoordinated", "coordinated": "continue"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(WORKER.parent)]))
        procs = [subprocess.Popen([sys.executable, str(WORKER), out, "-1", "-1", mode, str(steps)],
                                  env=dict(env, RANK=str(r)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for r in range(WORLD)]
        for p in procs:
            if p.wait(timeout=600) != 0:
                raise SystemExit(f"a rank of mode {mode} failed")
        results = [json.loads((pathlib.Path(out) / f"result_rank{r}.json").read_text()) for r in range(WORLD)]
        return max(r["seconds_per_step"] for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times = {name: [] for name in MODES}
    for _ in range(args.rounds):
        for name, mode in MODES.items():
            times[name].append(run(mode, args.steps))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:14s} median {1e3 * med[name]:7.2f} ms/step  (rounds: "
              f"{', '.join(f'{1e3 * x:.2f}' for x in t)})")
    print(f"coordinated / uncoordinated: {med['coordinated'] / med['uncoordinated']:.3f}; "
          f"uncoordinated / bare: {med['uncoordinated'] / med['bare']:.3f}")


if __name__ == "__main__":
    main()
