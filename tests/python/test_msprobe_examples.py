"""msprobe 1.1.1's four documented data-dump examples (05.data_dump_PyTorch.md, section 2), written
for the CPU with only the import line differing from msprobe's: each runs unchanged with ours, and
where msprobe is installed (the torch 2 venv) its dump folders hold the same record names."""
import pathlib
from typing import Dict, List

import pytest
from msprobe_runs import msprobe_installed, run_example

pytestmark = pytest.mark.slow  # tools/test.sh --fast leaves it out


def its_own_hooks(record: str) -> bool:
    """msprobe on torch 2.x records the view_as calls that torch's full backward hooks (which it
    registers on every module at L0 and mix) make around each module call: its own machinery,
    which we neither have nor record (README, decisions)."""
    return record.startswith("Tensor.view_as.")


def check_against_msprobe(name: str, tmp_path: pathlib.Path, level: str, ours: Dict[str, List[str]]) -> None:
    if not msprobe_installed():
        return  # msprobe 1.1.1 imports only on torch 2.x
    theirs = run_example(name, tmp_path / "msprobe", level, theirs=True)
    assert ours == {step: [n for n in names if not its_own_hooks(n)] for step, names in theirs.items()}


def test_quick_start_is_written_at_exit_without_step(tmp_path):
    ours = run_example("example1_quick_start.py", tmp_path / "ours", "mix")
    names = ours["step0/rank"]  # written at exit: the script calls no step()
    modules = [n for n in names if n.startswith("Module.") and ".forward." in n]
    assert modules == ["Module.linear_1.Linear.forward.0", "Module.linear_2.Linear.forward.0",
                       "Module.relu.ReLU.forward.0"]
    assert "Module.linear_1.Linear.backward.0" in names and "Tensor.sum.0.backward" in names
    check_against_msprobe("example1_quick_start.py", tmp_path, "mix", ours)


def test_training_loop_writes_every_step(tmp_path):
    ours = run_example("example2_training_loop.py", tmp_path / "ours", "mix")
    assert list(ours) == ["step0/rank", "step1/rank", "step2/rank"]
    assert ours["step1/rank"] == ours["step2/rank"]  # step 0 has no gradients to zero yet
    assert "Functional.cross_entropy.0.forward" in ours["step1/rank"]
    check_against_msprobe("example2_training_loop.py", tmp_path, "mix", ours)


def test_code_block_keeps_the_blocks_forward_and_backward_only(tmp_path):
    ours = run_example("example3_code_block.py", tmp_path / "ours", "mix")
    names = ours["step0/rank"]
    assert names == ours["step1/rank"]
    forward = [n for n in names if ".forward" in n]
    backward = [n for n in names if ".backward" in n]
    # A module's record is made when its forward returns, after the calls inside it.
    assert forward == ["Functional.linear.0.forward", "Module.0.Linear.forward.0", "Functional.relu.0.forward",
                       "Module.1.ReLU.forward.0", "Functional.linear.1.forward", "Module.2.Linear.forward.0"]
    # The block's backward, run by loss.backward() after forward_backward_dump_end(); the loss and
    # the optimizer are outside the block.
    assert sorted(backward) == ["Functional.linear.0.backward", "Functional.linear.1.backward",
                                "Functional.relu.0.backward", "Module.0.Linear.backward.0",
                                "Module.1.ReLU.backward.0", "Module.2.Linear.backward.0"]
    check_against_msprobe("example3_code_block.py", tmp_path, "mix", ours)


def test_module_dump_records_the_module_alone(tmp_path):
    ours = run_example("example4_module_dump.py", tmp_path / "ours", "L1")
    names = ours["step0/rank"]
    assert names[:3] == ["Torch.tanh.0.forward", "Module.MyModuleOP.Inner.forward.0", "Functional.linear.0.forward"]
    assert "Module.MyModuleOP.Inner.backward.0" in names
    # Nothing inside the module: its Linear's F.linear and its torch.relu.
    assert "Torch.relu.0.forward" not in names and "Functional.linear.1.forward" not in names
    check_against_msprobe("example4_module_dump.py", tmp_path, "L1", ours)
