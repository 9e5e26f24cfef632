"""`python -m msprobe_cpp check ...` and the `msprobe-cpp` console command of an installed package:
the command line of the standalone msprobe-cpp binary, run by the same code linked into the
extension, so both print the same bytes and exit with the same status. `replay` replays a dump's
flagged calls with torch (replay_dump.py); the standalone binary hands it to this module."""
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["replay"]:  # needs torch: Python's, not the C++ command line's
        from msprobe_cpp.replay_dump import main as replay_main
        return replay_main(args[1:])
    from msprobe_cpp import _C

    sys.stdout.flush()  # the C++ side writes to the same file descriptors
    return _C._cli(args)


if __name__ == "__main__":
    sys.exit(main())
