"""The coordinated stop's store protocol at scale: N simulated ranks against one TCPStore.

Each simulated rank is a thread running the watcher half of msprobe_cpp's protocol
(peer_stop.StopChannel: two store connections of its own, one blocked in a wait), spread over
a few processes. A counting TCP proxy sits between the ranks and the store. The harness reports:
- the requests (client->store reads at the proxy) and bytes per second while nothing is wrong;
- the time from a stop's publication until the last rank has its facts (through the proxy, so an
  upper bound).
`--protocol poll` runs the protocol before issue 52 (a counter read five times a second), for the
comparison. Run with the torch 2 venv (multi_set) or Debian's 1.13:

    MSPROBE_CPP_PACKAGE_ROOT=build-torch2/pkg build-torch2/venv/bin/python bench/stop_protocol.py \\
        --ranks 2,100,2000
"""
import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import socket
import statistics
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


# --- the simulated ranks ------------------------------------------------------------------------

def run_ranks(ranks, world: int, port: int, prefix: str, protocol: str, connected, told_at,
              go_home) -> None:
    raise_file_limit()
    from msprobe_cpp.peer_stop import StopChannel

    closing = threading.Event()

    def one_rank(rank: int) -> None:
        channel = StopChannel("127.0.0.1", port, rank, world, prefix, timeout=timedelta(seconds=60))
        with connected.get_lock():
            connected.value += 1
        if protocol == "wait":
            facts = channel.wait_for_stop(closing)
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


def measure(world: int, processes: int, idle_s: float, protocol: str) -> dict:
    import torch.distributed as dist
    from msprobe_cpp.peer_stop import StopChannel

    ctx = mp.get_context("spawn")
    store_port, proxy_port = free_port(), free_port()
    master = dist.TCPStore("127.0.0.1", store_port, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=60))
    reads, sent_bytes = ctx.Value("q", 0), ctx.Value("q", 0)
    proxy_ready = ctx.Event()
    proxy = ctx.Process(target=run_proxy, args=(proxy_port, store_port, reads, sent_bytes, proxy_ready),
                        daemon=True)
    proxy.start()
    proxy_ready.wait(30)
    prefix = f"msprobe_cpp/bench{world}/"
    connected = ctx.Value("q", 0)
    told_at = ctx.Array("d", world)
    go_home = ctx.Event()
    # Rank 0 is the stopping rank (the harness); the others wait.
    waiting = list(range(1, world))
    slices = [waiting[i::processes] for i in range(processes) if waiting[i::processes]]
    workers = [ctx.Process(target=run_ranks, args=(s, world, proxy_port, prefix, protocol, connected,
                                                   told_at, go_home), daemon=True) for s in slices]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 120
    while connected.value < len(waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # every wait is in: what the connecting did is not idle traffic
    with reads.get_lock():
        reads.value = 0
    with sent_bytes.get_lock():
        sent_bytes.value = 0
    time.sleep(idle_s)
    idle_reads, idle_bytes = reads.value, sent_bytes.value
    stopper = StopChannel("127.0.0.1", proxy_port, 0, world, prefix)
    published = time.time()
    stopper.publish({"rank": 0, "step": 0, "call": "bench", "origin": "op"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(1 for r in waiting if told_at[r] > 0) < len(waiting):
        time.sleep(0.005)
    delays = [told_at[r] - published for r in waiting if told_at[r] > 0]
    go_home.set()
    for w in workers:
        w.join(10)
    proxy.terminate()
    del stopper, master
    return {
        "ranks": world,
        "protocol": protocol,
        "idle_requests_per_s": idle_reads / idle_s,
        "idle_bytes_per_s": idle_bytes / idle_s,
        "told": len(delays),
        "last_told_ms": 1000 * max(delays) if delays else float("nan"),
        "median_told_ms": 1000 * statistics.median(delays) if delays else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="2,100,2000", help="comma-separated rank counts")
    parser.add_argument("--processes", type=int, default=8, help="processes the ranks are spread over")
    parser.add_argument("--idle-s", type=float, default=5.0, help="the idle window measured")
    parser.add_argument("--protocol", default="wait", choices=["wait", "poll"])
    args = parser.parse_args()
    raise_file_limit()
    import torch
    print(f"torch {torch.__version__}, protocol {args.protocol}, idle window {args.idle_s:g} s, "
          f"{args.processes} processes")
    print(f"{'ranks':>6} {'idle req/s':>11} {'idle B/s':>9} {'told':>6} {'median ms':>10} {'last ms':>8}")
    for world in [int(n) for n in args.ranks.split(",")]:
        r = measure(world, min(args.processes, max(1, world - 1)), args.idle_s, args.protocol)
        print(f"{r['ranks']:>6} {r['idle_requests_per_s']:>11.1f} {r['idle_bytes_per_s']:>9.0f} "
              f"{r['told']:>6} {r['median_told_ms']:>10.1f} {r['last_told_ms']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
