"""The demo: a small GPT-style model trains under msprobe_cpp, overflows in fp16 at step 3, and is
stopped at the guilty call with the step's dump on disk.

    /usr/bin/python3 examples/train_overflow_demo.py      (tools/demo.sh runs it)

The model is the TinyGPT of tests/python/models.py (4 blocks, causal -inf attention mask, AdamW).
From step 3 on, block 2 computes its attention scores in float16 and scales them by a temperature
given in the wrong units, the kind of slip a mixed-precision refactor makes: the scores exceed
float16's 65504 and become inf.
"""
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE.parent / "tests" / "python"))

import torch  # noqa: E402

import msprobe_cpp  # noqa: E402
from models import make_batches, make_model, make_optimizer, train_step  # noqa: E402

BAD_STEP = 3
BAD_BLOCK = 2


def main() -> int:
    torch.set_num_threads(1)
    shutil.rmtree("demo_dump", ignore_errors=True)  # the config's dump_path: start clean
    model = make_model("gpt")
    step = {"now": 0}

    def fp16_scores(block: int, scores: torch.Tensor) -> torch.Tensor:
        if block == BAD_BLOCK and step["now"] >= BAD_STEP:
            return (scores.half() * 1e6).float()  # the "refactor": a temperature in the wrong units
        return scores

    model.inject = fp16_scores
    opt = make_optimizer(model)
    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(HERE / "overflow_config.json"))
    try:
        for i, (x, y) in enumerate(make_batches(model, 10)):
            step["now"] = i
            loss = train_step(model, opt, x, y, debugger)
            print(f"step {i}: loss {loss.item():.4f}")
    except msprobe_cpp.OverflowError as e:
        print(f"\nTraining stopped by msprobe_cpp:\n{e}\n")
        print(f"The guilty call: {e.call} in {e.module}")
        print(f"Files of the flagged step ({e.dump_dir}):")
        for p in sorted(pathlib.Path(e.dump_dir).iterdir()):
            print(f"  {p.name}{'/' if p.is_dir() else ''}")
        return 0
    print("no overflow was caught: the demo did not do what it should", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
