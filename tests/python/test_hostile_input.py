"""Hostile input: every bad value is one ConfigError (a ValueError) naming where it came from, never
a crash, a raw parser error or a stray Python error state."""
import json
import math
import sys

import pytest
import torch

import msprobe_cpp
from dumps import load as read_dump_file


@pytest.mark.parametrize("name, value", [
    ("step", [0, float("nan")]),
    ("step", [float("inf")]),
    ("rank", [0, -math.inf]),
    ("stop_on", ["op\ud800"]),            # a lone surrogate
    ("dump_path", b"/tmp/bytes"),
    ("step", [{1, 2}]),
    ("level", object()),
])
def test_bad_keyword_values_are_config_errors(tmp_path, name, value):
    kw = {"dump_path": str(tmp_path), name: value}
    with pytest.raises(msprobe_cpp.ConfigError, match=rf"^PrecisionDebugger\({name}=\.\.\.\)"):
        msprobe_cpp.PrecisionDebugger(**kw)


def test_deeply_nested_keyword_is_a_config_error(tmp_path):
    deep = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(msprobe_cpp.ConfigError, match=r"^PrecisionDebugger\(step=\.\.\.\)"):
        msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=deep)


def test_deeply_nested_config_file_is_a_message_not_a_crash(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"dump_path": "d", "task": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(msprobe_cpp.ConfigError, match=r"config.json: task: expected one of .*got \[\[\[.*\.\.\."):
        msprobe_cpp.PrecisionDebugger(config_path=str(path))


def test_a_bad_rules_file_is_a_config_error_naming_config_and_field(tmp_path):
    config = tmp_path / "config.json"
    for rules, reason in ((tmp_path / "missing.yaml", "missing.yaml"), (tmp_path, str(tmp_path))):
        config.write_text(json.dumps({"task": "overflow_check", "dump_path": str(tmp_path / "d"),
                                      "overflow_check": {"rules": [str(rules)]}}))
        with pytest.raises(msprobe_cpp.ConfigError) as info:
            msprobe_cpp.PrecisionDebugger(config_path=str(config))
        assert str(info.value).startswith(f"{config}: overflow_check.rules: "), str(info.value)
        assert reason in str(info.value)


def test_huge_python_ints_are_recorded_without_leaving_an_error_set(tmp_path):
    x = torch.arange(5.0)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=[0])
    dbg.start()
    head = x[1:10 ** 400]  # Python clamps the slice; the hook describes 10**400 first
    z = torch.add(x, 1.0)  # the next call runs with no Python error left set
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    index = data["Tensor.__getitem__.0.forward"]["input_args"][1]
    assert index == {"type": "slice", "value": [1, math.inf, None]}
    assert "Torch.add.0.forward" in data and torch.equal(z, x + 1) and torch.equal(head, x[1:])


class NoStorage(torch.Tensor):
    """A wrapper tensor without storage (what functorch and tensor subclasses make): its data
    pointer cannot be read, so its statistics cannot be computed."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda x: x.elem if isinstance(x, NoStorage) else x  # noqa: E731
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


def test_the_tools_own_failure_never_reaches_the_training_script(tmp_path, capfd):
    x = NoStorage(torch.tensor([1.0, -2.0, 3.0]))
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=[0])
    dbg.start()
    y = torch.tanh(x)  # raised a RuntimeError out of the hook before
    z = torch.tanh(torch.ones(2))
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    assert torch.allclose(y, torch.tanh(torch.tensor([1.0, -2.0, 3.0])))
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    entry = data["Torch.tanh.0.forward"]["input_args"][0]
    assert entry["type"] == "torch.Tensor" and entry["shape"] == [3] and entry["Max"] is None
    assert data["Torch.tanh.1.forward"]["output"][0]["Max"] == pytest.approx(torch.tanh(torch.ones(1)).item())
    err = capfd.readouterr().err
    assert err.count("could not be computed") == 1
    assert "statistics of a tensor of Torch.tanh.0.forward could not be computed" in err


def test_a_scope_that_ends_at_a_call_that_raises_closes(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"dump_path": str(tmp_path / "d"), "step": [0],
                                "statistics": {"scope": ["Torch.tanh.0.forward", "Torch.reshape.0.forward"]}}))
    dbg = msprobe_cpp.PrecisionDebugger(config_path=str(path))
    dbg.start()
    x = torch.ones(4)
    torch.tanh(x)
    with pytest.raises(RuntimeError):
        torch.reshape(x, (3,))  # the scope's last call raises
    torch.sigmoid(x)  # after the scope: not collected
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    data = read_dump_file(tmp_path / "d" / "step0" / "rank")["data"]
    assert list(data) == ["Torch.tanh.0.forward"]


class Raises(torch.nn.Module):
    """A submodule whose forward fails, after making `calls` on its input."""

    def __init__(self, *calls):
        super().__init__()
        self.calls = calls

    def forward(self, x):
        for call in self.calls:
            call(x)
        raise ValueError("bad input")


def test_a_module_whose_forward_raised_is_no_longer_the_parent(tmp_path):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Raises(lambda x: torch.relu(x))  # looked up when called: the hooked one

        def forward(self, x):
            try:
                self.inner(x)
            except ValueError:
                pass
            return torch.tanh(x)  # inside Net only: inner's forward is over

    model = torch.nn.Sequential(Net())  # the root given to start() is not itself hooked
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="mix", step=[0])
    dbg.start(model)
    model(torch.ones(2))
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    construct = read_dump_file(tmp_path / "step0" / "rank", "construct.json")
    assert construct["Torch.relu.0.forward"] == "Module.0.inner.Raises.forward.0"
    assert construct["Torch.tanh.0.forward"] == "Module.0.Net.forward.0"


def test_an_exception_out_of_the_root_model_closes_every_module_call(tmp_path):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Raises()

        def forward(self, x):
            torch.relu(x)
            return self.inner(x)

    model = torch.nn.Sequential(Net())
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="mix", step=[0])
    dbg.start(model)
    with pytest.raises(ValueError):
        model(torch.ones(2))
    torch.tanh(torch.ones(2))  # the training script's own call, outside every module
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    construct = read_dump_file(tmp_path / "step0" / "rank", "construct.json")
    assert construct["Torch.relu.0.forward"] == "Module.0.Net.forward.0"
    assert construct["Torch.tanh.0.forward"] is None


def test_a_fifo_config_is_refused_not_waited_on(tmp_path):
    import os
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(msprobe_cpp.ConfigError, match=r"config.json: cannot read config file: is a FIFO \(named pipe\)"):
        msprobe_cpp.PrecisionDebugger(config_path=str(tmp_path / "config.json"))


def test_complex_and_sparse_overflows_are_judged(tmp_path):
    """A complex tensor is judged on its magnitudes, a sparse one on its stored values: an inf in
    either stops the run at the call that made it."""
    # Both require grad, so that the inf does damage where it is made (the damage rule).
    z = torch.tensor([1 + 1j, 2 - 1j], dtype=torch.complex64, requires_grad=True)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "c"))
    dbg.start()
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        torch.mul(z, 1e38 * 1e1)  # clean input, an inf in the product's parts
    assert info.value.call == "Torch.mul.0.forward" and info.value.origin == "op"

    s = torch.sparse_coo_tensor(torch.tensor([[0, 3]]), torch.tensor([2.0, 3.0]), (5,), requires_grad=True)
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "s"))
    dbg.start()
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        torch.mul(s, 1e38 * 1e1)
    assert info.value.call == "Torch.mul.0.forward"
    data = read_dump_file(tmp_path / "s" / "step0" / "rank")["data"]
    entry = data["Torch.mul.0.forward"]["input_args"][0]
    assert (entry["Max"], entry["Min"], entry["Mean"]) == (3.0, 2.0, 2.5)  # over the stored values


def test_module_names_cannot_escape_the_dump_folder(tmp_path):
    """torch lets `setattr(model, "/../../ESCAPED", m)` and NUL through; saved tensors stay inside
    dump_tensor_data, none overwrites another, and every data_name names a file that exists."""
    model = torch.nn.Sequential()
    setattr(model, "/../../../ESCAPED", torch.nn.Linear(2, 2))
    setattr(model, "a\0b", torch.nn.Linear(2, 2))
    setattr(model, "a_b", torch.nn.Linear(2, 2))
    dump = tmp_path / "inner" / "dump"
    dbg = msprobe_cpp.PrecisionDebugger(task="tensor", dump_path=str(dump), level="L0", step=[0])
    dbg.start(model)
    model(torch.ones(1, 2)).sum().backward()
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    outside = [p for p in tmp_path.rglob("*.pt") if "dump_tensor_data" not in p.parts]
    assert outside == []
    folder = dump / "step0" / "rank"
    data = read_dump_file(folder)["data"]
    named = []
    for record in data.values():
        for side in ("input_args", "output", "input"):
            for entry in record.get(side, []):
                if isinstance(entry, dict) and "data_name" in entry:
                    named.append(entry["data_name"])
    assert len(named) == len(set(named)) and len(named) >= 9
    on_disk = {p.name for p in (folder / "dump_tensor_data").iterdir()}
    assert set(named) <= on_disk
    assert all("/" not in n and "\0" not in n for n in named)


def test_a_nul_in_dump_path_is_a_config_error(tmp_path):
    with pytest.raises(msprobe_cpp.ConfigError, match=r"dump_path=\.\.\.\): expected a path without NUL"):
        msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path) + "/d\0/../x")


def test_a_planted_link_is_refused_but_dump_path_may_be_one(tmp_path, capfd):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "dump").symlink_to(real)  # the user's own link: followed
    (real / "step0").symlink_to(elsewhere)  # planted where the dump makes a folder: refused
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "dump"), step=[0, 1])
    for _ in range(2):
        dbg.start()
        y = torch.tanh(torch.ones(2))
        dbg.stop()
        dbg.step()
    assert torch.equal(y, torch.tanh(torch.ones(2)))  # training went on
    assert list(elsewhere.iterdir()) == []
    assert (real / "step1" / "rank" / "dump.json").exists()
    err = capfd.readouterr().err
    assert err.count("is a symbolic link; refused") == 1, err
