"""No scan is larger than the view (issue 52): a view call (narrow, view, select, as_strided, ...)
reads the view's elements, never the tensor it takes the view of, once that tensor is larger than
2^20 elements. DeepSpeed narrows its 500-million-element gradient bucket once per parameter: each
narrow read the whole bucket (ZeRO-2 in fp16 never finished), and a NaN in the bucket's unwritten
part made every narrow a finding whose evidence was a copy of the bucket (12.7 GB a rank)."""
import json
import resource
import time

import pytest
import torch

import msprobe_cpp
from msprobe_cpp import PrecisionDebugger

VIEWS = 1000
VIEW = 1024
SMALL, LARGE = 5_000_000, 500_000_000  # elements of float16: 10 MB and 1 GB


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def narrow_many(tmp_path, size: int, task: str, nan_at: int = -1):
    """VIEWS narrows of a `size`-element buffer under the debugger: each call's time, the peak RSS
    the loop added, and the debugger."""
    buffer = torch.zeros(size, dtype=torch.float16)
    if nan_at >= 0:
        buffer[nan_at] = float("nan")
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(tmp_path / f"dump{size}"))
    before = peak_rss_mb()
    times = []
    debugger.start()
    for i in range(VIEWS):
        began = time.perf_counter()
        buffer.narrow(0, 1 + i * VIEW, VIEW)
        times.append(time.perf_counter() - began)
    debugger.stop()
    debugger.step()
    added = peak_rss_mb() - before
    del buffer
    times.sort()
    return times[len(times) // 2], added, debugger


@pytest.mark.parametrize("task", ["overflow_check", "statistics"])
def test_narrowing_a_huge_buffer_costs_what_narrowing_a_small_one_does(tmp_path, task):
    small_call, small_rss, _ = narrow_many(tmp_path, SMALL, task)
    large_call, large_rss, _ = narrow_many(tmp_path, LARGE, task)
    # The buffer is 100 times larger; reading it would make each call 100 times slower.
    assert large_call < 3 * small_call + 20e-6, (small_call, large_call)
    assert large_rss < 64 and small_rss < 64, (small_rss, large_rss)


def test_a_view_records_its_base_unread_and_its_own_statistics(tmp_path):
    buffer = torch.arange(LARGE // 100, dtype=torch.float32)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    debugger.start()
    buffer.narrow(0, 10, 4)
    debugger.stop()
    debugger.drain()  # async_dump: the step's files on disk
    record = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    narrow = next(v for k, v in record.items() if k.startswith("Tensor.narrow."))
    base, view = narrow["input_args"][0], narrow["output"][0]
    assert base["shape"] == [LARGE // 100] and base["Max"] is None and base["Norm"] is None
    assert (view["Max"], view["Min"], view["Mean"]) == (13.0, 10.0, 11.5)


def test_nan_in_the_buffer_outside_the_views_is_no_finding(tmp_path):
    """The NaN at element 0 is in no view: no call holds it, no step is flagged."""
    _, added, debugger = narrow_many(tmp_path, LARGE, "overflow_check", nan_at=0)
    assert debugger.overflow is None
    assert not (tmp_path / f"dump{LARGE}" / "step0").exists()
    assert added < 64


def test_nan_in_a_view_is_judged_as_with_a_small_buffer(tmp_path, caplog):
    """Where the view holds the NaN, its base is read after all: the finding is the one a buffer
    below the limit gets (origin input, at the view that holds it), and the evidence copies the
    view, not the buffer."""
    findings = {}
    for size in (SMALL, LARGE):
        caplog.clear()
        _, added, _ = narrow_many(tmp_path, size, "overflow_check", nan_at=4 * VIEW + 100)
        report = json.loads((tmp_path / f"dump{size}" / "step0" / "rank" / "overflow_report.json").read_text())
        first = report["first_anomaly"]
        findings[size] = (first["api_name"], first["scene_type"], first["origin"])
        saved = list((tmp_path / f"dump{size}" / "step0" / "rank" / "dump_tensor_data").iterdir())
        assert sum(f.stat().st_size for f in saved) < 1 << 20, saved
        assert added < 64
    assert findings[SMALL] == findings[LARGE] == (
        "Tensor.narrow.4.forward", "InputAnomalyOutputAnomalyScene", "input"), findings
