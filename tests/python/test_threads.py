"""Hooked ops called from several Python threads at once."""
import threading

import torch

import msprobe_cpp
from dumps import load as read_dump_file


def test_four_threads_lose_and_mix_nothing(tmp_path):
    calls_per_thread = 200
    inputs = [torch.full((64,), float(t + 1)) for t in range(4)]
    dbg = msprobe_cpp.PrecisionDebugger(dump_path=str(tmp_path), step=[0])
    dbg.start()
    errors = []
    barrier = threading.Barrier(4)

    def work(t: int) -> None:
        try:
            x = inputs[t]
            barrier.wait()
            for _ in range(calls_per_thread):
                torch.mul(x, 2.0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dbg.stop()
    dbg.drain()  # async_dump: the step's files on disk
    assert not errors
    data = read_dump_file(tmp_path / "step0" / "rank")["data"]
    assert sorted(data) == sorted(f"Torch.mul.{n}.forward" for n in range(4 * calls_per_thread))
    per_thread = {}
    for record in data.values():
        x_max = record["input_args"][0]["Max"]
        assert record["output"][0]["Max"] == 2 * x_max  # input and output of the same call
        per_thread[x_max] = per_thread.get(x_max, 0) + 1
    assert per_thread == {1.0: calls_per_thread, 2.0: calls_per_thread, 3.0: calls_per_thread,
                          4.0: calls_per_thread}
