"""One rank of test_large_scale.py's runs (gloo, CPU, 127.0.0.1), started through dist_runs.py's
run_ranks(..., worker=<this file>): the parallelisms past plain DDP, where a NaN costs the
most (issue 42).

    RANK=<r> WORLD_SIZE=<n> MASTER_ADDR=127.0.0.1 MASTER_PORT=<p> python3 large_scale_worker.py OUT --job JOB [options]

Jobs (each trains --steps steps of a tiny model, SGD with momentum 0.9, under
msprobe_cpp.PrecisionDebugger(task=--task, level=--level) dumping to OUT/dump, or none: --bare):

  tp          tensor parallel (torch 2.x): an MLP fc1-ReLU-fc2 over init_device_mesh("cpu", (world,)),
              ColwiseParallel on fc1, RowwiseParallel on fc2; every rank gets the same batch.
              Fault nan_weight: a NaN written into the bad rank's local shard of fc1.weight.
  pipeline    two stages over dist.send/dist.recv: rank 0 runs stage 0 (Linear 8-16) and sends the
              activation; rank 1 recv's it into a buffer that then requires grad, runs stage 1
              (ReLU, Linear 16-4) and the loss, and sends the buffer's gradient back, which rank 0
              hands to activation.backward(). Faults: send_op (rank 0's activation times 1e39, an
              inf that requires grad), send_op_detached (the same op on the detached activation it
              sends), stage2_op (rank 1's logits times 1e39). The recv buffers are filled with
              RECV_SENTINEL first, so a record of the buffer before the call is told from the data.
  syncbn      a CPU sync-BN as the first layer (batch sums all-reduced in forward), under DDP.
  fsdp1       FullyShardedDataParallel (each Block, then the root; device_id cpu) of rank_models' MLP.
  fsdp2_bf16  FSDP2's fully_shard (each Block, then the root) with
              MixedPrecisionPolicy(param_dtype=torch.bfloat16).
  ddp         rank_models' MLP under DDP: the torchrun restart runs.

Faults nan_batch (x[1, 3] = nan) and backward_nan (rank_models' Block fault) apply to the MLP jobs;
raise (a plain RuntimeError, no NaN) to any job: a restart's failure without the tool.
A fault happens on --bad-rank at --bad-step, and under torchrun only in the attempt
--fault-attempt (TORCHELASTIC_RESTART_COUNT, "0" outside torchrun).

Writes OUT/pid_rank<r> at its start, OUT/started_rank<r>_attempt<N> (time.time()) once the process
group is up, and at its end OUT/result_rank<r>.json (a copy as result_rank<r>_attempt<N>.json):
losses as float.hex, what was raised with every documented OverflowError field (and which of them
are missing as attributes), whether a parameter, buffer or the optimizer state holds NaN/inf, the
lines the logger "msprobe_cpp" delivered, and the pipeline's sent and received statistics; and
OUT/state_rank<r>.pt, the rank's local state (a DTensor's or a flat parameter's local shard).
--reraise: what ended the run is re-raised after the files are written (torchrun sees the failure).
"""
import argparse
import datetime
import faulthandler
import json
import logging
import os
import pathlib
import signal
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

import numpy
import torch
import torch.distributed as dist

import msprobe_cpp
from rank_models import MLP, Block, batch, local_state, nonfinite

JOBS = ["tp", "pipeline", "syncbn", "fsdp1", "fsdp2_bf16", "ddp"]
MODES = ["clean", "nan_weight", "nan_batch", "backward_nan", "send_op", "send_op_detached", "stage2_op", "raise"]
RECV_SENTINEL = 7777.0
# float32's largest is 3.4e38: any |h| > 0.34 times this is inf.
OVERFLOW_FACTOR = 1e39
# docs/overflow-detection.md's attributes of an OverflowError ("What the program can read", "Stop
# where the damage starts", "Under torch.distributed"): each must be there on every stop.
DOCUMENTED_FIELDS = ["step", "rank", "call", "scene", "level", "origin", "parameter", "input_args_anomaly_indices",
                     "input_kwargs_anomaly_keys", "output_anomaly_indices", "module", "source", "tensors",
                     "gradients", "masked", "absorbed", "note", "replay", "not_replayed", "dump_dir", "message",
                     "caught", "caught_how", "peer_stop", "peer_rank", "peer_step", "overflow"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--job", choices=JOBS, required=True)
    p.add_argument("--mode", choices=MODES, default="clean")
    p.add_argument("--bad-rank", type=int, default=-1)
    p.add_argument("--bad-step", type=int, default=2)
    p.add_argument("--fault-attempt", default="0", help="the torchrun attempt whose run has the fault")
    p.add_argument("--task", choices=["statistics", "overflow_check"], default="overflow_check")
    p.add_argument("--level", choices=["L0", "L1", "mix"], default="L1")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--bare", action="store_true", help="no debugger at all: the reference run")
    p.add_argument("--reraise", action="store_true")
    return p.parse_args(argv)


class Lines(logging.Handler):
    """What the logger "msprobe_cpp" delivers, next to its own handler (which still prints)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.lines: List[List[str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append([record.levelname, record.getMessage()])


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def exception_record(e: BaseException) -> dict:
    rec = {"type": type(e).__name__, "message": str(e), "at": time.time(),
           "is_overflow_error": isinstance(e, msprobe_cpp.OverflowError)}
    if isinstance(e, msprobe_cpp.OverflowError):
        rec["missing_fields"] = [f for f in DOCUMENTED_FIELDS if not hasattr(e, f)]
        for f in DOCUMENTED_FIELDS:
            if f not in ("overflow", "message"):
                rec[f] = _jsonable(getattr(e, f, None))
    else:
        rec["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
    return rec


def stats(t: torch.Tensor) -> Dict[str, float]:
    """A tensor's statistics in float64, as the dump gives them, for the test to compare. Through
    numpy: no call the tool hooks, so the run's records and its verdicts are the program's alone."""
    d = t.detach().numpy().astype(numpy.float64)
    with numpy.errstate(invalid="ignore", over="ignore"):
        return {"Max": float(d.max()), "Min": float(d.min()), "Mean": float(d.mean()),
                "Norm": float(numpy.sqrt((d * d).sum()))}


class Job:
    """One rank's model, optimizer and step; `model` is what start() gets and what is checked."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, result: dict) -> None:
        self.args, self.rank, self.world, self.result = args, rank, world, result
        self.model: Optional[torch.nn.Module] = None
        self.start_target: Optional[torch.nn.Module] = None  # what start() gets, when not the model
        self.opt: Optional[torch.optim.Optimizer] = None
        # Before start(): the step's batch, and a fault planted where a user's bad data or bad
        # checkpoint would come from, outside the debugger's window.
        self.data_fn: Optional[Callable[[int, bool], Any]] = None
        # Inside the window: forward and backward; returns the loss.
        self.step_fn: Optional[Callable[[Any, bool], torch.Tensor]] = None

    def sgd(self, params) -> None:
        self.opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)


def set_fault(model: torch.nn.Module, fault: Optional[str]) -> None:
    """rank_models.set_fault through wrappers: FSDP1 puts its own module where each Block was, so
    the first Block is looked up among the modules, not at model.blocks[0]."""
    first = next((m for m in model.modules() if isinstance(m, Block)), None)
    if first is not None:
        first.fault = fault


def mlp_steps(job: Job, wrapped: torch.nn.Module, model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(100 + job.rank)

    def data(i: int, faulty: bool):
        x, y = batch(g, "mlp")
        if faulty and job.args.mode == "nan_batch":
            x[1, 3] = float("nan")
        return x, y

    def step(xy, faulty: bool) -> torch.Tensor:
        x, y = xy
        if faulty and job.args.mode == "backward_nan":
            set_fault(model, "backward_nan")
        try:
            loss = torch.nn.functional.cross_entropy(wrapped(x), y)
            loss.backward()
        finally:
            set_fault(model, None)
        return loss
    job.data_fn, job.step_fn = data, step


# --- the jobs ---------------------------------------------------------------------------------------

class TPMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def tp(job: Job) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (job.world,))
    model = job.model = parallelize_module(TPMLP(), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    job.sgd(model.parameters())
    g = torch.Generator().manual_seed(100)  # tensor parallel: every rank the same batch

    def data(i: int, faulty: bool):
        if faulty and job.args.mode == "nan_weight":
            with torch.no_grad():  # a bad shard on one rank: a checkpoint or an update that went wrong there
                model.fc1.weight._local_tensor[0, 0] = float("nan")
        return torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)

    def step(xy, faulty: bool) -> torch.Tensor:
        x, y = xy
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    job.data_fn, job.step_fn = data, step


class Stage0(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Stage1(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = torch.nn.ReLU()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(h))


def pipeline(job: Job) -> None:
    torch.manual_seed(0)  # both stages built on both ranks: the same weights whoever runs them
    stages = [Stage0(), Stage1()]
    model = job.model = stages[job.rank]
    job.sgd(model.parameters())
    g = torch.Generator().manual_seed(100)
    job.result.update(sent=[], received=[])
    mode = job.args.mode

    def data(i: int, faulty: bool):
        return torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)

    def step(xy, faulty: bool) -> torch.Tensor:
        x, y = xy
        if job.rank == 0:
            h = model(x)
            if faulty and mode == "send_op":
                h = h * OVERFLOW_FACTOR
            wire = h.detach()
            if faulty and mode == "send_op_detached":
                wire = wire * OVERFLOW_FACTOR  # a scaling of what goes on the wire, as fp16 communication does
            job.result["sent"].append(stats(wire))
            dist.send(wire, dst=1)
            grad = torch.full_like(h, RECV_SENTINEL)
            dist.recv(grad, src=1)
            job.result["received"].append(stats(grad))
            h.backward(grad)
            # The loss lives on the last stage: rank 0's loss is a stand-in, 0.
            return torch.zeros(())
        buf = torch.full((4, 16), RECV_SENTINEL)
        dist.recv(buf, src=0)
        job.result["received"].append(stats(buf))
        buf.requires_grad_(True)
        logits = model(buf)
        if faulty and mode == "stage2_op":
            logits = logits * OVERFLOW_FACTOR
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        job.result["sent"].append(stats(buf.grad))
        dist.send(buf.grad, dst=0)
        return loss
    job.data_fn, job.step_fn = data, step


class CpuSyncBN(torch.nn.Module):
    """Batch norm whose batch statistics are summed over the ranks in forward (what SyncBatchNorm
    does on GPUs), with the running statistics a NaN would poison."""

    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.d, self.eps = d, eps
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.bias = torch.nn.Parameter(torch.zeros(d))
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        count = torch.full((1,), float(x.shape[0]))
        moments = torch.cat([x.sum(0), (x * x).sum(0), count])
        dist.all_reduce(moments)
        n = moments[-1]
        mean = moments[:self.d] / n
        var = moments[self.d:2 * self.d] / n - mean * mean
        with torch.no_grad():
            self.running_mean.mul_(0.9).add_(0.1 * mean)
            self.running_var.mul_(0.9).add_(0.1 * var)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def syncbn(job: Job) -> None:
    torch.manual_seed(0)
    model = job.model = torch.nn.Sequential(CpuSyncBN(8), torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                            torch.nn.Linear(16, 4))
    wrapped = torch.nn.parallel.DistributedDataParallel(model)
    job.sgd(wrapped.parameters())
    mlp_steps(job, wrapped, model)
    job.start_target = wrapped


def fsdp1(job: Job) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    torch.manual_seed(0)
    model = MLP()
    wrapped = job.model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                                   device_id=torch.device("cpu"))
    job.sgd(wrapped.parameters())
    mlp_steps(job, wrapped, model)


def fsdp2_bf16(job: Job) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    torch.manual_seed(0)
    model = job.model = MLP()
    mesh = init_device_mesh("cpu", (job.world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    job.sgd(model.parameters())
    mlp_steps(job, model, model)


def ddp(job: Job) -> None:
    torch.manual_seed(0)
    model = job.model = MLP()
    wrapped = torch.nn.parallel.DistributedDataParallel(model)
    job.sgd(wrapped.parameters())
    mlp_steps(job, wrapped, model)
    job.start_target = wrapped


BUILD = {"tp": tp, "pipeline": pipeline, "syncbn": syncbn, "fsdp1": fsdp1, "fsdp2_bf16": fsdp2_bf16, "ddp": ddp}


def train(job: Job, attempt: str) -> None:
    args = job.args
    BUILD[args.job](job)
    target = job.start_target or job.model
    debugger = None if args.bare else msprobe_cpp.PrecisionDebugger(
        task=args.task, dump_path=str(pathlib.Path(args.out) / "dump"), level=args.level)
    for i in range(args.steps):
        faulty = (args.mode != "clean" and job.rank == args.bad_rank and i == args.bad_step
                  and attempt == args.fault_attempt)
        if faulty:
            job.result["fault_at"] = time.time()
            if args.mode == "raise":
                raise RuntimeError(f"raise: the fault of attempt {attempt} at step {i}, no NaN at all")
        data = job.data_fn(i, faulty)
        if debugger is not None:
            debugger.start(target)
        loss = job.step_fn(data, faulty)
        job.opt.step()
        job.opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        job.result["losses"].append(loss.item().hex())
        if faulty and args.bare:  # the damage the tool must prevent: is it there without it?
            job.result["nonfinite_after_fault_step"] = nonfinite(job.model.named_parameters())


def record_damage(job: Job, out: pathlib.Path) -> None:
    result = job.result
    result["nonfinite_params"] = nonfinite(job.model.named_parameters())
    result["nonfinite_buffers"] = nonfinite(job.model.named_buffers())
    state = []
    for i, s in enumerate(job.opt.state.values()):
        state += [(f"{i}.{k}", v) for k, v in s.items()]
    result["nonfinite_optimizer_state"] = nonfinite(state)
    torch.save(local_state(job.model), out / f"state_rank{job.rank}.pt")


# Where gloo leaves a rank's address on the store, in torch 2.x: the default group's "0", gloo's
# first context "0", the rank (torch 2.14's ProcessGroupGloo, read back with TCPStore.list_keys).
GLOO_ADDRESS_KEY = "default_pg/0//cpu//0/{rank}"


def forget_the_attempt_before(out: pathlib.Path, rank: int, world: int, attempt: str, limit_s: float = 30.0) -> None:
    """torch's own restart race, taken out of the restart tests (test_large_scale.py,
    TORCH_RESTART_RACE): where torchrun's agent serves the store (its static rendezvous, and on
    torch 2 its c10d one too), the store outlives an attempt, and with it each rank's gloo
    address of the attempt before. A rank that reads its peer's old address before the peer has
    written its new one connects to a dead port and init_process_group fails or hangs. Each rank
    deletes its old address, and no rank goes on until all have: every read then waits for the new
    one. Only gloo's keys go; the tool's own keys of attempt 0 stay on the store as in a user's run."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=limit_s))
    store.delete_key(GLOO_ADDRESS_KEY.format(rank=rank))
    (out / f"forgot_rank{rank}_attempt{attempt}").write_text("")
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if all((out / f"forgot_rank{r}_attempt{attempt}").exists() for r in range(world)):
            return
        time.sleep(0.02)


def main(argv=None) -> None:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pid_rank{rank}").write_text(str(os.getpid()))  # the launcher kills it by this, should it hang
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    lines = Lines()
    logging.getLogger("msprobe_cpp").addHandler(lines)
    torch.set_num_threads(1)
    if attempt != "0" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        forget_the_attempt_before(out, rank, world, attempt)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    (out / f"started_rank{rank}_attempt{attempt}").write_text(repr(time.time()))
    result: Dict[str, Any] = {"rank": rank, "world": world, "attempt": attempt, "args": vars(args),
                              "torch": torch.__version__, "losses": [], "raised": None, "finished": False}
    job = Job(args, rank, world, result)
    ended_with = None
    try:
        train(job, attempt)
        result["finished"] = True
    except BaseException as e:  # noqa: BLE001 - recorded for the test; the process ends normally
        ended_with = e
        result["raised"] = exception_record(e)
    try:
        if job.model is not None and job.opt is not None:
            record_damage(job, out)
    except BaseException as e:  # noqa: BLE001
        result["after_error"] = exception_record(e)
    result["log_lines"] = lines.lines
    result["exit_at"] = time.time()
    for name in (f"result_rank{rank}_attempt{attempt}.json", f"result_rank{rank}.json"):
        path = out / name
        with open(str(path) + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(str(path) + ".tmp", path)
    try:
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - a peer may have gone already
        pass
    if ended_with is not None and args.reraise:
        raise ended_with


if __name__ == "__main__":
    main()
