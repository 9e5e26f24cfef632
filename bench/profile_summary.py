"""Reads a py-spy raw profile (`py-spy record --native -f raw`) of bench/profile_step.py and says
where the training steps' time goes: the share of the samples inside the steps whose stack holds
each of a list of frames (inclusive), and the frames that most samples end in (self).

    python3 bench/profile_summary.py gpt2.txt [--top 40] [--match 'msprobe::' ...]

With --breakdown it sorts every sample into one part of the tool's cost (PARTS; the first that
claims it) and, given the step's time measured without the profiler (--step-ms) and the calls a
step records (--records), prints each part in ms a step and us a record. Given the same model's
profile without the tool (--baseline), the op-and-model part is split into what the step costs
anyway and what it grew by (the interpreter's slower module calls, libtorch's hook handling).
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


SCAN = re.compile(r"msprobe::.*(scan_|fold<|cpu_all_finite|all_finite_bits|cpu_summary|summarize_cpu)")
TOOL = re.compile(r"msprobe::|msprobe_cpp/")


def part_of(frames: List[str]) -> str:
    """The part of the tool's cost a sample belongs to (see PARTS)."""
    tool = [i for i, f in enumerate(frames) if TOOL.search(f)]
    if not tool:
        leaf_py = [f for f in frames if re.search(r"\.py(:\d+)?\)$", f)]
        if leaf_py and re.search(r"Module\._call_impl|_wrapped_call_impl", leaf_py[-1]):
            return "module call machinery"
        return "op and model code"
    inner = frames[tool[-1]]
    if "ApiHook::call_original" in inner:
        return "op and model code"
    if any(SCAN.search(f) for f in frames[tool[0]:]):
        return "statistics scan"
    first = frames[tool[0]]
    if "hook_call" in first or "ApiHook" in first:
        return "API hook: entries, stack, judge, store"
    if "BackwardRecorder" in first or "backward" in first.lower():
        return "backward recorder"
    if "gradient_guard" in first or "optimizer" in first.lower():
        return "optimizer-step looks"
    if re.search(r"PrecisionDebugger\.(start|stop|step)", first):
        return "start/stop/step"
    if "dispatcher" in first or "module_hooks" in first:
        return "module hooks (C++)"
    return "other tool"


PARTS = ["op and model code", "module call machinery", "module hooks (C++)", "statistics scan",
         "API hook: entries, stack, judge, store", "backward recorder", "optimizer-step looks",
         "start/stop/step", "other tool"]


def breakdown(args: argparse.Namespace) -> int:
    def shares(path: str) -> Dict[str, float]:
        data = samples(path, args.within)
        total = sum(c for _, c in data)
        out: Dict[str, float] = collections.Counter()
        for frames, c in data:
            out[part_of(frames)] += c / total
        return out
    mine = shares(args.profile)
    base = shares(args.baseline) if args.baseline else None
    step_ms = args.step_ms
    print(f"{'part':<42}{'share':>7}{'ms/step':>9}{'us/record':>11}")
    rows = [(p, mine.get(p, 0.0) * step_ms) for p in PARTS]
    if base is not None:
        # What the baseline spends there anyway, and what each grew by under the tool.
        ops_then = args.base_ms * base.get("op and model code", 0.0)
        calls_then = args.base_ms * base.get("module call machinery", 0.0)
        ops, calls = dict(rows)["op and model code"], dict(rows)["module call machinery"]
        rows = [r for r in rows if r[0] not in ("op and model code", "module call machinery")]
        rows = [("ops, model code, module calls: as without", ops_then + calls_then),
                ("growth: ops and model code", ops - ops_then),
                ("growth: Module._call_impl with hooks", calls - calls_then)] + rows
    for name, ms in rows:
        per = f"{1e3 * ms / args.records:11.2f}" if args.records else ""
        print(f"{name:<42}{100 * ms / step_ms:6.1f}%{ms:9.3f}{per}")
    if base is not None:
        added = step_ms - args.base_ms
        print(f"{'added by the tool':<42}{100 * added / step_ms:6.1f}%{added:9.3f}"
              + (f"{1e3 * added / args.records:11.2f}" if args.records else ""))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--within", default="measured (profile_step.py", help="the frame that starts a step")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--match", action="append", default=[], help="extra regex for the inclusive list")
    ap.add_argument("--breakdown", action="store_true", help="the parts of the tool's cost (PARTS)")
    ap.add_argument("--step-ms", type=float, default=1.0, help="the step's time without the profiler")
    ap.add_argument("--records", type=int, default=0, help="the calls a step records")
    ap.add_argument("--baseline", help="a profile of the same steps without the tool")
    ap.add_argument("--base-ms", type=float, default=1.0, help="the baseline step's time without the profiler")
    args = ap.parse_args()
    if args.breakdown:
        return breakdown(args)
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
