"""The coordinated stop costs the store nothing while nothing is wrong (issue 52).

Each rank's watcher blocks in one store wait on a key of its own, which the stopping rank sets
for every rank: no polling. A counting TCP proxy between the ranks and the store
(bench/stop_protocol.py) sees every request: none in an idle window, and a stop still reaches
every simulated rank within a second. The protocol before issue 52 (a counter read five times a
second) is measured by the same proxy, so the proxy is shown to count."""
import multiprocessing as mp
import sys
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from gloo import needs_gloo  # noqa: E402
from testenv import PACKAGE_ROOT, ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import stop_protocol  # noqa: E402

pytestmark = [pytest.mark.slow, needs_gloo]


@pytest.mark.parametrize("world", [2, 24])
def test_watchers_are_silent_while_idle_and_told_within_a_second(world):
    measured = stop_protocol.measure(world, processes=2, idle_s=1.5, protocol="wait")
    assert measured["idle_requests_per_s"] == 0, measured
    assert measured["told"] == world - 1, measured
    assert measured["last_told_ms"] < 1000, measured


def test_the_proxy_counts_a_polling_watcher():
    measured = stop_protocol.measure(4, processes=1, idle_s=1.0, protocol="poll")
    assert measured["idle_requests_per_s"] >= 3 * 3, measured  # 3 watchers, 5 reads a second each


def test_training_ranks_make_no_store_request_between_steps(tmp_path):
    """Two DDP ranks train under overflow_check with the store behind the proxy: after their
    first steps, a window of training sees no request at all (the watcher made 10 a second)."""
    ctx = mp.get_context("spawn")
    store_port, proxy_port = stop_protocol.free_port(), stop_protocol.free_port()
    master = dist.TCPStore("127.0.0.1", store_port, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=60))
    reads, sent_bytes, proxy_ready = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Event()
    proxy = ctx.Process(target=stop_protocol.run_proxy,
                        args=(proxy_port, store_port, reads, sent_bytes, proxy_ready), daemon=True)
    proxy.start()
    assert proxy_ready.wait(30)
    import store_idle_worker
    warm, go_home = ctx.Array("i", 2), ctx.Event()
    ranks = [ctx.Process(target=store_idle_worker.train,
                         args=(r, 2, proxy_port, str(tmp_path / "dump"), warm, go_home, str(PACKAGE_ROOT)))
             for r in range(2)]
    try:
        for p in ranks:
            p.start()
        deadline = time.monotonic() + 60
        while not all(warm[:]) and time.monotonic() < deadline:
            assert all(p.exitcode in (None, 0) for p in ranks), [p.exitcode for p in ranks]
            time.sleep(0.05)
        assert all(warm[:]), "the ranks did not reach their third step"
        before = reads.value
        time.sleep(2.0)
        idle = reads.value - before
        assert all(p.is_alive() for p in ranks)
    finally:
        go_home.set()
        for p in ranks:
            p.join(30)
            if p.is_alive():
                p.kill()
        proxy.terminate()
        del master
    assert [p.exitcode for p in ranks] == [0, 0]
    assert idle == 0, f"{idle} store requests in 2 s of training"
