"""The coordinated stop's store protocol at scale: N simulated ranks against one TCPStore.

Each simulated rank is a thread running the watcher half of msprobe_cpp's protocol
(stop_channel.StopChannel: two store connections of its own, one blocked in a wait), spread over
a few processes. For each N the harness reports:
- the data segments per second the store receives while nothing is wrong (the kernel's count per
  socket, `ss -ti`), beside a control run whose ranks hold the same connections and make no
  request at all: what the control shows is the connections' own traffic (at 2,000 ranks on this
  2-core VM, c10d's clients re-make about 50 of the 4,000 connections every 5 s), not the
  protocol's;
- the time from a stop's publication until the last rank has its facts.
`--protocol poll` runs the protocol before issue 52 (a counter read five times a second), for the
comparison; `--via-proxy` counts requests at a TCP proxy instead (what tests/python does). Run with
the torch 2 venv (multi_set) or Debian's 1.13:

    MSPROBE_CPP_PACKAGE_ROOT=build-torch2/pkg build-torch2/venv/bin/python bench/stop_protocol.py \\
        --ranks 2,100,2000
"""
import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import socket
import re
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("MSPROBE_CPP_PACKAGE_ROOT", os.path.join(ROOT, "python")))

POLL_PERIOD_S = 0.2  # the protocol before issue 52


def raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the counting proxy -------------------------------------------------------------------------

def run_proxy(listen_port: int, store_port: int, reads, sent_bytes, ready) -> None:
    raise_file_limit()

    async def pump(reader, writer, count: bool) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if count:
                    with reads.get_lock():
                        reads.value += 1
                    with sent_bytes.get_lock():
                        sent_bytes.value += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(client_reader, client_writer) -> None:
        try:
            store_reader, store_writer = await asyncio.open_connection("127.0.0.1", store_port)
        except OSError:
            client_writer.close()
            return
        client_writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        store_writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pump(client_reader, store_writer, True),
                             pump(store_reader, client_writer, False))

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", listen_port, backlog=4096)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def segments_into(port: int) -> int:
    """Data segments the store's end of every connection to `port` has received (ss -ti's
    data_segs_in, kept by the kernel per socket): each request is one or more."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"sport = :{port}"],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(m) for m in re.findall(r"data_segs_in:(\d+)", out))


# --- the simulated ranks ------------------------------------------------------------------------

def run_ranks(ranks, world: int, port: int, prefix: str, protocol: str, connected, told_at,
              go_home) -> None:
    raise_file_limit()
    from msprobe_cpp.stop_channel import StopChannel

    closing = threading.Event()

    def one_rank(rank: int) -> None:
        channel = StopChannel("127.0.0.1", port, rank, world, prefix, timeout=timedelta(seconds=60))
        with connected.get_lock():
            connected.value += 1
        if protocol == "wait":
            facts = channel.wait_for_stop(closing)
        elif protocol == "hold":  # the control: the connections held, no request made
            closing.wait()
            return
        else:
            while channel.watch_store.add(channel.published_key, 0) == 0:
                if closing.wait(POLL_PERIOD_S):
                    return
            facts = channel.watch_store.get(channel.key)
        if facts is not None:
            told_at[rank] = time.time()

    threads = [threading.Thread(target=one_rank, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    go_home.wait()
    closing.set()
    for t in threads:
        t.join(5)


def measure(world: int, processes: int, idle_s: float, protocol: str, direct: bool = False) -> dict:
    """One run: `world` - 1 waiting ranks, an idle window, then rank 0 publishes a stop. `direct`:
    the ranks reach the store itself and the kernel counts what it receives (ss); otherwise they
    go through the counting proxy."""
    import torch.distributed as dist
    from msprobe_cpp.stop_channel import StopChannel

    ctx = mp.get_context("spawn")
    store_port, proxy_port = free_port(), free_port()
    master = dist.TCPStore("127.0.0.1", store_port, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=60))
    reads, sent_bytes = ctx.Value("q", 0), ctx.Value("q", 0)
    proxy = None
    if not direct:
        proxy_ready = ctx.Event()
        proxy = ctx.Process(target=run_proxy, args=(proxy_port, store_port, reads, sent_bytes, proxy_ready),
                            daemon=True)
        proxy.start()
        proxy_ready.wait(30)
    port = store_port if direct else proxy_port
    count = (lambda: segments_into(store_port)) if direct else (lambda: reads.value)
    prefix = f"msprobe_cpp/bench{world}/"
    connected = ctx.Value("q", 0)
    told_at = ctx.Array("d", world)
    go_home = ctx.Event()
    # Rank 0 is the stopping rank (the harness); the others wait.
    waiting = list(range(1, world))
    slices = [waiting[i::processes] for i in range(processes) if waiting[i::processes]]
    workers = [ctx.Process(target=run_ranks, args=(s, world, port, prefix, protocol, connected,
                                                   told_at, go_home), daemon=True) for s in slices]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 120
    while connected.value < len(waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Every wait is in: what the connecting did is not idle traffic. A thread's wait request goes
    # out after it counted itself connected; with thousands of threads on two cores, seconds later.
    time.sleep(1.0 + world / 500)
    before = count()
    series = []
    for _ in range(int(idle_s)):
        time.sleep(1.0)
        series.append(count() - before)
    time.sleep(idle_s - int(idle_s))
    idle = count() - before
    stopper = StopChannel("127.0.0.1", port, 0, world, prefix)
    published = time.time()
    stopper.publish({"rank": 0, "step": 0, "call": "bench", "origin": "op"})
    deadline = time.monotonic() + (30 if protocol != "hold" else 0)
    while time.monotonic() < deadline and sum(1 for r in waiting if told_at[r] > 0) < len(waiting):
        time.sleep(0.005)
    delays = [told_at[r] - published for r in waiting if told_at[r] > 0]
    go_home.set()
    for w in workers:
        w.join(10)
    if proxy is not None:
        proxy.terminate()
    del stopper, master
    return {
        "ranks": world,
        "protocol": protocol,
        "idle_requests_per_s": idle / idle_s,
        "idle_by_second": series,
        "told": len(delays),
        "last_told_ms": 1000 * max(delays) if delays else float("nan"),
        "median_told_ms": 1000 * statistics.median(delays) if delays else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="2,100,2000", help="comma-separated rank counts")
    parser.add_argument("--processes", type=int, default=8, help="processes the ranks are spread over")
    parser.add_argument("--idle-s", type=float, default=10.0, help="the idle window measured")
    parser.add_argument("--protocol", default="wait", choices=["wait", "poll", "hold"],
                        help="wait: the protocol; poll: the one before issue 52 (5 reads a second); "
                             "hold: the control, two connections a rank and no request")
    parser.add_argument("--via-proxy", action="store_true",
                        help="count at the counting proxy (what the tests do) instead of with ss at "
                             "the store; the proxy's hop adds to the time to tell")
    args = parser.parse_args()
    raise_file_limit()
    import torch
    direct = not args.via_proxy
    print(f"torch {torch.__version__}, protocol {args.protocol} and the control (hold), idle window "
          f"{args.idle_s:g} s, {args.processes} processes, counted "
          f"{'by ss at the store' if direct else 'at the proxy'}")
    print(f"{'ranks':>6} {'idle seg/s':>11} {'control':>8} {'told':>6} {'median ms':>10} {'last ms':>8}")
    for world in [int(n) for n in args.ranks.split(",")]:
        processes = min(args.processes, max(1, world - 1))
        control = measure(world, processes, args.idle_s, "hold", direct)
        r = measure(world, processes, args.idle_s, args.protocol, direct)
        print(f"{r['ranks']:>6} {r['idle_requests_per_s']:>11.1f} {control['idle_requests_per_s']:>8.1f} "
              f"{r['told']:>6} {r['median_told_ms']:>10.1f} {r['last_told_ms']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
