"""One rank stops, every rank stops: the coordinated stop under torch.distributed.

The rank that stops publishes its stop on torch.distributed's own store (the one
init_process_group made) before it raises, and waits up to a few seconds until every other rank
has seen it. Each rank has a thread that looks for it five times a second (a counter read, which
never times out; no store operation per step while nothing is wrong). Once a rank has seen it, it stops at its next hooked call, at
start()/stop()/step(), or, if it is blocked in a collective that the stopping rank will never
join, when that collective fails (gloo reports the closed connection when the stopping process
ends): it writes its records of the step (overflow_report.json says "peer_stop"), prints one line
and raises msprobe_cpp.OverflowError with `peer_stop = True`.

The contract: a stop under torch.distributed ends the run on every rank. The stopping rank
refuses further collectives (a program that caught the error and went on would otherwise pair
its next collective with another step's on the other ranks).
"""
import atexit
import json
import os
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Dict, Optional, Tuple

import torch.distributed as dist

from . import _C
from .errors import Overflow, OverflowError

KEY = "msprobe_cpp/stop"
SEEN = "msprobe_cpp/stop_seen"
PUBLISHED = "msprobe_cpp/stop_published"  # a counter: add(0) reads it without a wait
ACK_WAIT_S = 5.0
# How often the watcher looks for the key. A look (add(PUBLISHED, 0): torch 1.13's TCPStore has
# no check()) is one store round trip that never times out: a blocking wait that times out and is renewed makes torch 2.x's c10d log two
# warnings per period on every rank (issue 32). Closing wakes the watcher at once.
WAIT_PERIOD_S = 0.2
_active: Optional["PeerStop"] = None


def active() -> Optional["PeerStop"]:
    """The live debugger's coordinator, or None outside torch.distributed."""
    return _active


def _store_address() -> Optional[Tuple[str, int]]:
    """Where the process group's TCPStore listens: the store says (behind init_process_group's
    PrefixStore); else env:// (torchrun) names it."""
    try:
        store = dist.distributed_c10d._get_default_store()
        store = getattr(store, "underlying_store", store)
        host, port = getattr(store, "host", None), getattr(store, "port", None)
        if host and port:
            return str(host), int(port)
    except Exception:  # noqa: BLE001 - a torch without these: the environment may say
        pass
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    return None


def _abort_nccl() -> None:
    """NCCL does not notice that a peer left: a rank blocked in one of its collectives would wait
    for the watchdog's timeout. Aborting the communicator makes that collective fail at once (and
    the failure is then raised as the peer's stop). gloo reports the closed connection by itself.
    Where this torch has no abort, nothing is done. (Not run on this project's CI: no GPU.)"""
    try:
        if dist.get_backend() != "nccl":
            return
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if abort is not None:
            abort()
    except Exception:  # noqa: BLE001 - the stop is still raised at the next hooked call
        pass


def create(session: Any) -> Optional["PeerStop"]:
    """The coordinator of this rank, or None (with one line) where the store cannot be reached:
    the training goes on, each rank stopping on its own as outside torch.distributed."""
    address = _store_address()
    try:
        if address is None:
            raise RuntimeError("the store is not a TCPStore at a known address")
        return PeerStop(session, *address)
    except Exception as e:  # noqa: BLE001 - the tool's trouble must not stop the training
        print(f"msprobe_cpp: warning: torch.distributed's store cannot be reached ({e}): a stop on one "
              "rank will not stop the others", file=sys.stderr)
        return None


class PeerStop:
    def __init__(self, session: Any, host: str, port: int) -> None:
        global _active
        self._session = session
        # Connections of our own: a TCPStore client serves one request at a time, and the watcher's
        # wait would hold the process group's (or our main thread's) for as long as it waits.
        self._store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=10))
        self._watch_store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(hours=1))
        self._rank = dist.get_rank()
        self._world = dist.get_world_size()
        self.peer: Optional[Dict[str, Any]] = None  # the stopping rank's facts, once seen
        self._seen = threading.Event()
        self._closing = threading.Event()
        self._stopped_here = False
        self._raised_peer = False
        self._thread = threading.Thread(target=self._watch, name="msprobe_cpp peer stop", daemon=True)
        self._thread.start()
        # A thread still inside a store wait when the interpreter ends takes the process down with it.
        atexit.register(self.close)
        _active = self

    def close(self) -> None:
        """Ends the watcher (within one wait period) and forgets this coordinator."""
        global _active
        if _active is self:
            _active = None
        self._closing.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(WAIT_PERIOD_S + 1.0)

    # --- the stopping rank ---

    def publish(self, overflow: Overflow) -> None:
        """Called just before this rank raises its own stop."""
        if self._stopped_here or self.peer is not None:
            return  # one stop per run; a rank stopped by a peer does not publish
        self._stopped_here = True
        facts = {"rank": self._rank, "step": overflow.step, "call": overflow.call,
                 "origin": overflow.origin, "scene": overflow.scene, "level": overflow.level}
        try:
            self._store.set(KEY, json.dumps(facts))
            self._store.add(PUBLISHED, 1)  # what the watchers look at
            deadline = time.monotonic() + ACK_WAIT_S
            while self._store.add(SEEN, 0) < self._world - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - a broken store must not hide this rank's own stop
            pass

    # --- collectives: where a NaN/inf that arrived through one came from ---

    def _input_key(self, call: str) -> str:
        return f"msprobe_cpp/in/{self._session.current_step}/{call}"

    def mark_collective_input(self, call: str) -> None:
        """This rank's input to `call` held NaN/inf; set before the collective runs, so any rank
        that sees its result afterwards finds it."""
        try:
            key = self._input_key(call)
            self._store.set(key, str(self._rank))
            self._store.add(key + "/marked", 1)  # TCPStore of torch 1.13 has no check(): a counter says
        except Exception:  # noqa: BLE001 - then the receivers judge the call an op origin
            pass

    def collective_input_rank(self, call: str) -> Optional[int]:
        """The rank whose input to `call` held NaN/inf, if any: one store operation, made only
        when the call's result is anomalous and this rank's input was clean."""
        try:
            key = self._input_key(call)
            return int(self._store.get(key)) if self._store.add(key + "/marked", 0) > 0 else None
        except Exception:  # noqa: BLE001
            return None

    # --- the other ranks ---

    def _watch(self) -> None:
        while not self._closing.is_set():
            try:
                if self._watch_store.add(PUBLISHED, 0) == 0:
                    self._closing.wait(WAIT_PERIOD_S)
                    continue  # no stop yet: look again, unless closing
                facts = json.loads(self._watch_store.get(KEY))
            except Exception:  # noqa: BLE001
                return  # the store is gone: the run ended
            if facts.get("rank") != self._rank:
                self.peer = facts
                self._session.set_peer_stopped()
                try:
                    self._watch_store.add(SEEN, 1)
                except Exception:  # noqa: BLE001
                    pass
                _abort_nccl()
            self._seen.set()
            return

    def check_peer(self) -> None:
        """At start()/stop()/step(): raises the stop a peer published."""
        if self.peer is not None:
            self.raise_now()

    def before_collective(self) -> None:
        """Raises a peer's stop, or refuses a collective after this rank's own stop."""
        self.check_peer()
        if self._stopped_here:
            message = (f"[rank {self._rank}] msprobe_cpp: this rank stopped the run at an overflow; no "
                       "further collective is made, as every other rank has stopped with it")
            facts = self._facts(self._session.current_step, None, False)
            facts["message"] = message
            raise OverflowError(message, Overflow(**facts))

    def after_collective_failure(self) -> None:
        """A collective failed: if a peer stopped (or stops within a few seconds: the failure may
        come first), that is the reason, raised as such."""
        if self._seen.wait(ACK_WAIT_S) and self.peer is not None:
            self.raise_now()

    def raise_now(self) -> None:
        peer = self.peer
        assert peer is not None
        step = self._session.current_step
        dump_dir = "" if self._raised_peer else self._session.stop_for_peer(
            int(peer["rank"]), int(peer["step"]), str(peer["call"]), str(peer.get("origin") or ""))
        line = (f"[rank {self._rank}] stopping: rank {peer['rank']} overflowed at step {peer['step']} "
                f"({peer['call']}, origin {peer.get('origin')})")
        if not self._raised_peer:
            print(line, file=sys.stderr, flush=True)
        self._raised_peer = True
        message = line + (f"\n  dump:   {dump_dir}" if dump_dir else "")
        facts = self._facts(step, dump_dir or None, True)
        facts.update(peer_rank=int(peer["rank"]), peer_step=int(peer["step"]), call=peer["call"],
                     origin=peer.get("origin"), scene=peer.get("scene"), level=peer.get("level"),
                     message=message)
        raise OverflowError(message, Overflow(**facts))

    def _facts(self, step: Any, dump_dir: Optional[str], peer_stop: bool) -> Dict[str, Any]:
        """Overflow's fields (the C++ engine's list of them) for a stop naming no call here."""
        facts: Dict[str, Any] = _C.overflow_fields(step, self._rank)
        facts.update(dump_dir=dump_dir, peer_stop=peer_stop)
        return facts
