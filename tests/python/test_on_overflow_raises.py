"""A user's on_overflow that raises. For a stop, the stop still happens: the step is ended and
written, and msprobe_cpp.OverflowError is raised with the user's exception as its __cause__.
This holds when the call is judged at once and when it is judged in a batch (sync "batch"),
where a notice's raising callback must not drop the batch's stop either. For a notice without a
stop (action "continue"), the user's exception goes on, as any exception of the user's code in a
hooked call would."""
import pytest
import torch
import torch.nn as nn

import msprobe_cpp
from dumps import dumped_steps, report, guard
from testenv import devices

BAD_STEP = 1


class CallbackBroke(Exception):
    pass


def broken_callback(seen):
    def on_overflow(o):
        seen.append((o.step, o.call))
        raise CallbackBroke(f"my on_overflow failed at {o.call}")
    return on_overflow


def run(dbg, device, steps=3):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4, device=device)
    for step in range(steps):
        if step == BAD_STEP:
            with torch.no_grad():
                model[0].weight[0, 0] = float("nan")  # a bad checkpoint restore: origin parameter
        dbg.start(model)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        dbg.stop()
        dbg.step()


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("sync", ["call", "batch"])
def test_a_raising_on_overflow_still_stops_with_its_exception_as_the_cause(tmp_path, device, sync):
    seen = []
    dbg = guard(tmp_path, "L1", on_overflow=broken_callback(seen), sync=sync)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run(dbg, device)
    e = info.value
    assert (e.step, e.origin) == (BAD_STEP, "parameter")
    assert isinstance(e.__cause__, CallbackBroke) and e.call in str(e.__cause__)
    assert seen and seen[0] == (BAD_STEP, e.call)
    assert dumped_steps(tmp_path) == [BAD_STEP]  # written before the raise
    assert report(tmp_path, BAD_STEP)["first_anomaly"]["origin"] == "parameter"
    assert dbg._session.current_step == BAD_STEP + 1  # the stop ended its step


@pytest.mark.parametrize("device", devices(), indirect=True)
def test_without_a_stop_the_callbacks_exception_goes_on(tmp_path, device):
    seen = []
    dbg = guard(tmp_path, "L1", on_overflow=broken_callback(seen), action="continue")
    with pytest.raises(CallbackBroke):
        run(dbg, device)
    assert seen and seen[0][0] == BAD_STEP


@pytest.mark.parametrize("device", devices(), indirect=True)
@pytest.mark.parametrize("sync", ["call", "batch"])
def test_a_stop_is_one_overflow_seen_by_on_overflow_after_its_step_is_written(tmp_path, device, sync):
    """Issue 54: the stop's Overflow was built twice (once for on_overflow, before the replay and
    the write; again for the error). It is built once, with the error, after the step is written:
    on_overflow, debugger.overflow and the error hold the same object, whose dump folder exists."""
    seen = []

    def on_overflow(o):
        seen.append((o, (tmp_path / "dump" / f"step{BAD_STEP}" / "rank" / "dump.json").exists()))

    dbg = guard(tmp_path, "L1", on_overflow=on_overflow, sync=sync)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        run(dbg, device)
    assert len(seen) == 1
    overflow, written = seen[0]
    assert overflow is info.value.overflow is dbg.overflow
    assert written and overflow.dump_dir == str(tmp_path / "dump" / f"step{BAD_STEP}" / "rank")
