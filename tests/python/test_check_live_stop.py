"""`msprobe-cpp check` on the dumps the live guard wrote (issues 44 and 56's round): the stop in
overflow_report.json beside dump.json comes first, and counts by itself where no record holds
the anomaly. The rest of check, on real msprobe dumps, hand-built ones and bad input:
test_check_cli.py."""
import json
import os
import pathlib
import subprocess

import pytest


def test_check_of_a_live_dump_gives_the_live_stops_verdict_first(cli, tmp_path):
    """Issue 44: on a parameter-origin stop's dump, `check` names what the stop named (the NaN
    weight), and says its own reading of the statistics differs where it does."""
    import torch
    import torch.nn as nn
    import msprobe_cpp
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")  # a bad checkpoint's weight
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    debugger.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as stop:
        model(torch.randn(2, 4)).sum().backward()
    debugger._release()
    e = stop.value
    assert (e.origin, e.parameter) == ("parameter", "2.weight")
    out = subprocess.run([str(cli), "check", e.dump_dir, "--format", "text"], capture_output=True, text=True)
    lines = out.stdout.splitlines()
    assert f"  the live stop (overflow_report.json): {e.call}, origin parameter, parameter 2.weight" in lines, \
        out.stdout
    assert "    " + e.note in lines
    offline = next(line for line in lines if line.startswith("  offline reading"))
    agrees = f"probable origin: {e.call} " in offline
    assert agrees != any(line.startswith("    it differs from the live stop's") for line in lines), out.stdout
    # The JSON report carries the same verdict, as overflow_report.json holds it.
    as_json = subprocess.run([str(cli), "check", e.dump_dir, "--format", "json"], capture_output=True, text=True)
    (report,) = json.loads(as_json.stdout).values()
    live = report["live_stop"]
    assert (live["api_name"], live["origin"], live["parameter"], live["note"]) == \
        (e.call, "parameter", "2.weight", e.note)
    # A dump without a stop beside it has none.
    os.remove(pathlib.Path(e.dump_dir) / "overflow_report.json")
    (report,) = json.loads(subprocess.run([str(cli), "check", e.dump_dir, "--format", "json"],
                                          capture_output=True, text=True).stdout).values()
    assert "live_stop" not in report


@pytest.mark.parametrize("fused", [False, True])
def test_check_of_a_stop_no_record_holds_is_the_stop_not_no_anomaly(cli, tmp_path, fused):
    """A stop after an optimizer step (its own arithmetic made the NaN, looked at once after it)
    leaves a dump whose records are all clean. `check`, which the stop's message names, said
    "no anomaly" with status 0 there: now it gives the live stop and fails, in text and JSON."""
    import torch
    import msprobe_cpp
    if fused:
        try:
            torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], fused=True)
        except (RuntimeError, TypeError):  # 1.13: CUDA only
            pytest.skip("a fused Adam on the CPU is torch 2.x's")

    class UnusedBranch(torch.nn.Module):  # a zero gradient every step: Adam with eps=0 makes 0/0
        def __init__(self):
            super().__init__()
            self.used, self.unused = torch.nn.Linear(4, 1), torch.nn.Linear(2, 1)

        def forward(self, x):
            return self.used(x) + 0 * self.unused(x[:, :2])

    torch.manual_seed(0)
    model = UnusedBranch()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, eps=0.0, **({"fused": True} if fused else {}))
    debugger = msprobe_cpp.PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "dump"))
    debugger.start(model)
    with pytest.raises(msprobe_cpp.OverflowError) as stop:
        torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
        optimizer.step()
    debugger._release()
    e = stop.value
    assert (e.call, e.origin, e.parameter) == ("(after Adam.step)", "op", "unused.weight")
    dump = str(pathlib.Path(e.dump_dir) / "dump.json")
    text = subprocess.run([str(cli), "check", dump, "--format", "text"], capture_output=True, text=True)
    lines = text.stdout.splitlines()
    assert (text.returncode, lines[0]) == (1, f"{dump}: no anomalous record; the live guard stopped training here"), \
        text.stdout
    assert lines[1] == "  the live stop (overflow_report.json): (after Adam.step), origin op, parameter unused.weight"
    assert "    " + e.note in lines
    as_json = subprocess.run([str(cli), "check", dump, "--fail-on", "critical"], capture_output=True, text=True)
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["critical_apis"] == [] and report["live_stop"]["api_name"] == e.call
    # The same dump without the stop beside it reads as clean, as before.
    os.remove(pathlib.Path(e.dump_dir) / "overflow_report.json")
    clean = subprocess.run([str(cli), "check", dump, "--format", "text"], capture_output=True, text=True)
    assert (clean.returncode, clean.stdout) == (0, f"{dump}: no anomaly\n")
