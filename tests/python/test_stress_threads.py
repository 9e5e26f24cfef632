"""Four Python threads, each training its own model, under one PrecisionDebugger (issue 21).

Each thread runs ITERATIONS training iterations (forward, loss, loss.backward(), optimizer.step(),
zero_grad) of its own two-layer MLP. The debugger has one step for the whole process, so its steps
can only move while no thread is inside one: the threads meet at a barrier every ITERS_PER_STEP
iterations, and the barrier's action (run by the last thread to arrive) ends the debugger step and
starts the next. Between two meetings the threads run free, so one thread's backward overlaps
another's forward or optimizer step, and each step's counters are shared by four threads.

What each step's dump must hold is not written down here: a single-threaded run of the same loop
with the same config, run first, gives it, and four threads must give four times its records.
"""
import collections
import faulthandler
import pathlib
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Counter, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp

from dumps import load

THREADS = 4
ITERATIONS = 200
ITERS_PER_STEP = 10
STEPS = ITERATIONS // ITERS_PER_STEP
# A barrier or a join that waits this long is a deadlock: fail with every thread's stack rather
# than hang the suite. A whole configuration takes a few seconds.
HANG_S = 120.0

# The overflow variant: thread 2's batch holds NaN at a late iteration, in the middle of a
# debugger step, so that the flagged step already holds five finished iterations of that thread.
NAN_THREAD = 2
NAN_ITERATION = 155
NAN_STEP = NAN_ITERATION // ITERS_PER_STEP
NAN_DONE_IN_STEP = NAN_ITERATION % ITERS_PER_STEP


class TwoLayer(nn.Module):
    """fc2(relu(fc1(x))): three module records and three API records per forward at mix."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


@dataclass
class Job:
    """One thread's model, optimizer and data, and what happened to it."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    batches: List[Tuple[torch.Tensor, torch.Tensor]]
    losses: List[float] = field(default_factory=list)
    done: int = 0  # iterations finished
    overflows: List[msprobe_cpp.OverflowError] = field(default_factory=list)
    error: Optional[BaseException] = None  # anything else the thread raised


def make_job(seed: int, nan_at: Tuple[int, ...] = ()) -> Job:
    """Seeded, so make_job(0) twice gives equal weights and batches; the batches of the iterations
    `nan_at` hold one NaN. Call it before any debugger starts: building the data must not be
    recorded."""
    torch.manual_seed(seed)
    model = TwoLayer()
    # SGD without momentum and foreach=False: the same per-parameter Tensor.add_ calls at every
    # iteration (step 0 included) on both torches, so every step's dump has the same records.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
    g = torch.Generator().manual_seed(1000 + seed)
    batches = [(torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g))
               for _ in range(ITERATIONS)]
    for i in nan_at:
        x, y = batches[i]
        x = x.clone()
        x[0, 0] = float("nan")
        batches[i] = (x, y)
    return Job(model, optimizer, batches)


def train_iteration(job: Job, i: int) -> None:
    x, y = job.batches[i]
    loss = F.cross_entropy(job.model(x), y)
    loss.backward()
    job.optimizer.step()
    # set_to_none=True (1.13's default is False): no Tensor.zero_ records from the second
    # iteration on, so every iteration records the same calls.
    job.optimizer.zero_grad(set_to_none=True)
    job.losses.append(loss.item())  # not a hooked call: no record


def plain_losses(seed: int, iterations: int = ITERATIONS) -> List[float]:
    """The losses of job `seed` trained without a debugger. Call it while none is live."""
    job = make_job(seed)
    for i in range(iterations):
        train_iteration(job, i)
    return job.losses


def run(dbg: msprobe_cpp.PrecisionDebugger, jobs: List[Job], go_on: bool = False) -> None:
    """Trains every job in a thread of its own under `dbg`; returns when all are done. A thread
    that an OverflowError stopped trains no more (with `go_on`, it skips that batch and goes on,
    as the README's loop does), but still meets the others at the barrier: the debugger's steps
    move on only when every thread is out of the step."""
    models = [job.model for job in jobs]
    ended = [0]

    def next_step() -> None:  # the barrier's action: every other thread is waiting at it
        dbg.stop()
        dbg.step()
        ended[0] += 1
        if ended[0] < STEPS:
            dbg.start(models)

    barrier = threading.Barrier(len(jobs), action=next_step, timeout=HANG_S)

    def work(job: Job) -> None:
        try:
            for i in range(ITERATIONS):
                if go_on or not job.overflows:
                    try:
                        train_iteration(job, i)
                        job.done += 1
                    except msprobe_cpp.OverflowError as e:
                        job.overflows.append(e)
                if (i + 1) % ITERS_PER_STEP == 0:
                    barrier.wait()
        except BaseException as e:  # noqa: BLE001 - asserted on by the test
            job.error = e
            barrier.abort()  # the others must not wait for this thread until the timeout

    dbg.start(models)  # the first model's modules keep their names; model t's get `model<t>.`
    threads = [threading.Thread(target=work, args=(job,), daemon=True) for job in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(HANG_S)
    if any(th.is_alive() for th in threads):
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        pytest.fail(f"threads still running after {HANG_S:.0f} s: a deadlock (stacks on stderr)")
    errors = {t: job.error for t, job in enumerate(jobs) if job.error is not None}
    assert not errors, f"threads raised: {errors!r}"


# Records and their names


@dataclass(frozen=True)
class Name:
    family: str             # the name without its counter: "Functional.linear.forward"
    thread: Optional[int]   # a module record's model (the thread that trains it); None for APIs
    index: int

    @property
    def is_module(self) -> bool:
        return self.thread is not None


MODULE_NAME = re.compile(r"Module\.(?:model(?P<model>\d+)\.)?(?P<path>.+)\.(?P<dir>forward|backward)"
                         r"\.(?P<n>\d+)$")
API_NAME = re.compile(r"(?P<api>.+)\.(?P<n>\d+)\.(?P<dir>forward|backward)$")


def parse(name: str) -> Name:
    """Module names carry their own counter, one per module (so one per thread here); API names
    share one counter per API among all threads."""
    m = MODULE_NAME.match(name)
    if m:
        return Name(f"Module.{m['path']}.{m['dir']}", int(m["model"] or 0), int(m["n"]))
    m = API_NAME.match(name)
    assert m, f"not a record name: {name}"
    return Name(f"{m['api']}.{m['dir']}", None, int(m["n"]))


@dataclass
class StepDump:
    data: Dict[str, Any]
    construct: Dict[str, Optional[str]]
    stack: Dict[str, Any]


def step_dump(root: pathlib.Path, step: int) -> StepDump:
    folder = root / f"step{step}" / "rank"
    return StepDump(load(folder)["data"], load(folder, "construct.json"), load(folder, "stack.json"))


def families(names: List[str], keep: Callable[[Name], bool] = lambda n: True) -> Counter[str]:
    return collections.Counter(n.family for n in map(parse, names) if keep(n))


def missing_indices(names: List[str]) -> Dict[Tuple[str, Optional[int]], List[int]]:
    """For each counter (an API's, shared by the threads; a module's, one thread's), the numbers
    below its largest that no record has. API backward records are left out here: they carry
    their forward's number (checked below)."""
    seen: Dict[Tuple[str, Optional[int]], set] = collections.defaultdict(set)
    for n in map(parse, names):
        if n.is_module or n.family.endswith(".forward"):
            seen[(n.family, n.thread)].add(n.index)
    return {key: sorted(set(range(max(idx) + 1)) - idx) for key, idx in seen.items()
            if len(idx) != max(idx) + 1}


def backward_without_forward(names: List[str]) -> List[str]:
    parsed = [parse(n) for n in names]
    forwards = {(n.family, n.index) for n in parsed if not n.is_module}
    return [name for name, n in zip(names, parsed) if not n.is_module and n.family.endswith(".backward")
            and (n.family[: -len("backward")] + "forward", n.index) not in forwards]


def children(dump: StepDump) -> Dict[str, Counter[str]]:
    """Module forward call -> the families of the API calls construct.json puts inside it."""
    out: Dict[str, Counter[str]] = collections.defaultdict(collections.Counter)
    for name, parent in dump.construct.items():
        if parent is not None and not name.startswith("Module.") and ".forward" in name:
            out[parent][parse(name).family] += 1
    return out


def check_complete_step(step: int, dump: StepDump, ref: StepDump, level: str) -> None:
    """A step in which every thread ran ITERS_PER_STEP iterations: four times the reference."""
    names = list(dump.data)
    expected = families(list(ref.data))
    assert families(names) == {f: THREADS * c for f, c in expected.items()}, f"step {step}"
    # Each thread's module records: one reference's worth, counted by its own counters.
    module_expected = {f: c for f, c in expected.items() if f.startswith("Module.")}
    for t in range(THREADS):
        assert families(names, lambda n: n.thread == t) == module_expected, f"step {step}, thread {t}"
    assert missing_indices(names) == {}, f"step {step}: counters with gaps"
    assert backward_without_forward(names) == [], f"step {step}"
    # msprobe writes a stack for each forward record, none for backward ones.
    assert set(dump.stack) == {n for n in names if parse(n).family.endswith(".forward")}
    if level == "mix":
        assert set(dump.construct) == set(dump.data)
        # A call is put inside the module call of its own thread: each module call holds what it
        # holds single-threaded (one Functional.linear in each fc1 call, not two and none) ...
        expected_inside = {parse(parent).family: inside for parent, inside in children(ref).items()}
        inside = children(dump)
        for name in names:
            n = parse(name)
            if n.is_module and n.family.endswith(".forward"):
                assert inside.get(name, collections.Counter()) == \
                    expected_inside.get(n.family, collections.Counter()), f"step {step}: {name}"
        # ... and got the very tensor its module got: the same statistics of the first input.
        for name, parent in dump.construct.items():
            if parent is not None and not name.startswith("Module.") and ".forward" in name:
                assert dump.data[name]["input_args"][0] == dump.data[parent]["input_args"][0], name


def check_stopped_step(step: int, names: List[str]) -> None:
    """A step that a stop in one thread ended: the other threads were stopped nowhere in
    particular. Each one's module records are numbered from 0 without a gap (a thread makes its
    calls one after another). An API counter is shared: a number can be missing only for a call
    that was running in another thread when the stop ended the step, at most one per thread."""
    gaps = missing_indices(names)
    assert not [key for key in gaps if key[1] is not None], f"step {step}: {gaps}"
    assert sum(len(v) for v in gaps.values()) <= THREADS - 1, \
        f"step {step}: more numbers missing than calls were running (records of another step?): {gaps}"
    assert backward_without_forward(names) == [], f"step {step}"


CONFIGS = [
    pytest.param("mix", "statistics", id="mix-statistics"),
    pytest.param("L1", "statistics", id="L1-statistics"),
    pytest.param("mix", "overflow_check", id="mix-overflow_check"),
]


@pytest.mark.parametrize("level,task", CONFIGS)
def test_four_threads_train_under_one_debugger(tmp_path: pathlib.Path, level: str, task: str) -> None:
    plain = [plain_losses(t) for t in range(THREADS)]
    reference_job = make_job(0)
    jobs = [make_job(t) for t in range(THREADS)]

    def debugger(dump: pathlib.Path) -> msprobe_cpp.PrecisionDebugger:
        # A finite step list: after the last step every hook is removed, so the reference's
        # debugger is done before the threads' one is made.
        return msprobe_cpp.PrecisionDebugger(dump_path=str(dump), level=level, task=task,
                                             step=list(range(STEPS)))

    run(debugger(tmp_path / "reference"), [reference_job])
    run(debugger(tmp_path / "threads"), jobs)

    assert [job.done for job in jobs] == [ITERATIONS] * THREADS
    assert [job.overflows for job in jobs] == [[]] * THREADS
    # The hooks change no value, in any thread.
    assert [job.losses for job in jobs] == plain and reference_job.losses == plain[0]
    if task == "overflow_check":
        # Only flagged steps are dumped; a clean run writes nothing at all.
        for dump in ("reference", "threads"):
            assert not (tmp_path / dump).exists() or list((tmp_path / dump).iterdir()) == []
        return
    for step in range(STEPS):
        ref = step_dump(tmp_path / "reference", step)
        assert len(ref.data) % ITERS_PER_STEP == 0  # every iteration records the same calls
        check_complete_step(step, step_dump(tmp_path / "threads", step), ref, level)
    assert sorted(p.name for p in (tmp_path / "threads").iterdir()) == \
        sorted(f"step{s}" for s in range(STEPS))


def test_nan_in_one_threads_batch_stops_that_thread_only(tmp_path: pathlib.Path) -> None:
    """At mix under overflow_check: thread 2's batch holds NaN at iteration 155 (debugger step
    15). Thread 2 gets the OverflowError at its first call, and trains no more; the three others
    finish their 200 iterations. The flagged step is the only one on disk."""
    plain = [plain_losses(t, NAN_ITERATION if t == NAN_THREAD else ITERATIONS) for t in range(THREADS)]
    reference_job = make_job(0)
    jobs = [make_job(t, nan_at=(NAN_ITERATION,) if t == NAN_THREAD else ()) for t in range(THREADS)]
    # The records a thread makes per iteration: from a single-threaded statistics run, since
    # overflow_check collects the same calls but writes only flagged steps.
    run(msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "reference"), level="mix",
                                      step=list(range(STEPS))), [reference_job])
    told: List[msprobe_cpp.Overflow] = []
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "threads"), level="mix",
                                        task="overflow_check", step=list(range(STEPS)),
                                        on_overflow=told.append)
    run(dbg, jobs)

    assert [job.done for job in jobs] == [NAN_ITERATION if t == NAN_THREAD else ITERATIONS
                                          for t in range(THREADS)]
    assert [len(job.overflows) for job in jobs] == [int(t == NAN_THREAD) for t in range(THREADS)]
    e = jobs[NAN_THREAD].overflows[0]
    # The batch of thread 2 is named, in its own module call: fc1 of model 2, its sixth in the step.
    assert (e.step, e.origin) == (NAN_STEP, "input")
    assert re.fullmatch(r"Functional\.linear\.\d+\.forward", e.call), e.call
    assert e.module == f"Module.model{NAN_THREAD}.fc1.Linear.forward.{NAN_DONE_IN_STEP}"
    assert [o.call for o in told] == [e.call]  # on_overflow once, for that finding
    assert [job.losses for job in jobs] == plain  # the others trained on, untouched

    # Only the flagged step is written: the steps after it are clean in every thread.
    root = tmp_path / "threads"
    assert sorted(p.name for p in root.iterdir()) == [f"step{NAN_STEP}"]
    folder = root / f"step{NAN_STEP}" / "rank"
    assert {"dump.json", "stack.json", "construct.json", "overflow_report.json"} <= \
        {p.name for p in folder.iterdir()}
    first = load(folder, "overflow_report.json")["first_anomaly"]
    assert (first["api_name"], first["origin"], first["module"]) == (e.call, "input", e.module)

    # dump.json holds the step up to the stop. Thread 2's part is complete: its five finished
    # iterations, numbered 0..4 by its own module counters (the sixth fc1 call never returned).
    dump = step_dump(root, NAN_STEP)
    names = list(dump.data)
    assert e.call in dump.data and dump.construct[e.call] == e.module
    per_iteration = families(list(step_dump(tmp_path / "reference", NAN_STEP).data),
                             lambda n: n.is_module)
    assert families(names, lambda n: n.thread == NAN_THREAD) == \
        {f: c // ITERS_PER_STEP * NAN_DONE_IN_STEP for f, c in per_iteration.items()}
    check_stopped_step(NAN_STEP, names)


def test_a_caught_stop_leaves_the_next_step_its_own_calls(tmp_path: pathlib.Path) -> None:
    """The README's loop: catch the OverflowError, skip the batch, go on. Thread 2 does, and its
    batch holds NaN at the same iteration of every debugger step, so every step is flagged and
    (overflow_nums -1) written, and every step but the first follows a step that a stop ended.
    The calls that the other threads were making when a stop ended step S belong to step S: step
    S+1's dump holds step S+1's calls only, numbered by step S+1's counters."""
    nan_at = tuple(s * ITERS_PER_STEP + NAN_DONE_IN_STEP for s in range(STEPS))
    jobs = [make_job(t, nan_at=nan_at if t == NAN_THREAD else ()) for t in range(THREADS)]
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="mix", task="overflow_check",
                                        step=list(range(STEPS)), overflow_nums=-1)
    run(dbg, jobs, go_on=True)

    assert [job.done for job in jobs] == [ITERATIONS - STEPS if t == NAN_THREAD else ITERATIONS
                                          for t in range(THREADS)]
    stopped = jobs[NAN_THREAD].overflows
    module = f"Module.model{NAN_THREAD}.fc1.Linear.forward.{NAN_DONE_IN_STEP}"
    assert [(e.step, e.origin, e.module) for e in stopped] == [(s, "input", module) for s in range(STEPS)]
    assert [job.overflows for t, job in enumerate(jobs) if t != NAN_THREAD] == [[]] * (THREADS - 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"step{s}" for s in range(STEPS))
    for e in stopped:
        dump = step_dump(tmp_path, e.step)  # load() fails on a name written twice
        assert dump.construct[e.call] == e.module
        check_stopped_step(e.step, list(dump.data))
