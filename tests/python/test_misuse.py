"""Misuse gets one clear warning, or works: unmatched scope and list entries, a forgotten step(),
a second debugger, a second model, and msprobe's own keyword forms."""
import json
import pathlib
from typing import List

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from models import drain, make_batches, make_model, make_optimizer, train_step
from dumps import load as read_dump_file


def warnings_in(err: str) -> List[str]:
    return [l for l in err.splitlines() if l.startswith("msprobe_cpp: warning: ")]


def dumped_steps(dump: pathlib.Path) -> List[str]:
    return sorted(p.name for p in dump.iterdir()) if dump.exists() else []


def names(dump: pathlib.Path, step: int) -> List[str]:
    return list(read_dump_file(dump / f"step{step}" / "rank")["data"])


def train(model, steps, dbg) -> None:
    opt = make_optimizer(model)
    for x, y in make_batches(model, steps):
        train_step(model, opt, x, y, dbg)
    drain(dbg)


def test_scope_and_list_entries_that_match_nothing_are_named_once(tmp_path, capfd):
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "a", task="statistics", step=[0, 1])
    train(make_model("mlp"), 2, dbg)  # a plain run first, for contrast: no warning
    assert warnings_in(capfd.readouterr().err) == []

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "b"),
                                  "statistics": {"scope": ["Functional.linear.0", "Functional.relu.0.forward"]}}))
    train(make_model("mlp"), 3, msprobe_cpp.PrecisionDebugger(config_path=config))
    said = [w for w in warnings_in(capfd.readouterr().err) if "matched no call" in w]
    assert len(said) == 1, said  # once, not once per step
    assert 'statistics.scope[0] "Functional.linear.0" matched no call in step 0' in said[0]

    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "c"),
                                  "statistics": {"list": ["relu", "Functional.lnear"]}}))
    train(make_model("mlp"), 3, msprobe_cpp.PrecisionDebugger(config_path=config))
    said = [w for w in warnings_in(capfd.readouterr().err) if "matched no call" in w]
    assert len(said) == 1 and 'statistics.list[1] "Functional.lnear" matched no call' in said[0]
    assert all(n.startswith("Functional.relu") for n in names(tmp_path / "c", 0))


def test_start_again_without_step_warns_once(tmp_path, capfd):
    model = make_model("mlp")
    opt = make_optimizer(model)
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "d")
    for x, y in make_batches(model, 3):
        dbg.start(model)
        train_step(model, opt, x, y)
        dbg.stop()  # no step(): the iterations merge into step 0
    said = warnings_in(capfd.readouterr().err)
    assert len(said) == 1 and "start() again without step()" in said[0] and "step 0" in said[0]
    dbg.step()
    dbg.drain()  # async_dump: the step's files on disk
    assert dumped_steps(tmp_path / "d") == ["step0"]
    assert "Functional.linear.8.forward" in names(tmp_path / "d", 0)  # three iterations' calls


def test_a_new_debugger_replacing_a_live_one_warns(tmp_path, capfd):
    first = msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "one")
    first.start(make_model("mlp"))
    original_hooked = torch.tanh
    second = msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "two", step=[0])
    said = warnings_in(capfd.readouterr().err)
    assert len(said) == 1 and "a new PrecisionDebugger replaces the live one" in said[0]
    assert torch.tanh is not original_hooked  # the first one's hooks are gone
    # A debugger whose last step is done replaces nothing live: no word.
    train(make_model("mlp"), 1, second)
    msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "three")
    assert warnings_in(capfd.readouterr().err) == []


def test_a_second_model_is_hooked_in_addition_with_its_own_names(tmp_path):
    torch.manual_seed(0)
    g = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
    d = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "gan", level="mix")
    for _ in range(2):
        z = torch.randn(3, 4)
        dbg.start(g)
        fake = g(z)
        dbg.start(d)  # the GAN pattern: both models in one step
        d(fake).mean().backward()
        dbg.stop()
        dbg.step()
    dbg.drain()  # async_dump: the steps' files on disk
    for step in (0, 1):
        recorded = names(tmp_path / "gan", step)
        assert "Module.0.Linear.forward.0" in recorded  # G, as before
        assert "Module.model1.0.Linear.forward.0" in recorded  # D, not "Module.0.Linear.forward.1"
        assert "Module.0.Linear.forward.1" not in recorded
        assert "Module.model1.2.Linear.backward.0" in recorded


def test_a_model_let_go_of_through_a_cycle_leaves_its_names_to_the_next(tmp_path):
    """Issue 54: a model the program dropped, but that a reference cycle kept until the next
    collection, named the next model's modules and parameters model1.*."""
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "d", level="L1")
    first = nn.Sequential(nn.Linear(3, 3))
    first.cycle = [first]  # freed by the collector only
    dbg.start(first)
    first(torch.randn(2, 3)).sum().backward()
    dbg.stop()
    dbg.step()
    del first
    second = nn.Sequential(nn.Linear(3, 3))
    with torch.no_grad():
        second[0].weight[0, 0] = float("nan")
    dbg.start(second)
    with pytest.raises(msprobe_cpp.OverflowError) as stop:
        second(torch.randn(2, 3)).sum().backward()
    assert stop.value.origin == "parameter"
    assert "parameter 0.weight" in str(stop.value) and "model1" not in str(stop.value), str(stop.value)


def test_msprobe_keyword_forms_work(tmp_path):
    model = make_model("mlp")
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=tmp_path / "kw", level="mix", model=model, step=range(1, 3),
                                        rank=(0,))
    opt = make_optimizer(model)
    for x, y in make_batches(model, 4):
        dbg.start()  # the model given to the constructor
        train_step(model, opt, x, y)
        dbg.stop()
        dbg.step()
    assert dumped_steps(tmp_path / "kw") == ["step1", "step2"]
    assert "Module.fc1.Linear.forward.0" in names(tmp_path / "kw", 1)


def test_keyword_values_are_taken_as_json_whatever_iterable_holds_them(tmp_path):
    """Issue 54: which keywords take lists was written twice, in the engine and in Python; now
    Python turns any iterable (a range, a tuple, numpy's array, a generator) into a list and any
    path into a string, and the engine checks the keys."""
    import numpy as np
    rules = tmp_path / "rules.yaml"
    rules.write_text("ignore_nan_inf:\n  - api_name: \"torch.empty\"\n    output_ignore:\n      - index: 0\n")
    model = make_model("mlp")
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path / "d", step=np.arange(1, 3),
                                        rank=(np.int64(0),), stop_on=(o for o in ("op", "input")),
                                        rules=(rules,), level="L1")
    opt = make_optimizer(model)
    for x, y in make_batches(model, 4):
        dbg.start(model)
        train_step(model, opt, x, y)
        dbg.stop()
        dbg.step()
    assert dbg._session.watching
    with pytest.raises(msprobe_cpp.ConfigError, match=r"PrecisionDebugger\(step=\.\.\.\): expected a JSON-like"):
        msprobe_cpp.PrecisionDebugger(dump_path=tmp_path, step=(1.5, float("nan")))


def test_overflow_check_options_as_keywords(tmp_path):
    dbg = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path, stop_on=("op",),
                                        action="continue", stop_level="high", overflow_nums=-1,
                                        mutation_threshold=1e6, compat=False, dump_skipped_steps=True,
                                        min_loss_scale=0.5)
    assert dbg._session.watching
    with pytest.raises(msprobe_cpp.ConfigError, match=r"PrecisionDebugger\(stop_on=\.\.\.\)\[1\]: expected one of "
                                                      r"op, input, parameter, peer, got \"batch\""):
        msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=tmp_path, stop_on=["op", "batch"])
    with pytest.raises(msprobe_cpp.ConfigError, match=r"PrecisionDebugger\(step=\.\.\.\): expected a JSON-like value"):
        msprobe_cpp.PrecisionDebugger(dump_path=tmp_path, step=[object()])
    with pytest.raises(msprobe_cpp.ConfigError, match=r"unknown keyword argument \"stop_onn\""):
        msprobe_cpp.PrecisionDebugger(dump_path=tmp_path, stop_onn=["op"])
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module"):
        msprobe_cpp.PrecisionDebugger(dump_path=tmp_path, model="net")
