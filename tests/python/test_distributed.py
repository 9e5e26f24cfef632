"""A real 2-process torch.distributed run (gloo, localhost) under the debugger.

The test starts both ranks itself (dist_worker.py), bounded in time, and reads their dumps:
each rank writes its own step0/rank<R> folder with its own statistics, the all_reduce of the
gradients is recorded by both, and config "rank": [1] leaves rank 0 without any output although it
takes part in the collectives.
"""
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Dict, List, Optional

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402
from dumps import load  # noqa: E402
from gloo import free_port, needs_gloo  # noqa: E402
from testenv import PACKAGE_ROOT, TESTS  # noqa: E402

WORKER = TESTS / "dist_worker.py"
WORLD_SIZE = 2
TIMEOUT_S = 120.0

pytestmark = needs_gloo


def write_config(tmp_path: pathlib.Path, rank: List) -> pathlib.Path:
    config = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
              "step": [0], "rank": rank}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def _start_and_wait(tmp_path: pathlib.Path, config: pathlib.Path, port: int,
                    attempt: int) -> Optional[str]:
    """Starts both ranks and waits for them (TIMEOUT_S in all). Returns None when both exited
    with 0, else their exit codes and output. On timeout kills both and fails the test."""
    env = dict(os.environ)
    env.update({
        "WORLD_SIZE": str(WORLD_SIZE), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "GLOO_SOCKET_IFNAME": "lo",  # loopback only
        "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), str(TESTS)]
                                      + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        "OMP_NUM_THREADS": "1",
    })
    procs: List[subprocess.Popen] = []
    logs = []
    timed_out = False
    try:
        for rank in range(WORLD_SIZE):
            # Output goes to files, not pipes: a rank blocked on a full pipe would hang the other
            # in the collective.
            out = open(tmp_path / f"worker{rank}.try{attempt}.log", "w+")
            logs.append(out)
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), str(config), str(tmp_path)],
                env=dict(env, RANK=str(rank)), stdout=out, stderr=subprocess.STDOUT,
                cwd=str(tmp_path)))
        # Poll rather than wait on each in turn: when one rank dies, the other would wait for
        # it in a collective until the timeout, so it is killed at once instead.
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        texts = []
        for f in logs:
            f.seek(0)
            texts.append(f.read())
            f.close()
    report = "\n".join(f"--- rank {r} (exit {p.returncode}) ---\n{t}"
                       for r, (p, t) in enumerate(zip(procs, texts)))
    if timed_out:
        pytest.fail(f"the 2-process run did not finish within {TIMEOUT_S:.0f} s; killed\n{report}")
    return report if any(p.returncode != 0 for p in procs) else None


def run_two_ranks(tmp_path: pathlib.Path, config: pathlib.Path) -> Dict[int, dict]:
    """Runs the two ranks; returns what each worker computed itself, by rank."""
    for attempt in range(3):
        failure = _start_and_wait(tmp_path, config, free_port(), attempt)
        # The free port can be taken between our probe and the master binding it: only then
        # is another try worth it.
        if failure is None or "Address already in use" not in failure:
            break
    if failure is not None:
        pytest.fail(f"the 2-process run failed\n{failure}")
    return {r: json.loads((tmp_path / f"expected_rank{r}.json").read_text()) for r in range(WORLD_SIZE)}


def test_each_rank_dumps_its_own_folder_with_its_own_statistics(tmp_path):
    config = write_config(tmp_path, rank=[])
    expected = run_two_ranks(tmp_path, config)
    step0 = tmp_path / "dump" / "step0"
    assert sorted(p.name for p in step0.iterdir()) == ["rank0", "rank1"]

    linear_inputs = {}
    reduce_inputs = {}
    for rank in range(WORLD_SIZE):
        folder = step0 / f"rank{rank}"
        for name in ("dump.json", "stack.json", "construct.json"):
            assert (folder / name).is_file(), f"{folder / name} missing"
        dump = load(folder, "dump.json")
        assert dump["task"] == "statistics" and dump["level"] == "L1"
        data = dump["data"]
        names = list(data)
        assert "Functional.linear.0.forward" in data
        # One all_reduce per parameter (weight, then bias), after the backward, then one with a group.
        assert "Distributed.all_reduce.0.forward" in data, names
        assert "Distributed.all_reduce.1.forward" in data, names
        assert "Distributed.all_reduce.3.forward" not in data, names
        assert names.index("Distributed.all_reduce.0.forward") > names.index("Functional.linear.0.backward")
        # As msprobe writes it: a stack for every forward record, none for backward records.
        assert set(load(folder, "stack.json")) == {n for n in data if not n.endswith(".backward")}
        assert load(folder, "construct.json") == {}  # no modules at L1, as msprobe writes it

        x = data["Functional.linear.0.forward"]["input_args"][0]
        assert x["type"] == "torch.Tensor" and x["shape"] == [3, 8] and x["dtype"] == "torch.float32"
        assert x["Max"] == pytest.approx(expected[rank]["Max"], rel=1e-6)
        assert x["Min"] == pytest.approx(expected[rank]["Min"], rel=1e-6)
        linear_inputs[rank] = (x["Max"], x["Min"])

        grad = data["Distributed.all_reduce.0.forward"]["input_args"][0]
        assert grad["type"] == "torch.Tensor"
        assert grad["shape"] == [4, 8] and grad["dtype"] == "torch.float32"
        # The rank's own gradient, as it was before the reduction.
        assert grad["Max"] == pytest.approx(expected[rank]["grad_Max"], rel=1e-5, abs=1e-6)
        assert grad["Min"] == pytest.approx(expected[rank]["grad_Min"], rel=1e-5, abs=1e-6)
        reduce_inputs[rank] = (grad["Max"], grad["Min"])
        assert data["Distributed.all_reduce.1.forward"]["input_args"][0]["shape"] == [4]
        # msprobe's record of a process group: its ranks, and the md5 of their text.
        assert data["Distributed.all_reduce.2.forward"]["input_kwargs"]["group"] == {
            "type": "torch.ProcessGroup", "group_ranks": [0, 1],
            "group_id": hashlib.md5(b"[0, 1]").hexdigest()}

    assert linear_inputs[0] != linear_inputs[1]  # different data on each rank, different statistics
    assert reduce_inputs[0] != reduce_inputs[1]
    # The collective really ran: both ranks end with the same averaged gradients.
    assert expected[0]["grad_sum"] == pytest.approx(expected[1]["grad_sum"], rel=1e-6)


def test_rank_list_1_leaves_rank_0_without_output(tmp_path):
    config = write_config(tmp_path, rank=[1])
    expected = run_two_ranks(tmp_path, config)  # rank 0 still takes part: both finish
    dump_path = tmp_path / "dump"
    assert sorted(p.name for p in (dump_path / "step0").iterdir()) == ["rank1"]
    assert not [p for p in dump_path.rglob("rank0*")], "rank 0 wrote something"
    assert not [p for p in dump_path.rglob("rank") if p.is_dir()]
    folder = dump_path / "step0" / "rank1"
    for name in ("dump.json", "stack.json", "construct.json"):
        assert (folder / name).is_file()
    data = load(folder, "dump.json")["data"]
    assert "Distributed.all_reduce.0.forward" in data
    x = data["Functional.linear.0.forward"]["input_args"][0]
    assert x["Max"] == pytest.approx(expected[1]["Max"], rel=1e-6)
    assert x["Min"] == pytest.approx(expected[1]["Min"], rel=1e-6)
    assert expected[0]["grad_sum"] == pytest.approx(expected[1]["grad_sum"], rel=1e-6)
