"""What the coordinated stop costs while nothing is wrong: 3 gloo ranks on 127.0.0.1 train the
small model of tests/python/rank_worker.py (--model small, gradients averaged by all_reduce: the run
of test_peer_stop.py), uninstrumented ("bare"), under overflow_check without the coordination
("uncoordinated"), and with it ("coordinated"), in interleaved rounds; prints the median seconds
per step (slowest rank) and the ratios.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peer_stop_overhead.py [--steps 40] [--rounds 3]

The package is MSPROBE_CPP_PACKAGE_ROOT's (like the tests), else python/ of this checkout.
"""
import argparse
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
from dist_runs import PEER_RUN, run_ranks  # noqa: E402

WORLD = 3
TIMEOUT_S = 600.0
MODES = {"bare": ["--bare"], "uncoordinated": ["--no-peer-stop", "--action", "continue"],
         "coordinated": ["--action", "continue"]}


def run(mode: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        ranks = run_ranks(pathlib.Path(out), WORLD, PEER_RUN + MODES[mode] + ["--steps", str(steps)],
                          timeout=TIMEOUT_S)
        if ranks.returncodes != [0] * WORLD or not all(r["finished"] for r in ranks.results):
            raise SystemExit(f"a rank of mode {mode} failed\n{ranks.context()}")
        return max(r["seconds_per_step"] for r in ranks.results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times = {name: [] for name in MODES}
    for _ in range(args.rounds):
        for name in MODES:
            times[name].append(run(name, args.steps))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:14s} median {1e3 * med[name]:7.2f} ms/step  (rounds: "
              f"{', '.join(f'{1e3 * x:.2f}' for x in t)})")
    print(f"coordinated / uncoordinated: {med['coordinated'] / med['uncoordinated']:.3f}; "
          f"uncoordinated / bare: {med['uncoordinated'] / med['bare']:.3f}")


if __name__ == "__main__":
    main()
