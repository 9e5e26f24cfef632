"""One rank of the DistributedDataParallel runs that test_ddp.py (and bench/dist_exit_times.py) start.

    RANK=<r> WORLD_SIZE=<n> MASTER_ADDR=127.0.0.1 MASTER_PORT=<p> python3 ddp_worker.py OUT [options]

Trains a tiny model (an MLP block of LayerNorm/Linear/GELU, or a tiny transformer encoder layer)
wrapped in DistributedDataParallel (gloo, CPU) with SGD (momentum 0.9: state a NaN would poison),
data seeded by rank, under msprobe_cpp.PrecisionDebugger (or none: --bare). On rank --bad-rank
at step --bad-step only, a fault:

  nan_batch     a NaN in the input batch (x[1, 3] = nan)
  fp16_op       an fp16 multiplication in the model's forward overflows (inf that requires grad)
  backward_nan  forward is finite (h + sqrt(relu(h) * 0) == h), sqrt's backward at 0 is inf and
                the NaN it makes reaches every parameter gradient
  plain_raise   (the benchmark) a plain RuntimeError at that point, no NaN at all
  scaled_overflow  (with --amp) the loss handed to the GradScaler is multiplied by 1e6: forward is
                finite, the backward into the float16 logits overflows on that rank alone, and
                DDP's all-reduce takes the inf to the other ranks' gradients

--amp: the forward under torch.autocast("cpu", dtype=torch.float16), the loss in float32, and
torch.amp.GradScaler("cpu", init_scale=--init-scale): scaler.scale(loss).backward();
scaler.step(opt); scaler.update(). Each step's scaler.get_scale() after update() goes to "scales".

Writes OUT/result_rank<r>.json (losses as float.hex, what was raised with the OverflowError's
fields, every exception in --catch mode, whether a parameter or the optimizer state holds
NaN/inf at the end, time.time() at the fault, the raise and the exit) and OUT/state_rank<r>.pt
(the final state_dict). Every exception is caught and recorded and the process exits with
status 0, unless --no-catch-all (then it is re-raised after the files are written).

fsdp_worker.py runs the same loop with FSDP2's fully_shard instead of DDP (--wrap fsdp2).
"""
import argparse
import faulthandler
import json
import math
import os
import pathlib
import signal
import sys
import time
import traceback

import numpy
import torch
import torch.distributed as dist

import msprobe_cpp

D_IN, D_MODEL, N_CLASSES, BATCH, SEQ = 8, 16, 4, 4, 4


class Block(torch.nn.Module):
    """x + fc2(gelu(fc1(norm(x)))), with the fault inside when `fault` is set."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(2 * d, d)
        self.fault = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.norm(x)))
        if self.fault == "fp16_op":
            # |h| > 1.1 somewhere: h * 60000 (or its * 4) is past float16's 65504, inf requiring grad.
            h = (h.half() * 60000.0 * 4).float()
        elif self.fault == "backward_nan":
            # Forward: zeros added, h unchanged. Backward: d sqrt(u)/du at u = 0 is inf, times the
            # mul's 0 is NaN, and relu lets it through to fc1, norm and everything before.
            h = h + torch.sqrt(torch.relu(h) * 0.0)
        elif self.fault == "plain_raise":
            raise RuntimeError("plain_raise: the fault of the benchmark's run without the tool")
        return x + self.fc2(h)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(D_IN, D_MODEL)
        self.blocks = torch.nn.ModuleList([Block(D_MODEL), Block(D_MODEL)])
        self.head = torch.nn.Linear(D_MODEL, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class Transformer(torch.nn.Module):
    """A tiny encoder layer (dropout 0: deterministic) before the MLP block; x is (B, SEQ, D_IN)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(D_IN, D_MODEL)
        self.encoder = torch.nn.TransformerEncoderLayer(D_MODEL, nhead=2, dim_feedforward=2 * D_MODEL,
                                                        dropout=0.0, batch_first=True)
        self.blocks = torch.nn.ModuleList([Block(D_MODEL)])
        self.head = torch.nn.Linear(D_MODEL, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.inp(x))
        for block in self.blocks:
            h = block(h)
        return self.head(h.mean(1))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--mode", default="clean",
                   choices=["clean", "nan_batch", "fp16_op", "backward_nan", "plain_raise", "scaled_overflow"])
    p.add_argument("--bad-rank", type=int, default=-1)
    p.add_argument("--bad-step", type=int, default=2)
    p.add_argument("--task", choices=["statistics", "overflow_check"], default="overflow_check")
    p.add_argument("--level", choices=["L1", "mix"], default="L1")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dump-steps", default="all", help="the debugger's step list: 'all' or '0,1,2'")
    p.add_argument("--catch", action="store_true", help="catch msprobe_cpp.OverflowError per step, go on")
    p.add_argument("--bare", action="store_true", help="no debugger at all: the reference run")
    p.add_argument("--no-catch-all", action="store_true",
                   help="re-raise what ended the run after writing the files (torchrun sees a failing worker)")
    p.add_argument("--start-module", action="store_true", help="debugger.start(wrapped.module), not the wrapper")
    p.add_argument("--model", choices=["mlp", "transformer"], default="mlp")
    p.add_argument("--optim", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--wrap", choices=["ddp", "fsdp2"], default="ddp")
    p.add_argument("--ready-step", type=int, default=-1,
                   help="touch OUT/ready_rank<r> when this step begins (the benchmark waits for it)")
    p.add_argument("--no-save", action="store_true", help="write no state_rank<r>.pt (the benchmark)")
    p.add_argument("--amp", action="store_true",
                   help="float16 autocast and torch.amp.GradScaler('cpu') (PyTorch >= 2.3)")
    p.add_argument("--init-scale", type=float, default=2.0 ** 8, help="the GradScaler's init_scale (--amp)")
    return p.parse_args(argv)


def batch(g: torch.Generator, model_kind: str):
    shape = (BATCH, SEQ, D_IN) if model_kind == "transformer" else (BATCH, D_IN)
    return torch.randn(*shape, generator=g), torch.randint(0, N_CLASSES, (BATCH,), generator=g)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor itself, or a DTensor's local shard; detached. No call the tool hooks is made
    (Tensor.detach, .numpy() and DTensor's _local_tensor are not in its lists): the checks after
    a stop measure the run and must not meet the tool's refusal to go on."""
    return getattr(t, "_local_tensor", t).detach()


def nonfinite(tensors) -> list:
    """Which of the named tensors hold NaN/inf (local shards of DTensors)."""
    bad = []
    for name, t in tensors:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            continue
        if not numpy.isfinite(_local(t).numpy()).all():
            bad.append(name)
    return bad


def local_state(module: torch.nn.Module) -> dict:
    """Each parameter's and buffer's local tensor (a DTensor's shard). Not state_dict(): FSDP2's
    state_dict hook reshards, which fails when a stop was raised inside its unshard."""
    named = list(module.named_parameters()) + list(module.named_buffers())
    return {k: torch.from_numpy(_local(v.detach()).numpy().copy()) for k, v in named}


def exception_record(e: BaseException) -> dict:
    rec = {"type": type(e).__name__, "message": str(e), "at": time.time()}
    stop_error = getattr(msprobe_cpp, "DistributedStopError", None)
    rec["is_overflow_error"] = isinstance(e, msprobe_cpp.OverflowError)
    rec["is_distributed_stop_error"] = stop_error is not None and isinstance(e, stop_error)
    rec["is_runtime_error"] = isinstance(e, RuntimeError)
    if isinstance(e, msprobe_cpp.OverflowError):
        rec.update(step=getattr(e, "step", None), origin=getattr(e, "origin", None),
                   call=getattr(e, "call", None), peer_stop=getattr(e, "peer_stop", None),
                   peer_rank=getattr(e, "peer_rank", None))
    else:
        rec["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
    return rec


def wrap(model: torch.nn.Module, kind: str, world: int) -> torch.nn.Module:
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def main(argv=None) -> None:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pid_rank{rank}").write_text(str(os.getpid()))  # the test kills it by this, should it hang
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: where a hung rank is
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = {"rank": rank, "world": world, "args": vars(args), "losses": [], "exceptions": [],
              "raised": None, "finished": False, "fault_at": None, "torch": torch.__version__,
              "scales": []}
    ended_with = None
    model = opt = None
    try:
        torch.manual_seed(0)  # the same weights on every rank
        model = Transformer() if args.model == "transformer" else MLP()
        wrapped = wrap(model, args.wrap, world)
        if args.optim == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        else:
            opt = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
        debugger = None
        if not args.bare:
            steps = None if args.dump_steps == "all" else [int(s) for s in args.dump_steps.split(",")]
            debugger = msprobe_cpp.PrecisionDebugger(task=args.task, dump_path=str(out / "dump"),
                                                     level=args.level, step=steps)
        scaler = torch.amp.GradScaler("cpu", init_scale=args.init_scale) if args.amp else None
        target = wrapped.module if (args.start_module and args.wrap == "ddp") else wrapped
        g = torch.Generator().manual_seed(100 + rank)
        for step in range(args.steps):
            if step == args.ready_step:
                (out / f"ready_rank{rank}").touch()
            x, y = batch(g, args.model)
            faulty = rank == args.bad_rank and step == args.bad_step and args.mode != "clean"
            if faulty:
                result["fault_at"] = time.time()
                if args.mode == "nan_batch":
                    x[1, 3] = float("nan")
                elif args.mode != "scaled_overflow":
                    model.blocks[0].fault = args.mode
            try:
                if debugger is not None:
                    debugger.start(target)
                if scaler is None:
                    loss = torch.nn.functional.cross_entropy(wrapped(x), y)
                    loss.backward()
                    opt.step()
                else:
                    with torch.autocast("cpu", dtype=torch.float16):
                        logits = wrapped(x)
                    loss = torch.nn.functional.cross_entropy(logits.float(), y)
                    scaled = loss * 1e6 if (faulty and args.mode == "scaled_overflow") else loss
                    scaler.scale(scaled).backward()
                    scaler.step(opt)
                    scaler.update()
                    result["scales"].append(scaler.get_scale())
                if faulty and args.bare:  # the damage the tool must prevent: is it there without it?
                    result["nonfinite_after_fault_step"] = nonfinite(model.named_parameters())
                    print(f"[rank {rank}] bare {args.mode} at step {step}: parameters with NaN/inf after "
                          f"opt.step(): {result['nonfinite_after_fault_step']}", flush=True)
                opt.zero_grad()
                if debugger is not None:
                    debugger.stop()
                    debugger.step()
                result["losses"].append(loss.item().hex())
            except msprobe_cpp.OverflowError as e:
                if not args.catch:
                    raise
                result["exceptions"].append(exception_record(e))
            finally:
                model.blocks[0].fault = None
        result["finished"] = True
    except BaseException as e:  # noqa: BLE001 - recorded for the test; the process ends normally
        ended_with = e
        rec = exception_record(e)
        result["raised"] = rec
        result["exceptions"].append(rec)
    # After the stop: does the model or the optimizer hold NaN/inf?
    try:
        if model is not None:
            result["nonfinite_params"] = nonfinite(model.named_parameters())
            result["nonfinite_buffers"] = nonfinite(model.named_buffers())
            state = []
            if opt is not None:
                for i, s in enumerate(opt.state.values()):
                    state += [(f"{i}.{k}", v) for k, v in s.items()]
            result["nonfinite_optimizer_state"] = nonfinite(state)
            if not args.no_save:
                torch.save(local_state(model), out / f"state_rank{rank}.pt")
    except BaseException as e:  # noqa: BLE001
        result["after_error"] = exception_record(e)
    result["exit_at"] = time.time()
    path = out / f"result_rank{rank}.json"
    with open(str(path) + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(str(path) + ".tmp", path)
    try:
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - a peer may have gone already
        pass
    if ended_with is not None and args.no_catch_all:
        raise ended_with


if __name__ == "__main__":
    main()
