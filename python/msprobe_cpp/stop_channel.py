"""The store half of the coordinated stop (peer_stop.py): one rank's keys on torch.distributed's
store, the publishing of a stop, the watcher's wait for one, and the store's host leaving."""
import json
import threading
import time
from datetime import timedelta
from typing import Any, Dict, Optional

import torch.distributed as dist

KEY = "stop"
SEEN = "stop_seen"
PUBLISHED = "stop_published"  # a counter: add(0) reads it without a wait
WAKE = "wake/"  # + a rank: the key that rank's watcher waits on
WATCHING = "watching"  # a counter: the watchers in a store wait now
# How long the store's host, leaving, waits for the other ranks' watchers to end their waits.
LEAVE_WAIT_S = 2.0
# How long one blocking wait lasts before it is renewed: a wait that times out makes torch 2.x's
# c10d log two warnings (issue 32), so it is renewed once a day, not every few seconds. Closing
# sets the rank's own key, which ends the wait at once.
WAIT_PERIOD = timedelta(hours=24)


class StopChannel:
    """The store half of the coordinated stop, for one rank of a run: its keys, the publishing and
    the waiting. Rank r's watcher blocks in one wait on `wake/r`; the stopping rank sets the stop's
    facts and the published counter, then every rank's wake key to the facts (one multi_set where
    the store has it). Idle cost: no request (one renewed wait a day), two connections; a stop
    costs the publisher 3 requests, and each other rank 2 (the facts, its acknowledgement).
    docs/debugger.md has the cost model; bench/stop_protocol.py runs it for thousands of simulated
    ranks against one TCPStore."""

    CLOSING = b"closing"
    LEAVING = b"leaving"  # the store's host is going: no stop can come any more

    def __init__(self, host: str, port: int, rank: int, world: int, prefix: str,
                 timeout: timedelta = timedelta(seconds=10)) -> None:
        # Connections of our own: a TCPStore client serves one request at a time, and the watch
        # connection's wait would hold the process group's (or our main thread's) as long as it
        # waits. Both are made now: a connection made at exit, when the store's host may be
        # leaving, waits out its timeout and makes c10d print.
        self.store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
        self.watch_store = dist.TCPStore(host, port, is_master=False, timeout=WAIT_PERIOD)
        self.rank, self.world = rank, world
        self.key, self.seen_key, self.published_key = prefix + KEY, prefix + SEEN, prefix + PUBLISHED
        self.claim_key = prefix + "stop_claimed"
        self.watching_key = prefix + WATCHING
        self._wake_prefix = prefix + WAKE
        self.host_left = False  # the wait ended because the store's host is leaving

    def wake_key(self, rank: int) -> str:
        return f"{self._wake_prefix}{rank}"

    def publish(self, facts: Dict[str, Any]) -> None:
        """The facts and the counter first, then the wakes, each holding the facts."""
        text = json.dumps(facts)
        self.store.set(self.key, text)
        self.store.add(self.published_key, 1)
        self._wake_all(text)

    def _wake_all(self, text: str) -> None:
        keys = [self.wake_key(r) for r in range(self.world)]
        multi_set = getattr(self.store, "multi_set", None)  # torch >= 2.3: one request
        if multi_set is not None:
            multi_set(keys, [text] * len(keys))
        else:
            for key in keys:
                self.store.set(key, text)

    def announce_leaving(self) -> None:
        """The store's host is going (its process group destroyed, or its process ending): every
        watcher ends its wait now, and the host waits (LEAVE_WAIT_S at most) until none is left in
        one. A wait that the host's leaving breaks makes torch 2.x's c10d print a
        "recvValueWithTimeout failed" warning with a C++ stack on every rank. After a stop the
        wakes hold its facts and are left alone."""
        if self.store.add(self.published_key, 0) > 0:
            return
        self._wake_all(self.LEAVING.decode())
        deadline = time.monotonic() + LEAVE_WAIT_S
        while self.store.add(self.watching_key, 0) > 0 and time.monotonic() < deadline:
            time.sleep(0.005)

    def watch(self, closing: threading.Event) -> Optional[Dict[str, Any]]:
        """wait_for_stop, counted in the watching counter while it waits."""
        self.watch_store.add(self.watching_key, 1)
        facts = self.wait_for_stop(closing)
        self.watch_store.add(self.watching_key, -1)
        return facts

    def wait_for_stop(self, closing: threading.Event) -> Optional[Dict[str, Any]]:
        """Blocks until a stop is published (its facts), or `closing` is set (None). A store that
        went away raises."""
        store, wake = self.watch_store, self.wake_key(self.rank)
        while not closing.is_set():
            began = time.monotonic()
            try:
                store.wait([wake], WAIT_PERIOD)
            except Exception:  # noqa: BLE001 - a renewal, or the store gone (raised on)
                if time.monotonic() - began < WAIT_PERIOD.total_seconds() - 1.0:
                    raise
                continue
            if closing.is_set():
                return None
            told = store.get(wake)
            if told == self.LEAVING:
                self.host_left = True
                return None
            if told != self.CLOSING:
                return json.loads(told)
            # The key an earlier coordinator of this rank set at its close (a debugger replaced):
            # gone, then the counter looked at, since a stop published in between set the key
            # before it was deleted.
            store.delete_key(wake)
            if store.add(self.published_key, 0) > 0:
                return json.loads(store.get(self.key))
        return None

    def wake_own_watcher(self) -> None:
        """Ends this rank's wait (closing)."""
        self.store.set(self.wake_key(self.rank), self.CLOSING.decode())

    def forget_own_wake(self) -> None:
        """After the watcher ended: the next coordinator of this rank starts without a wake."""
        self.store.delete_key(self.wake_key(self.rank))
