"""Hostile input: every bad value is one ConfigError (a ValueError) naming where it came from, never
a crash, a raw parser error or a stray Python error state."""
import json
import math
import sys

import pytest
import torch

import msprobe_cpp


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
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    index = data["Tensor.__getitem__.0.forward"]["input_args"][1]
    assert index == {"type": "slice", "value": [1, math.inf, None]}
    assert "Torch.add.0.forward" in data and torch.equal(z, x + 1) and torch.equal(head, x[1:])
