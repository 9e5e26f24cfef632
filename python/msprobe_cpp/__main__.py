"""`python -m msprobe_cpp check ...` and the `msprobe-cpp` console command of an installed package:
the command line of the standalone msprobe-cpp binary, run by the same code linked into the
extension, so both print the same bytes and exit with the same status."""
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    from msprobe_cpp import _C

    sys.stdout.flush()  # the C++ side writes to the same file descriptors
    return _C._cli(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
