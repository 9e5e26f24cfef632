"""A full disk costs the dump, never the training: one warning, no empty folders, no files that no
dump.json names, tensor saving stops, and a step's statistics are still written when they fit.

The disk is filled two ways: a byte budget inside the writer (always), and a real tmpfs (where
this process may mount one)."""
import json
import pathlib
import subprocess
import uuid
from typing import Iterator, List

import pytest
import torch

import msprobe_cpp
from testenv import said_besides_on_line
from msprobe_cpp import _C
from dumps import data_names, load as read_dump_file
from models import make_batches, make_model, make_optimizer, train, train_step


@pytest.fixture(autouse=True)
def unlimited_after_each_test() -> Iterator[None]:
    yield
    _C._set_write_budget(-1)


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[pathlib.Path]:
    mount = tmp_path / "small_disk"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", f"tmpfs_{uuid.uuid4().hex[:8]}", str(mount)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def all_files(root: pathlib.Path) -> List[pathlib.Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def assert_no_partial_evidence(root: pathlib.Path) -> None:
    """Every folder leads to a dump.json; every file is one a dump.json accounts for."""
    for folder in (p for p in root.rglob("*") if p.is_dir()):
        assert any(folder.rglob("dump.json")) or folder.name == "dump_tensor_data" and any(folder.iterdir()), \
            f"{folder} holds no dump"
    for f in all_files(root):
        assert ".tmp." not in f.name, f"temporary left: {f}"
        if f.suffix == ".pt":
            dump = read_dump_file(f.parent.parent)
            names = json.dumps(dump["data"])
            assert f'"{f.name}"' in names, f"{f} is named by no dump.json"
        elif f.name != "filler":
            assert (f.parent / "dump.json").exists(), f"{f} has no dump.json beside it"


def names_in(dump_json: pathlib.Path) -> List[str]:
    return data_names(json.loads(dump_json.read_text())["data"])


def test_statistics_on_a_full_disk_leave_no_empty_step_folders(tmp_path, capfd):
    # Synchronous: the disk fills between two known steps' writes (test_async_dump.py has the
    # writer thread's full disk).
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="L1",
                                        async_dump=False)
    model = make_model("mlp")
    opt = make_optimizer(model)
    losses = []
    for step, (x, y) in enumerate(make_batches(model, 8)):
        if step == 2:
            _C._set_write_budget(0)   # the disk fills
        if step == 6:
            _C._set_write_budget(-1)  # and is cleaned up
        losses.append(train_step(model, opt, x, y, dbg).item())
    assert losses == train(make_model("mlp"), 8)  # the training itself is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step0", "step1", "step6", "step7"]
    assert_no_partial_evidence(tmp_path)
    err = capfd.readouterr().err
    assert err.count("could not be written") == 1, err
    assert "No space left on device" in err


def test_tensor_saving_stops_and_the_failing_step_keeps_its_statistics(tmp_path, capfd):
    # The first saved tensor (a 6.4 MB batch) does not fit; the statistics files (under 1 MB a
    # step, with pytest's deep stacks) do.
    _C._set_write_budget(3_000_000)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="tensor", level="L1", step=[0, 1, 2])
    train(make_model("mlp"), 3, batch=100_000, debugger=dbg)
    for step in range(3):
        rank = tmp_path / f"step{step}" / "rank"
        assert sorted(p.name for p in rank.iterdir()) == ["construct.json", "dump.json", "stack.json"], step
        dump = read_dump_file(rank)
        assert dump["task"] == "tensor" and dump["dump_data_dir"] is None
        assert names_in(rank / "dump.json") == []
        assert dump["data"]["Functional.linear.0.forward"]["input_args"][0]["shape"] == [100_000, 16]
    assert_no_partial_evidence(tmp_path)
    err = said_besides_on_line(capfd.readouterr().err)
    assert err.count("saving tensors failed at step 0") == 1 and "tensor saving stops" in err, err
    assert err.count("msprobe_cpp: ") == 1, err  # its path names .msprobe_cpp_partial...: the one message


def test_a_disk_that_is_full_from_the_start_gets_nothing(tmp_path, capfd):
    _C._set_write_budget(0)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), task="tensor", level="L1", step=[0, 1])
    train(make_model("mlp"), 2, debugger=dbg)
    assert list(tmp_path.iterdir()) == []
    assert said_besides_on_line(capfd.readouterr().err).count("msprobe_cpp: ") == 1


def test_real_full_tmpfs(tmpfs, capfd):
    # 4 MiB: the tensors of one step (a 2.5 MB batch, 5 MB activations) do not fit; with them
    # removed, the statistics do. Then a filler takes the last bytes, and later frees them.
    # Synchronous: the filler lands between two known steps' writes.
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmpfs / "dump"), task="tensor", level="L1",
                                        async_dump=False)
    model = make_model("mlp")
    opt = make_optimizer(model)
    for step, (x, y) in enumerate(make_batches(model, 6, batch=40_000)):
        if step == 2:
            filler = tmpfs / "filler"
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass
        if step == 4:
            filler.unlink()
        train_step(model, opt, x, y, dbg)
    dump = tmpfs / "dump"
    assert sorted(p.name for p in dump.iterdir()) == ["step0", "step1", "step4", "step5"]
    for step in (0, 1, 4, 5):
        assert names_in(dump / f"step{step}" / "rank" / "dump.json") == []
    assert_no_partial_evidence(dump)
    err = capfd.readouterr().err
    assert "saving tensors failed at step 0" in err and "No space left on device" in err, err
