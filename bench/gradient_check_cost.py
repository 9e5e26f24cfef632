"""What the optimizer-step gradient check costs (issue 32): the look at every gradient that the
debugger makes before each optimizer step (python/msprobe_cpp/gradient_guard.py,
_C.OptimizerTensors), against an uninstrumented training step of the same model, in one
process.

Models: TinyGPT (examples/tinygpt.py, the hook_overhead bench's) and, where transformers is
installed (the torch 2 venv), hf_gpt2 and hf_llama_sdpa of the real-model zoo
(tests/python/real_models.py). For each: the median of --reps uninstrumented training steps
(zero_grad, forward, backward, optimizer step), then the median of --reps checks of that step's
gradients as the hook makes them (the optimizer's parameters and their strided gradients
gathered, then the in-place look), and of its look at the optimizer's state (issue 43: exp_avg,
exp_avg_sq, momentum; gathered and looked at the same way). The ratios are (step + check) /
step, for the gradients alone and for both. The looks are timed warm (the same tensors again):
in a training step they read what the step last touched, and take two to three times longer.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/gradient_check_cost.py
    OPENBLAS_NUM_THREADS=1 build-torch2/venv/bin/python bench/gradient_check_cost.py
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", str(ROOT / "python")))

import torch  # noqa: E402

import msprobe_cpp  # noqa: E402


def median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def tinygpt():
    from models import make_batches, make_model, make_optimizer
    model = make_model("gpt")
    opt = make_optimizer(model)
    x, y = make_batches(model, 1)[0]

    def step() -> None:
        opt.zero_grad()
        out = model(x)
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
    return model, opt, step


def zoo(name: str):
    import real_models
    model, make_batch, make_optimizer = real_models.build(name)
    opt = make_optimizer(model)
    batch = real_models.batches(make_batch, 1)[0]

    def step() -> None:
        opt.zero_grad()
        real_models.loss_of(model, batch).backward()
        opt.step()
    return model, opt, step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    workloads = [("TinyGPT", tinygpt)]
    try:
        import transformers  # noqa: F401
        workloads += [("hf_gpt2", lambda: zoo("hf_gpt2")), ("hf_llama_sdpa", lambda: zoo("hf_llama_sdpa"))]
    except ImportError:
        pass
    print(f"torch {torch.__version__}, one thread, {args.reps} reps each")
    print(f"{'model':16} {'params':>7} {'elements':>9} {'step ms':>8} {'check us':>9} {'ratio':>6} "
          f"{'state us':>9} {'both':>6}")
    session = None
    for label, make in workloads:
        model, opt, step = make()
        for _ in range(3):
            step()  # warm-up; the optimizer's state exists
        step_s = median_s(step, args.reps)  # before any debugger exists: no hook at all
        if session is None:
            debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tempfile.mkdtemp())
            session = debugger._session  # the engine the hooks use, its looks called directly
        tensors = session.optimizer_tensors(opt, False)
        assert tensors.nonfinite_gradients() == [] and tensors.nonfinite_state() == []
        check_s = median_s(lambda: session.optimizer_tensors(opt, False).nonfinite_gradients(), args.reps * 10)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        state_s = median_s(lambda: session.optimizer_tensors(opt, False).nonfinite_state(), args.reps * 10)
        print(f"{label:16} {len(grads):7d} {sum(g.numel() for g in grads):9d} {step_s * 1e3:8.2f} "
              f"{check_s * 1e6:9.1f} {(step_s + check_s) / step_s:6.3f} {state_s * 1e6:9.1f} "
              f"{(step_s + check_s + state_s) / step_s:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
