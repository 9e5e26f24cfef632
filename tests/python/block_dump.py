"""Dumps the block model of the msprobe fixtures (tests/data/msprobe-1.1.1/block_model.py) as the
fixtures were made: two steps, step 0 dumped. Run as a script, in a process of its own so that the
caller chooses the BLAS it loads:

    block_dump.py ours|msprobe CONFIG_JSON

Prints one JSON line: the BLAS the process loaded ("openblas" or "reference")."""
import importlib.util
import json
import pathlib
import sys

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "data" / "msprobe-1.1.1"


def loaded_blas() -> str:
    """The fixtures' README: `openblas` is in /proc/self/maps once torch has run a matmul."""
    with open("/proc/self/maps") as maps:
        return "openblas" if "openblas" in maps.read() else "reference"


def main(tool: str, config: str) -> None:
    spec = importlib.util.spec_from_file_location("block_model", FIXTURES / "block_model.py")
    bm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bm)
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from msprobe_cpp import PrecisionDebugger
    model, opt, x, y = bm.make()
    debugger = PrecisionDebugger(config_path=config, model=model)
    losses = []
    for _ in range(2):
        debugger.start()
        losses.append(bm.train_step(model, opt, x, y).item())
        debugger.stop()
        debugger.step()
    print(json.dumps({"blas": loaded_blas(), "losses": losses}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
