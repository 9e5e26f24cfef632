"""`check` streams its reports: findings are written as they are found (spilled to temporary
files, copied out in the report's order; the text report's source lines looked up a batch of
findings at a time), so its memory does not grow with the number of findings. The in-memory
reports they replaced held every finding and the whole document (the JSON one about 3.5x the
report's size: over 70 MB here)."""
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest
from testenv import ROOT

pytestmark = pytest.mark.slow  # tools/test.sh --fast leaves it out

MEMORY_BOUND = 40e6  # bytes of peak RSS: the reader's chunk and one record, with room to spare


def bench():
    spec = importlib.util.spec_from_file_location("check_throughput", ROOT / "bench" / "check_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_report_of_many_findings_is_written_in_bounded_memory(tmp_path, cli):
    b = bench()
    b.ANOMALOUS[0] = 0.5  # half the records flagged
    dump = tmp_path / "dump.json"
    b.generate(dump, calls=0, min_bytes=150_000_000)
    seconds, peak = b.run_check(str(cli), dump)
    report = subprocess.run([str(cli), "check", str(dump)], capture_output=True, text=True)
    assert report.returncode == 1
    assert len(report.stdout) > 20_000_000  # the findings alone are 20+ MB of JSON
    assert peak < MEMORY_BOUND, f"peak RSS {peak / 1e6:.1f} MB for a {len(report.stdout) / 1e6:.0f} MB report"
    # The streamed document is the report: every finding, in the three lists and the details.
    doc = json.loads(report.stdout)
    listed = len(doc["critical_apis"]) + len(doc["high_priority_apis"]) + len(doc["medium_priority_apis"])
    assert listed == len(doc["anomaly_details"]) > 50_000
    # The text report, with a stack.json that names every forward record's line.
    with open(tmp_path / "stack.json", "w") as stack:
        stack.write("{" + ",".join(f"\n {json.dumps(n)}: [\"File /w/train.py, line {i}, in f, \\n y = g(x)\"]"
                                   for i, n in enumerate(doc["critical_apis"]) if n.endswith(".forward")) + "\n}")
    _, peak = b.run_check(str(cli), dump, "--format", "text")
    assert peak < MEMORY_BOUND, f"text: peak RSS {peak / 1e6:.1f} MB"
    text = subprocess.run([str(cli), "check", str(dump), "--format", "text"], capture_output=True, text=True).stdout
    lines = text.splitlines()
    assert lines[0] == f"{dump}: {listed} anomalous calls ({len(doc['critical_apis'])} critical, " \
                       f"{len(doc['high_priority_apis'])} high, {len(doc['medium_priority_apis'])} medium)"
    with_line = {n for n in doc["critical_apis"] if n.endswith(".forward")}
    assert sum(1 for x in lines if x.startswith("    at /w/train.py:")) == len(with_line) + \
        sum(1 for d in doc["anomaly_details"] if d["api_name"].endswith(".backward")
            and d["api_name"].replace(".backward", ".forward") in with_line)


def test_a_folders_report_is_streamed_too_and_empty_on_error(tmp_path, cli):
    b = bench()
    b.ANOMALOUS[0] = 0.5
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        b.generate(tmp_path / name / "dump.json", calls=0, min_bytes=60_000_000, seed=len(name))
    _, peak = b.run_check(str(cli), tmp_path)
    assert peak < MEMORY_BOUND
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "dump.json").write_text('{"task": "statistics", "data": {"x": ')
    out = subprocess.run([str(cli), "check", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
