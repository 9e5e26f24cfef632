"""The demo: a small GPT-style model trains in mixed precision under msprobe_cpp's overflow guard.

    /usr/bin/python3 examples/train_overflow_demo.py      (tools/demo.sh runs it)

The model is TinyGPT, beside this file in tinygpt.py (4 blocks, causal -inf attention mask, AdamW).
Block 2 computes its attention scores in float16, so a dynamic loss scaler scales the loss; what
happens, step by step:

- steps 0..: the scaler's first scale (2^32) makes float16 gradients overflow, as it does in every
  fp16 run; the scaler skips those steps and halves the scale. The guard says one line per step
  and does not stop.
- step 8: block 2 scales its float16 scores by a temperature in the wrong units (the kind of slip
  a mixed-precision refactor makes): they exceed 65504 and become inf. The guard stops training at
  that multiply (origin `op`), with the source line. The script skips the batch and goes on; the
  guard stays on.
- step 11: a weight is restored from a bad checkpoint holding a NaN. The guard stops at the first
  call that uses it (origin `parameter`) and names the parameter. The script ends there.

Both flagged steps are on disk (overflow_nums -1), each with an overflow_report.json that tells the
same story without the terminal.
"""
import importlib.util
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
# The installed package (pip) where there is one; else the source tree's, which tools/demo.sh
# builds in place. Put first, the source tree's would shadow an installed build (issue 44).
if importlib.util.find_spec("msprobe_cpp") is None:
    sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))  # the demo's model, tinygpt.py

import torch  # noqa: E402

import msprobe_cpp  # noqa: E402
from tinygpt import DynamicLossScaler, TinyGPT, next_token_loss, token_batches  # noqa: E402

FP16_BLOCK = 2
BAD_TEMPERATURE_STEP = 8
BAD_CHECKPOINT_STEP = 11


def main() -> int:
    torch.set_num_threads(1)
    shutil.rmtree("demo_dump", ignore_errors=True)  # the config's dump_path: start clean
    torch.manual_seed(0)
    model = TinyGPT()
    step = {"now": 0}

    def fp16_scores(block: int, scores: torch.Tensor) -> torch.Tensor:
        if block != FP16_BLOCK:
            return scores
        temperature = 1e6 if step["now"] == BAD_TEMPERATURE_STEP else 1.0  # the slip
        return (scores.half() * temperature).float()

    model.inject = fp16_scores
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    scaler = DynamicLossScaler(2.0 ** 32)

    def on_overflow(o: msprobe_cpp.Overflow) -> None:
        print(f"  [on_overflow] step {o.step}: {o.call}, origin {o.origin}")

    debugger = msprobe_cpp.PrecisionDebugger(config_path=str(HERE / "overflow_config.json"),
                                             on_overflow=on_overflow)
    for i, (x, y) in enumerate(token_batches(model, 16)):
        step["now"] = i
        if i == BAD_CHECKPOINT_STEP:
            with torch.no_grad():
                model.blocks[1].mlp.fc1.weight[5, 7] = float("nan")  # a bad checkpoint restore
        debugger.start(model, loss_scaler=scaler)
        try:
            opt.zero_grad(set_to_none=True)
            loss = next_token_loss(model, x, y)
            scaler.scale_loss(loss).backward()
            stepped = scaler.step(opt, i)
        except msprobe_cpp.OverflowError as e:
            print(f"\nTraining stopped by msprobe_cpp:\n{e}\n")
            if e.origin == "op":
                print(f"The guilty call: {e.call} in {e.module}. Skipping this batch; the guard stays on.\n")
                continue
            print(f"NaN came in with parameter {e.parameter}: a bad checkpoint. Ending the run.")
            print(f"Files of the flagged steps (under {debugger.dump_path}):")
            for p in sorted(pathlib.Path(debugger.dump_path).glob("step*/rank/*")):
                print(f"  {p}{'/' if p.is_dir() else ''}")
            return 0
        debugger.stop()
        debugger.step()
        print(f"step {i}: loss {loss.item():.4f}, loss scale {scaler.get_scale():.0f}"
              f"{'' if stepped else ' (step skipped by the loss scaler)'}")
    print("the bad checkpoint was not caught: the demo did not do what it should", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
