"""Writes examples/dumps/gpt_fp16_overflow/step3/rank/dump.json: one fp16 training step of a small
GPT-style model, in msprobe's dump.json format, in which an attention score overflows.

The statistics are illustrative, laid out as msprobe writes them (Python's json module, so
non-finite values are the bare tokens NaN / Infinity)."""
import json
import math
import pathlib

INF, NAN = math.inf, math.nan
HERE = pathlib.Path(__file__).resolve().parent


def t(mx=1.0, mn=-1.0, mean=0.0, norm=8.0, dtype="torch.float16", shape=(8, 32, 64), grad=True):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn,
            "Mean": mean, "Norm": norm, "requires_grad": grad}


def s(value):
    return {"type": type(value).__name__, "value": value}


def fwd(args, outs, **kwargs):
    return {"input_args": args, "input_kwargs": kwargs, "output": outs}


def bwd(grads_in, grads_out):
    return {"input": grads_in, "output": grads_out}


mask = t(True, False, None, None, "torch.bool", (32, 32), False)
bad = t(NAN, NAN, NAN, NAN)
scores_inf = t(INF, -12.0, INF, INF, shape=(8, 4, 32, 32))
data = {
    "Functional.embedding.0.forward": fwd([t(255, 0, 127.5, 9000.0, "torch.int64", (8, 32), False),
                                           t(0.1, -0.1, 0.0, 3.2, shape=(256, 64))], [t()]),
    "Functional.layer_norm.0.forward": fwd([t(), s([64]), t(1.0, 1.0, 1.0, 8.0, shape=(64,)),
                                            t(0.0, 0.0, 0.0, 0.0, shape=(64,))], [t(2.5, -2.5, 0.0, 128.0)],
                                           eps=s(1e-05)),
    "Functional.linear.0.forward": fwd([t(2.5, -2.5, 0.0, 128.0), t(0.2, -0.2, 0.0, 8.0, shape=(192, 64))],
                                       [t(9.0, -9.0, 0.0, 300.0, shape=(8, 32, 192))]),
    "Tensor.__matmul__.0.forward": fwd([t(9.0), t(9.0)], [t(310.0, -290.0, 1.0, 9000.0, shape=(8, 4, 32, 32))]),
    "Tensor.masked_fill.0.forward": fwd([t(310.0, -290.0, 1.0, 9000.0, shape=(8, 4, 32, 32)), mask, s(-INF)],
                                        [t(310.0, -INF, -INF, INF, shape=(8, 4, 32, 32))]),
    "Functional.softmax.0.forward": fwd([t(310.0, -INF, -INF, INF, shape=(8, 4, 32, 32))],
                                        [t(1.0, 0.0, 0.03, 20.0, shape=(8, 4, 32, 32))], dim=s(-1)),
    "Torch.empty.0.forward": fwd([s(8), s(32), s(64)], [t(NAN, NAN, NAN, NAN)], dtype={"type": "torch.dtype", "value": "torch.float16"}),
    # Block 1: q @ k^T in fp16 exceeds 65504.
    "Tensor.__matmul__.1.forward": fwd([t(250.0, -250.0), t(260.0, -260.0)], [scores_inf]),
    "Tensor.masked_fill.1.forward": fwd([scores_inf, mask, s(-INF)], [t(INF, -INF, NAN, NAN, shape=(8, 4, 32, 32))]),
    "Functional.softmax.1.forward": fwd([t(INF, -INF, NAN, NAN, shape=(8, 4, 32, 32))], [bad], dim=s(-1)),
    "Functional.linear.1.forward": fwd([bad, t(0.2, -0.2, 0.0, 8.0, shape=(64, 64))], [bad]),
    "Functional.cross_entropy.0.forward": fwd([bad, t(255, 0, 127.5, 9000.0, "torch.int64", (256,), False)],
                                              [t(NAN, NAN, NAN, NAN, "torch.float32", (), True)]),
    "Torch.ones_like.0.forward": fwd([t(NAN, NAN, NAN, NAN, "torch.float32", (), True)],
                                     [t(1.0, 1.0, 1.0, 1.0, "torch.float32", (), False)]),
    "Functional.cross_entropy.0.backward": bwd([t(1.0, 1.0, 1.0, 1.0, "torch.float32", (), False)], [bad, None]),
    "Functional.linear.1.backward": bwd([bad], [bad, bad]),
}
out = HERE / "dumps" / "gpt_fp16_overflow" / "step3" / "rank" / "dump.json"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None, "data": data}, indent=1))
print(out)
