"""The calls we record are msprobe 1.1.1's: its default wrap list (wrap_ops.json), the dtype casts
on top under task overflow_check, and what the config's extra_apis adds."""
import sys

import pytest
import torch

import msprobe_cpp
from dumps import load
from msprobe_runs import msprobe_installed, run_example

CASTS = {"bfloat16", "double", "float", "half", "to", "type"}


def wrapped(debugger: msprobe_cpp.PrecisionDebugger) -> set:
    debugger.start()
    names = {f"{owner.__name__}:{attr}" for owner, attr in debugger._patches.replaced("api")}
    debugger._release()
    return names


# Marked, not recorded: what they return is unwritten memory, never an anomaly (issue 32).
UNWRITTEN_MAKERS = {"torch:empty", "torch:empty_like", "torch:empty_strided", "Tensor:new_empty",
                    "Tensor:new_empty_strided"}
# Not recorded either: what they write is no longer unwritten memory (issue 52, DeepSpeed's slices).
UNWRITTEN_WRITERS = {"Tensor:copy_", "Tensor:zero_"}
# Every collective's wait: one that fails because a peer stopped raises that stop (issue 52).
WORK_WAIT = {"Work:wait"} if torch.distributed.is_available() else set()
# FSDP2's collectives (torch 2.x), not in msprobe's list.
FSDP2_COLLECTIVES = {f"torch.distributed:{name}" for name in ("all_gather_single", "reduce_scatter_single")
                     if hasattr(torch.distributed, name)}


def _fsdp1_allocators() -> set:
    """FSDP1's storage allocator is marked when the program imported FSDP (issue 42). Import it
    here, so the answer does not depend on which test ran first; Debian's torch 1.13 cannot import
    it on Python 3.11."""
    try:
        import torch.distributed.fsdp  # noqa: F401
    except (ImportError, ValueError):
        return set()
    return {f"{name}:_alloc_storage" for name in ("torch.distributed.fsdp._flat_param",
                                                  "torch.distributed.fsdp.flat_param")
            if hasattr(sys.modules.get(name), "_alloc_storage")}


def test_overflow_check_adds_exactly_the_casts_fsdp2s_collectives_and_the_unwritten_markers(tmp_path):
    fsdp1_allocators = _fsdp1_allocators()
    statistics = wrapped(msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path / "s")))
    overflow = wrapped(msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "o")))
    assert overflow - statistics == ({f"Tensor:{name}" for name in CASTS} | FSDP2_COLLECTIVES |
                                     UNWRITTEN_MAKERS | UNWRITTEN_WRITERS | WORK_WAIT |
                                     fsdp1_allocators) - statistics
    assert statistics <= overflow


def test_a_cast_is_recorded_under_overflow_check_only(tmp_path):
    x = torch.full((4,), 70000.0)
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path), action="continue")
    debugger.start()
    x.half()
    debugger.stop()
    debugger.step()
    debugger._release()
    assert list(load(tmp_path / "step0" / "rank", "overflow_report.json")["critical_apis"]) == ["Tensor.half.0.forward"]


def test_extra_apis_adds_calls_to_every_task(tmp_path):
    x = torch.arange(6.0)
    debugger = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), level="L1", extra_apis=["Tensor.view", "Torch.ones"])
    debugger.start()
    x.view(2, 3)
    torch.ones(2)
    x.reshape(3, 2)  # in msprobe's list
    debugger.stop()
    debugger.step()
    debugger._release()
    assert list(load(tmp_path / "step0" / "rank")["data"]) == ["Tensor.view.0.forward", "Torch.ones.0.forward",
                                                                "Tensor.reshape.0.forward"]


@pytest.mark.parametrize("names, message", [
    (["Tensor.veiw"], r"PrecisionDebugger\(extra_apis=\.\.\.\)\[0\]: 'Tensor.veiw' is no API of this torch "
                      r"\(.*\); did you mean \"Tensor.view\"\?"),
    (["view"], r"PrecisionDebugger\(extra_apis=\.\.\.\)\[0\]: expected an API named as in call names"),
    (["Tensor.view", "Module.fc"], r"PrecisionDebugger\(extra_apis=\.\.\.\)\[1\]: expected an API named"),
])
def test_a_bad_extra_api_is_a_config_error(tmp_path, names, message):
    with pytest.raises(msprobe_cpp.ConfigError, match=message):
        msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), extra_apis=names)


def test_tinygpt_records_msprobes_calls_in_order(tmp_path):
    ours = run_example("tinygpt_steps.py", tmp_path / "ours", "L1")
    assert list(ours) == ["step0/rank", "step1/rank"]
    assert not any(n.split(".")[1] in ("view", "to", "float", "split", "zero_") for n in ours["step1/rank"])
    if msprobe_installed():  # msprobe 1.1.1 imports only on torch 2.x
        assert ours == run_example("tinygpt_steps.py", tmp_path / "msprobe", "L1", theirs=True)
