"""Reads a py-spy raw profile (`py-spy record --native -f raw`) of bench/profile_step.py and says
where the training steps' time goes: the share of the samples inside the steps whose stack holds
each of a list of frames (inclusive), and the frames that most samples end in (self).

    python3 bench/profile_summary.py gpt2.txt [--top 40] [--match 'msprobe::' ...]
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
from typing import Dict, List, Tuple

# What each share means; a sample counts towards every pattern that one of its frames matches.
DEFAULT_MATCHES = [
    ("tool C++ (msprobe::)", r"msprobe::"),
    ("tool Python (msprobe_cpp/)", r"msprobe_cpp/"),
    ("Module._call_impl", r"^_call_impl|Module\._call_impl"),
    ("module hooks' Python dispatch", r"_call_impl \(torch/nn/modules/module.py:1[0-9]{3}\)"),
    ("autograd engine (backward)", r"torch::autograd::Engine"),
    ("optimizer step", r"^step \(torch/optim/|adamw|_single_tensor_adam"),
]


def samples(path: str, within: str) -> List[Tuple[List[str], int]]:
    out = []
    for line in open(path, encoding="utf-8", errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")
        # The frames from the step function on: setup and import time are left out.
        for i, f in enumerate(frames):
            if f.startswith(within):
                out.append((frames[i:], int(count)))
                break
    return out


def frame_name(frame: str) -> str:
    """A frame without its line number, so that a function's lines add up."""
    return re.sub(r":\d+\)$", ")", frame)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--within", default="measured (profile_step.py", help="the frame that starts a step")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--match", action="append", default=[], help="extra regex for the inclusive list")
    args = ap.parse_args()
    data = samples(args.profile, args.within)
    total = sum(c for _, c in data)
    if not total:
        print("no sample inside a step", file=sys.stderr)
        return 1
    print(f"{total} samples inside the steps")
    matches = DEFAULT_MATCHES + [(m, m) for m in args.match]
    for label, pattern in matches:
        rx = re.compile(pattern)
        n = sum(c for frames, c in data if any(rx.search(f) for f in frames))
        print(f"  {100 * n / total:5.1f} %  {label}")
    leaf: Dict[str, int] = collections.Counter()
    incl: Dict[str, int] = collections.Counter()
    for frames, c in data:
        leaf[frame_name(frames[-1])] += c
        for f in set(frame_name(f) for f in frames):
            incl[f] += c
    print(f"\nself (the frame a sample ends in), top {args.top}:")
    for f, c in leaf.most_common(args.top):
        print(f"  {100 * c / total:5.1f} %  {f[:150]}")
    print(f"\ninclusive, top {args.top}:")
    for f, c in incl.most_common(args.top):
        print(f"  {100 * c / total:5.1f} %  {f[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
