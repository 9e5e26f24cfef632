"""One rank of the multi-process gloo runs (CPU) that the tests and benches start through
dist_runs.py; or, with --spawn WORLD, the one process that starts WORLD such ranks with
torch.multiprocessing.spawn.

    RANK=<r> WORLD_SIZE=<n> MASTER_ADDR=127.0.0.1 MASTER_PORT=<p> python3 rank_worker.py OUT [options]
    python3 rank_worker.py OUT --spawn WORLD [options]      # MASTER_*: from the environment, else
                                                            # 127.0.0.1 and a free port

--job train (the default): trains a tiny model (rank_models.py: --model mlp, transformer or small)
wrapped in DistributedDataParallel (--wrap ddp), FSDP2's fully_shard (fsdp2, torch 2.x: the state
saved is each rank's local shards) or nothing, its gradients averaged by dist.all_reduce after
backward (all_reduce), with SGD (momentum --momentum, 0.9 by default: state a NaN would poison) or
AdamW, data seeded by rank, under msprobe_cpp.PrecisionDebugger (or none: --bare). On rank
--bad-rank at step --bad-step only, a fault:

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

--job fp16_all_reduce: no model; ranks 0 and 1 give 40000 to a float16 all_reduce, whose sum
overflows on every rank, inside one debugger step. --job linear_step: one step of Linear(8, 4)
(loss: the outputs' sum), the gradients averaged by all_reduce, then an all_reduce with a process
group argument; "expected" in the result holds the float64 Max/Min of the input and of the
rank's own weight gradient, and the averaged gradients' sum, for the test to compare with the dump.
--job reduce_in_place: a tensor of 4096 elements made by an op, all-reduced in place (then used by
another op), synchronously and asynchronously; "expected" holds the reduced tensors' Max.

The debugger: PrecisionDebugger(config_path=--config) alone, else from --task, --level,
--dump-steps, --action and --overflow-nums (the last two only when given), dumping to OUT/dump.

Writes OUT/pid_rank<r> at its start, and at its end OUT/result_rank<r>.json (losses as float.hex,
what was raised with the OverflowError's fields, every exception in --catch mode, whether a
parameter or the optimizer state holds NaN/inf at the end, time.time() at the fault, the raise and
the exit, seconds_per_step of a finished run) and OUT/state_rank<r>.pt (the final local state,
unless --no-save). Every exception is caught and recorded and the process exits with status 0,
unless --reraise all (what ended the run is re-raised after the files are written) or --reraise
non-overflow (re-raised unless it is an msprobe_cpp.OverflowError).
"""
import argparse
import faulthandler
import json
import os
import pathlib
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist
from torch.distributed import destroy_process_group  # bound before the debugger starts (--destroy imported)

import msprobe_cpp
from rank_models import MODELS, average_gradients, batch, local_state, nonfinite, set_fault, wrap

FAULTS = ["clean", "nan_batch", "fp16_op", "backward_nan", "plain_raise", "scaled_overflow"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--spawn", type=int, default=None, metavar="WORLD",
                   help="start WORLD ranks of this script with torch.multiprocessing.spawn, join them, "
                        "then write OUT/spawn_joined")
    p.add_argument("--job", choices=list(JOBS), default="train")
    p.add_argument("--mode", default="clean", choices=FAULTS)
    p.add_argument("--bad-rank", type=int, default=-1)
    p.add_argument("--bad-step", type=int, default=2)
    p.add_argument("--config", default=None,
                   help="the debugger from this config.json alone (--task, --level, --dump-steps, --action "
                        "and --overflow-nums unused)")
    p.add_argument("--task", choices=["statistics", "overflow_check"], default="overflow_check")
    p.add_argument("--level", choices=["L1", "mix"], default="L1")
    p.add_argument("--action", choices=["raise", "continue"], default=None)
    p.add_argument("--overflow-nums", type=int, default=None)
    p.add_argument("--no-peer-stop", action="store_true",
                   help="overflow_check without the coordinated stop (bench/peer_stop_overhead.py)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dump-steps", default="all", help="the debugger's step list: 'all' or '0,1,2'")
    p.add_argument("--catch", action="store_true", help="catch msprobe_cpp.OverflowError per step, go on")
    p.add_argument("--bare", action="store_true", help="no debugger at all: the reference run")
    p.add_argument("--reraise", choices=["none", "non-overflow", "all"], default="none",
                   help="re-raise what ended the run (all, or all but an msprobe_cpp.OverflowError) after "
                        "writing the files, so that the exit status shows it (torchrun sees a failing worker)")
    p.add_argument("--monitor", action="store_true", help="debugger.monitor(wrapped): task grad_probe")
    p.add_argument("--start-module", action="store_true", help="debugger.start(wrapped.module), not the wrapper")
    p.add_argument("--model", choices=sorted(MODELS), default="mlp")
    p.add_argument("--import-dynamo", action="store_true",
                   help="import torch._dynamo before init_process_group, as a program that compiles may")
    p.add_argument("--destroy", choices=["attribute", "imported"], default="attribute",
                   help="the end: dist.destroy_process_group(), or the name imported at the top (as "
                        "PyTorch's DDP tutorial does), bound before the debugger started")
    p.add_argument("--optim", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum (0: plain SGD)")
    p.add_argument("--wrap", choices=["ddp", "fsdp2", "all_reduce"], default="ddp")
    p.add_argument("--ready-step", type=int, default=-1,
                   help="touch OUT/ready_rank<r> when this step begins (the benchmark waits for it)")
    p.add_argument("--no-save", action="store_true", help="write no state_rank<r>.pt (the benchmark)")
    p.add_argument("--amp", action="store_true",
                   help="float16 autocast and torch.amp.GradScaler('cpu') (PyTorch >= 2.3)")
    p.add_argument("--init-scale", type=float, default=2.0 ** 8, help="the GradScaler's init_scale (--amp)")
    return p.parse_args(argv)


@dataclass
class Rank:
    args: argparse.Namespace
    out: pathlib.Path
    rank: int
    world: int
    result: Dict[str, Any]
    # What the checks after the run look at (a job without a model leaves them None).
    model: Optional[torch.nn.Module] = None
    opt: Optional[torch.optim.Optimizer] = None


def exception_record(e: BaseException) -> dict:
    rec = {"type": type(e).__name__, "message": str(e), "at": time.time()}
    stop_error = getattr(msprobe_cpp, "DistributedStopError", None)
    rec["is_overflow_error"] = isinstance(e, msprobe_cpp.OverflowError)
    rec["is_distributed_stop_error"] = stop_error is not None and isinstance(e, stop_error)
    rec["is_runtime_error"] = isinstance(e, RuntimeError)
    if isinstance(e, msprobe_cpp.OverflowError):
        rec.update(step=getattr(e, "step", None), origin=getattr(e, "origin", None),
                   call=getattr(e, "call", None), peer_stop=getattr(e, "peer_stop", None),
                   peer_rank=getattr(e, "peer_rank", None), scene=getattr(e, "scene", None),
                   level=getattr(e, "level", None))
    else:
        rec["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-12000:]
    return rec


def make_debugger(args: argparse.Namespace, out: pathlib.Path):
    if args.config is not None:
        return msprobe_cpp.PrecisionDebugger(config_path=args.config)
    steps = None if args.dump_steps == "all" else [int(s) for s in args.dump_steps.split(",")]
    given = {k: v for k, v in (("action", args.action), ("overflow_nums", args.overflow_nums)) if v is not None}
    return msprobe_cpp.PrecisionDebugger(task=args.task, dump_path=str(out / "dump"), level=args.level,
                                         step=steps, **given)


def train(r: Rank) -> None:
    args, result = r.args, r.result
    torch.manual_seed(0)  # the same weights on every rank
    model = r.model = MODELS[args.model]()
    wrapped = wrap(model, args.wrap, r.world)
    if args.optim == "adamw":
        opt = r.opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    else:
        opt = r.opt = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=args.momentum)
    debugger = None if args.bare else make_debugger(args, r.out)
    if debugger is not None and args.monitor:
        debugger.monitor(wrapped)
    scaler = torch.amp.GradScaler("cpu", init_scale=args.init_scale) if args.amp else None
    target = wrapped.module if (args.start_module and args.wrap == "ddp") else wrapped
    g = torch.Generator().manual_seed(100 + r.rank)
    started = time.perf_counter()
    for step in range(args.steps):
        if step == args.ready_step:
            (r.out / f"ready_rank{r.rank}").touch()
        x, y = batch(g, args.model)
        faulty = r.rank == args.bad_rank and step == args.bad_step and args.mode != "clean"
        if faulty:
            result["fault_at"] = time.time()
            if args.mode == "nan_batch":
                x[1, 3] = float("nan")
            elif args.mode != "scaled_overflow":
                set_fault(model, args.mode)
        try:
            if debugger is not None:
                debugger.start(target)
            if scaler is None:
                loss = torch.nn.functional.cross_entropy(wrapped(x), y)
                loss.backward()
            else:
                with torch.autocast("cpu", dtype=torch.float16):
                    logits = wrapped(x)
                loss = torch.nn.functional.cross_entropy(logits.float(), y)
                scaled = loss * 1e6 if (faulty and args.mode == "scaled_overflow") else loss
                scaler.scale(scaled).backward()
            if args.wrap == "all_reduce":
                average_gradients(model, r.world)
            if scaler is None:
                opt.step()
            else:
                scaler.step(opt)
                scaler.update()
                result["scales"].append(scaler.get_scale())
            if faulty and args.bare:  # the damage the tool must prevent: is it there without it?
                result["nonfinite_after_fault_step"] = nonfinite(model.named_parameters())
                print(f"[rank {r.rank}] bare {args.mode} at step {step}: parameters with NaN/inf after "
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
            set_fault(model, None)
    result["seconds_per_step"] = (time.perf_counter() - started) / args.steps


def fp16_all_reduce(r: Rank) -> None:
    debugger = make_debugger(r.args, r.out)
    debugger.start()
    t = torch.full((4,), 40000.0 if r.rank < 2 else 0.0, dtype=torch.float16)
    dist.all_reduce(t)
    debugger.stop()
    debugger.step()


def linear_step(r: Rank) -> None:
    torch.manual_seed(1234)  # identical weights on every rank
    model = torch.nn.Linear(8, 4)
    torch.manual_seed(1234 + 1 + r.rank)  # different data per rank
    x = torch.randn(3, 8)
    x64 = x.double()
    # Linear's weight gradient for loss = sum(outputs) is x summed over the batch, in every row:
    # the all_reduce of that gradient sees it before the reduction (in-place calls are
    # recorded on their inputs as they were before the call).
    local_grad = x64.sum(0)
    expected = {"rank": r.rank, "Max": x64.max().item(), "Min": x64.min().item(),
                "grad_Max": local_grad.max().item(), "grad_Min": local_grad.min().item()}
    debugger = make_debugger(r.args, r.out)
    debugger.start(model)
    model(x).sum().backward()
    average_gradients(model, r.world)
    group = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(2), group=group)  # a process group argument, as msprobe records it
    debugger.stop()
    debugger.step()
    # The averaged gradient must be the same on every rank: proves the collective really ran.
    expected["grad_sum"] = sum(p.grad.double().sum().item() for p in model.parameters())
    r.result["expected"] = expected


def reduce_in_place(r: Rank) -> None:
    debugger = make_debugger(r.args, r.out)
    debugger.start()
    # 4096 elements: enough for the statistics cache to keep what each was read as before.
    x = torch.full((4096,), r.rank + 1.0)
    y = x * 1.0
    dist.all_reduce(y)
    y.add(0.0)
    a = x * 2.0
    dist.all_reduce(a, async_op=True).wait()
    a.add(0.0)
    debugger.stop()
    debugger.step()
    r.result["expected"] = {"y": y.max().item(), "a": a.max().item()}


JOBS = {"train": train, "fp16_all_reduce": fp16_all_reduce, "linear_step": linear_step,
        "reduce_in_place": reduce_in_place}


def record_damage(r: Rank) -> None:
    """After the stop: does the model or the optimizer hold NaN/inf? And the state, for the test."""
    result = r.result
    result["nonfinite_params"] = nonfinite(r.model.named_parameters())
    result["nonfinite_buffers"] = nonfinite(r.model.named_buffers())
    state = []
    if r.opt is not None:
        for i, s in enumerate(r.opt.state.values()):
            state += [(f"{i}.{k}", v) for k, v in s.items()]
    result["nonfinite_optimizer_state"] = nonfinite(state)
    if not r.args.no_save:
        torch.save(local_state(r.model), r.out / f"state_rank{r.rank}.pt")


def run_rank(args: argparse.Namespace) -> None:
    out = pathlib.Path(args.out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pid_rank{rank}").write_text(str(os.getpid()))  # the launcher kills it by this, should it hang
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: where a hung rank is
    if args.no_peer_stop:
        msprobe_cpp.peer_stop.create = lambda session, patches: None
    torch.set_num_threads(1)
    if args.import_dynamo:
        __import__("torch._dynamo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    r = Rank(args, out, rank, world, {
        "rank": rank, "world": world, "args": vars(args), "losses": [], "exceptions": [], "raised": None,
        "finished": False, "fault_at": None, "torch": torch.__version__, "scales": []})
    ended_with = None
    try:
        JOBS[args.job](r)
        r.result["finished"] = True
    except BaseException as e:  # noqa: BLE001 - recorded for the test; the process ends normally
        ended_with = e
        rec = exception_record(e)
        r.result["raised"] = rec
        r.result["exceptions"].append(rec)
    try:
        if r.model is not None:
            record_damage(r)
    except BaseException as e:  # noqa: BLE001
        r.result["after_error"] = exception_record(e)
    r.result["exit_at"] = time.time()
    path = out / f"result_rank{rank}.json"
    with open(str(path) + ".tmp", "w") as f:
        json.dump(r.result, f, indent=1)
    os.replace(str(path) + ".tmp", path)
    try:
        (destroy_process_group if args.destroy == "imported" else dist.destroy_process_group)()
    except BaseException:  # noqa: BLE001 - a peer may have gone already
        pass
    if ended_with is not None and (args.reraise == "all" or (
            args.reraise == "non-overflow" and not isinstance(ended_with, msprobe_cpp.OverflowError))):
        raise ended_with


def spawned_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    run_rank(args)


def spawn(args: argparse.Namespace) -> None:
    """Each rank records whatever ends its run (msprobe_cpp.OverflowError included), so mp.spawn
    joins without a ProcessRaisedException."""
    import torch.multiprocessing as mp
    world, args.spawn = args.spawn, None
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        from gloo import free_port
        os.environ["MASTER_PORT"] = str(free_port())
    mp.spawn(spawned_rank, args=(world, args), nprocs=world, join=True)
    pathlib.Path(args.out, "spawn_joined").write_text("joined\n")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.spawn is not None:
        spawn(args)
    else:
        run_rank(args)


if __name__ == "__main__":
    main()
