"""One rank of a DeepSpeed run (the CPU accelerator, gloo), started as rank_worker.py is, through
dist_runs.run_ranks(..., worker=DS_WORKER): the same OUT/result_rank<r>.json (rank_worker's
fields) and OUT/state_rank<r>.pt.

    RANK=<r> WORLD_SIZE=<n> MASTER_ADDR=... MASTER_PORT=... python3 ds_worker.py OUT --stage 2 --dtype fp16

A tiny MLP under deepspeed.initialize with torch's AdamW as the client optimizer, ZeRO stage
--stage at DeepSpeed's default bucket sizes, --dtype bf16, fp16 (DeepSpeed's dynamic loss scaler,
2**--scale-power to start, hysteresis --hysteresis) or fp32, --accum micro-batches a step,
gradient clipping at 1.0. The debugger is started on the engine at each step's first micro-batch
and stopped after the engine's step at its last. On rank --bad-rank in step --bad-step, a fault:

  nan_batch     a NaN in the first micro-batch's input
  op_overflow   the hidden activations times the dtype's largest value: inf out of that mul
  lr_inf        the optimizer's lr is inf for that step (restored after it)
  nan_shard     a NaN written into the rank's own first parameter (its ZeRO-3 shard, p.ds_tensor)

The state saved and looked at: the module's parameters as this rank holds them (ZeRO-3: its
shards) and every fp32 tensor the ZeRO optimizer keeps (its partitions, flat groups and state).
"""
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402
from typing import Dict, Iterator, List, Tuple  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import msprobe_cpp  # noqa: E402
from rank_worker import exception_record  # noqa: E402

FAULTS = ["clean", "nan_batch", "op_overflow", "lr_inf", "nan_shard"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MICRO_BATCH = 4


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--stage", type=int, choices=[0, 1, 2, 3], default=1)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--mode", choices=FAULTS, default="clean")
    p.add_argument("--bad-rank", type=int, default=-1)
    p.add_argument("--bad-step", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--accum", type=int, default=2, help="gradient_accumulation_steps")
    p.add_argument("--scale-power", type=int, default=16, help="fp16: initial_scale_power")
    p.add_argument("--hysteresis", type=int, default=2, help="fp16: the scaler's hysteresis")
    p.add_argument("--task", choices=["statistics", "overflow_check", "grad_probe"], default="overflow_check")
    p.add_argument("--level", choices=["L1", "mix"], default="L1")
    p.add_argument("--bare", action="store_true", help="no debugger: the reference run")
    p.add_argument("--with-bare", action="store_true",
                   help="first the reference run, in the same processes, into OUT/bare")
    return p.parse_args(argv)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 4)
        self.fault = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if self.fault:
            # (|h| + 2) * max is past the dtype's range in every element: inf requiring grad.
            h = (h.abs() + 2) * torch.finfo(h.dtype).max
        return self.head(torch.relu(self.fc2(h)))


def ds_config(args: argparse.Namespace) -> dict:
    cfg = {"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": args.accum,
           "gradient_clipping": 1.0,
           # ZeRO-3 keeps a parameter this small whole on every rank; 0 partitions it as a large one.
           "zero_optimization": {"stage": args.stage, "stage3_param_persistence_threshold": 0},
           "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    if args.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif args.dtype == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": args.scale_power,
                       "hysteresis": args.hysteresis, "loss_scale_window": 1000}
    return cfg


def allow_cpu_fp16() -> None:
    """DeepSpeed's CPU accelerator says it has no fp16 (its kernels); the half arithmetic that
    torch does runs on the CPU all the same."""
    from deepspeed.accelerator import get_accelerator
    accelerator = get_accelerator()
    accelerator.is_fp16_supported = lambda: True
    accelerator.supported_dtypes = lambda: [torch.float32, torch.float16, torch.bfloat16]


def _tensors(value, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v, depth + 1)


def held_state(engine) -> List[Tuple[str, torch.Tensor]]:
    """The module's parameters as this rank holds them (a ZeRO-3 parameter: its shard), then every
    floating-point tensor the engine's optimizer keeps in its attributes (ZeRO's fp32 partitions
    and flat groups) and in its base optimizer's state."""
    out = []
    for name, p in engine.module.named_parameters():
        out.append((f"module.{name}", getattr(p, "ds_tensor", p).detach()))
    opt = engine.optimizer
    for attr, value in sorted(vars(opt).items()):
        if attr in ("optimizer", "param_names", "averaged_gradients", "ipg_buffer"):
            continue
        for i, t in enumerate(_tensors(value)):
            if t.is_floating_point() and t.numel() > 0 and t.dtype == torch.float32 and not t.is_meta:
                out.append((f"optimizer.{attr}.{i}", t.detach()))
    base = getattr(opt, "optimizer", opt)
    for i, s in enumerate(base.state.values()):
        for k, v in s.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                out.append((f"state.{i}.{k}", v.detach()))
    return out


def nonfinite(named) -> List[str]:
    return [n for n, t in named if not bool(torch.isfinite(t.float()).all())]


def plant(engine, net: Net, args: argparse.Namespace, x: torch.Tensor) -> None:
    if args.mode == "nan_batch":
        x[1, 3] = float("nan")
    elif args.mode == "op_overflow":
        net.fault = True
    elif args.mode == "lr_inf":
        for group in engine.optimizer.param_groups:
            group["lr"] = float("inf")
    elif args.mode == "nan_shard":
        p = net.fc1.weight
        with torch.no_grad():
            getattr(p, "ds_tensor", p).view(-1)[0] = float("nan")


def unplant(engine, net: Net, args: argparse.Namespace) -> None:
    net.fault = False
    if args.mode == "lr_inf":
        for group in engine.optimizer.param_groups:
            group["lr"] = 1e-3


_ENGINE = {}


def train(args: argparse.Namespace, out: pathlib.Path, rank: int, result: Dict) -> None:
    import deepspeed
    if args.dtype == "fp16":
        allow_cpu_fp16()
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=ds_config(args))
    _ENGINE["engine"] = engine  # what _finish looks at, however the run ends
    debugger = None if args.bare else msprobe_cpp.PrecisionDebugger(
        task=args.task, dump_path=str(out / "dump"), level=args.level)
    if debugger is not None and args.task == "grad_probe":
        debugger.monitor(engine)
    g = torch.Generator().manual_seed(100 + rank)
    dtype = DTYPES[args.dtype]
    step_seconds = []
    try:
        for step in range(args.steps):
            began = time.perf_counter()
            faulty = rank == args.bad_rank and step == args.bad_step and args.mode != "clean"
            losses = []
            for micro in range(args.accum):
                x = torch.randn(MICRO_BATCH, 16, generator=g).to(dtype)
                y = torch.randint(0, 4, (MICRO_BATCH,), generator=g)
                if faulty and micro == 0:
                    result["fault_at"] = time.time()
                    plant(engine, net, args, x)
                if debugger is not None and micro == 0:
                    debugger.start(engine)
                loss = torch.nn.functional.cross_entropy(engine(x).float(), y)
                engine.backward(loss)
                engine.step()
                losses.append(loss.item().hex())
            unplant(engine, net, args)
            if debugger is not None:
                debugger.stop()
                debugger.step()
            step_seconds.append(time.perf_counter() - began)
            result["losses"].append(losses)
            result["skipped_steps"] = int(getattr(engine, "skipped_steps", 0))
            if args.dtype == "fp16":
                from msprobe_cpp.deepspeed_engine import DeepSpeedLossScaler
                result["scales"].append(DeepSpeedLossScaler(engine).get_scale())
    finally:
        unplant(engine, net, args)
        # The median step after the first (DeepSpeed sets up its buckets in its first step).
        later = sorted(step_seconds[1:] or step_seconds or [0.0])
        result["seconds_per_step"] = later[len(later) // 2]


def run_rank(args: argparse.Namespace) -> None:
    out = pathlib.Path(args.out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pid_rank{rank}").write_text(str(os.getpid()))
    torch.set_num_threads(1)
    os.environ.setdefault("LOCAL_RANK", str(rank))  # DeepSpeed reads the launcher's variables from it
    import deepspeed
    # DeepSpeed's CPU accelerator compiles its shared-memory inference all-reduce (the
    # deepspeed_shm_comm op, a minute of the suite's two cores, again for each venv path) when
    # it starts its torch backend. Training never calls it (TorchBackend.inference_all_reduce
    # alone does): these ranks go without it, through gloo as a machine without a compiler does.
    # (deepspeed.comm's own `import torch` hides the submodule's attribute: taken by its name.)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    if args.with_bare:  # one start of torch and DeepSpeed for both runs: a clean test's pair
        bare = pathlib.Path(out, "bare")
        bare.mkdir(exist_ok=True)
        train_into(argparse.Namespace(**{**vars(args), "bare": True}), bare, rank, world)
    train_into(args, out, rank, world)
    try:
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - a peer may have gone already
        pass


def train_into(args: argparse.Namespace, out: pathlib.Path, rank: int, world: int) -> None:
    """One run: OUT/result_rank<r>.json and OUT/state_rank<r>.pt."""
    result = {"rank": rank, "world": world, "args": vars(args), "losses": [], "exceptions": [], "raised": None,
              "finished": False, "fault_at": None, "torch": torch.__version__, "scales": []}
    _ENGINE.clear()
    try:
        train(args, out, rank, result)
        result["finished"] = True
    except BaseException as e:  # noqa: BLE001 - recorded for the test; the process ends normally
        rec = exception_record(e)
        result["raised"] = rec
        result["exceptions"].append(rec)
    result["exit_at"] = time.time()
    _finish(out, rank, result)


def _finish(out: pathlib.Path, rank: int, result: Dict) -> None:
    engine = _ENGINE.get("engine")
    if engine is not None:
        try:
            state = held_state(engine)
            result["nonfinite_state"] = nonfinite(state)
            result["state_names"] = [n for n, _ in state]
            torch.save({n: t.clone() for n, t in state}, out / f"state_rank{rank}.pt")
        except BaseException as e:  # noqa: BLE001
            result["after_error"] = exception_record(e)
    path = out / f"result_rank{rank}.json"
    with open(str(path) + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(str(path) + ".tmp", path)


if __name__ == "__main__":
    run_rank(parse_args())
