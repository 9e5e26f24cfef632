#!/usr/bin/python3
"""Check rules/support_wrap_ops.yaml against the installed PyTorch.

Run with Debian's interpreter (the one python3-torch belongs to):

    /usr/bin/python3 tools/list_wrap_ops.py              # verify the list, print counts
    /usr/bin/python3 tools/list_wrap_ops.py --candidates # also print callables the list leaves out

Checks that the file has exactly the five sections (torch, tensor, functional, distributed, vf),
each a sorted list of unique plain names, and that every listed name resolves to a callable
attribute of its owner in the running torch. A name the running torch lacks is allowed only if it
appears in KNOWN_NEWER below (names added by PyTorch 2.x; the runtime loader skips missing
names). Names from older releases that 2.x removed are fine as long as this torch has them.
Exit status 1 on any problem.
"""
import argparse
import os
import sys
import types
import warnings

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_YAML = os.path.join(ROOT, "rules", "support_wrap_ops.yaml")
SECTIONS = ["torch", "tensor", "functional", "distributed", "vf"]

# Names listed on purpose although PyTorch 1.13 does not have them (added in 2.x).
KNOWN_NEWER = {
    "torch": {
        "_foreach_clamp_max", "_foreach_clamp_max_", "_foreach_clamp_min", "_foreach_clamp_min_",
        "_foreach_copy_", "_foreach_lerp", "_foreach_lerp_", "_foreach_max", "_foreach_pow",
        "_foreach_pow_", "_foreach_rsqrt", "_foreach_rsqrt_", "_foreach_sign", "_foreach_sign_",
        "empty_permuted", "nonzero_static", "rms_norm", "unravel_index",
    },
    "tensor": {"nonzero_static"},
    "functional": {"lp_pool3d", "rms_norm", "scaled_dot_product_attention"},
    "distributed": set(),
    "vf": set(),
}
# Names listed for 1.13 that later releases removed (the loader skips them there, as any name the
# running torch lacks): absent is fine under a 2.x torch.
KNOWN_REMOVED = {
    "distributed": {"all_gather_multigpu", "all_reduce_multigpu", "broadcast_multigpu", "reduce_multigpu",
                    "reduce_scatter_multigpu"},
}


def owners():
    import torch
    import torch.nn.functional as F
    import torch.distributed as dist
    return {
        "torch": torch,
        "tensor": torch.Tensor,
        "functional": F,
        "distributed": dist,
        "vf": torch._VF,
    }


def candidates(section, owner, listed):
    """Public callables of owner that the list does not name (for review, not an error)."""
    out = []
    for name in dir(owner):
        if name in listed:
            continue
        if name.startswith("_") and not (section == "torch" and name.startswith("_foreach_")):
            if not (section == "tensor" and name.startswith("__") and name.endswith("__")):
                continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. the deprecated torch.distributed.reduce_op
            try:
                obj = getattr(owner, name)
            except Exception:
                continue
            if isinstance(obj, (type, types.ModuleType)) or not callable(obj):
                continue
        out.append(name)
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("yaml", nargs="?", default=DEFAULT_YAML)
    ap.add_argument("--candidates", action="store_true",
                    help="print callables of each owner that the list leaves out")
    args = ap.parse_args()

    import torch
    with open(args.yaml) as f:
        data = yaml.safe_load(f)

    problems = []
    if not isinstance(data, dict) or list(data.keys()) != SECTIONS:
        keys = list(data.keys()) if isinstance(data, dict) else type(data).__name__
        problems.append(f"top-level keys must be exactly {SECTIONS} in that order, got {keys}")
        data = data if isinstance(data, dict) else {}

    print(f"torch {torch.__version__}; checking {os.path.relpath(args.yaml, ROOT)}")
    own = owners()
    total = 0
    for section in SECTIONS:
        names = data.get(section) or []
        if not all(isinstance(n, str) and n.isidentifier() for n in names):
            problems.append(f"{section}: every entry must be a plain name")
            names = [n for n in names if isinstance(n, str)]
        if names != sorted(names):
            problems.append(f"{section}: not sorted")
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            problems.append(f"{section}: duplicates {dups}")
        owner = own[section]
        present, newer, unknown, not_callable = [], [], [], []
        for name in names:
            try:
                obj = getattr(owner, name)
            except Exception:
                known = name in KNOWN_NEWER[section] or name in KNOWN_REMOVED.get(section, set())
                (newer if known else unknown).append(name)
                continue
            (present if callable(obj) else not_callable).append(name)
        total += len(names)
        print(f"{section:12s} listed {len(names):4d}  present {len(present):4d}  "
              f"missing-but-known {len(newer):3d}")
        if newer:
            print(f"    names known to be added or removed by 2.x, absent here: {' '.join(newer)}")
        if unknown:
            problems.append(f"{section}: absent, and not known as added or removed by 2.x: {unknown}")
        if not_callable:
            problems.append(f"{section}: not callable: {not_callable}")
        if args.candidates:
            if section == "vf":
                print("    (torch._VF forwards every lookup; it cannot be enumerated)")
            else:
                left = candidates(section, owner, set(names))
                print(f"    not listed ({len(left)}): {' '.join(left)}")
    print(f"total listed {total}")

    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
