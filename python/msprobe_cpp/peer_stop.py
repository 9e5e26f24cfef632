"""One rank stops, every rank stops: the coordinated stop under torch.distributed.

The rank that stops publishes its stop on torch.distributed's own store (the one
init_process_group made) before it raises, and waits up to a few seconds until every other rank
has taken it in. Each rank has a thread blocked in one store wait on a key of its own, which the
stopping rank sets for every rank after the stop's facts (stop_channel.py): while nothing is wrong a
rank makes no store request at all, whatever the number of ranks. A rank in the
stopping rank's step (or past it) has its records of the step written by that thread at once,
and its line printed, before it says it has seen the stop: so the evidence is on disk before
the stopping process ends and gloo's "Connection closed by peer" reaches a rank blocked in DDP's
all-reduce (made in C++, where no hook sees it). The rank itself then raises
msprobe_cpp.OverflowError (`peer_stop = True`, origin "peer") at its next hooked call, its next
start()/stop()/step(), its optimizer step, or out of the collective (loss.backward(), DDP's
forward) that failed because the stopping rank left. A rank still in an earlier step finishes it
first, so that every rank stops in the same step.

The contract: a stop under torch.distributed ends the run on every rank. After its
OverflowError, a rank's next debugger call, hooked call, collective or optimizer step raises
DistributedStopError (not an OverflowError): a program that caught the error and skipped the
batch would pair its next collective with another step's on the other ranks.
"""
import atexit
import logging
import os
import threading
import time
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from . import _C
from . import log
from .errors import DistributedStopError, Overflow, OverflowError
from .patches import Patches
from .stop_channel import StopChannel

ACK_WAIT_S = 5.0
_active: Optional["PeerStop"] = None
# What a collective that failed because a peer left says (gloo's closed connection, NCCL's abort,
# a store that went away): only such a failure waits for a peer's stop to explain it.
_COLLECTIVE_FAILURE = ("gloo", "Connection closed", "Connection reset", "NCCL", "nccl", "c10d",
                       "ProcessGroup", "Socket", "socket", "Broken pipe", "timed out", "Timed out")


def is_collective_failure(error: BaseException) -> bool:
    text = str(error)
    return any(word in text for word in _COLLECTIVE_FAILURE)


def active() -> Optional["PeerStop"]:
    """The live debugger's coordinator, or None outside torch.distributed."""
    return _active


def key_prefix() -> str:
    """The tool's keys belong to one attempt of one run: torchrun's agent keeps its store across
    restarts, and an attempt must not read the stop of the attempt before it."""
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    if run is None:
        return "msprobe_cpp/"
    return f"msprobe_cpp/{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"


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


def create(session: Any, patches: Patches) -> Optional["PeerStop"]:
    """The coordinator of this rank, or None (with one line) where the store cannot be reached:
    the training goes on, each rank stopping on its own as outside torch.distributed."""
    address = _store_address()
    try:
        if address is None:
            raise RuntimeError("the store is not a TCPStore at a known address")
        return PeerStop(session, patches, *address)
    except Exception as e:  # noqa: BLE001 - the tool's trouble must not stop the training
        log.warn(f"torch.distributed's store cannot be reached ({e}): a stop on one rank will not "
                 "stop the others")
        return None


class PeerStop:
    def __init__(self, session: Any, patches: Patches, host: str, port: int) -> None:
        global _active
        self._session = session
        self._patches = patches
        self._rank = dist.get_rank()
        self._world = dist.get_world_size()
        prefix = key_prefix()
        self._channel: Optional[StopChannel] = StopChannel(host, port, self._rank, self._world, prefix)
        self._in_prefix = prefix + "in/"
        self.peer: Optional[Dict[str, Any]] = None  # the stopping rank's facts, once seen
        self._seen = threading.Event()
        self._store_gone = threading.Event()  # the store's host left: no stop can come any more
        self._closing = threading.Event()
        self._stopped_here: Optional[int] = None  # the step this rank stopped in
        self._raised_peer = False
        # The watcher and the main thread both may write the peer stop's evidence: once.
        self._evidence_lock = threading.Lock()
        self._evidence: Optional[str] = None  # the folder written ("" if none could be)
        self._evidence_step = -1  # the step it holds
        # The store's host keeps its store (and so the store's server) until it has told every
        # watcher that it is leaving (depart()): a program may drop it first, through
        # destroy_process_group bound before start(), or at the end of the interpreter.
        self._hosted_store = _hosted_store(self._rank)
        self._thread = threading.Thread(target=self._watch, name="msprobe_cpp peer stop", daemon=True)
        self._thread.start()
        # A thread still inside a store wait when the interpreter ends takes the process down with it.
        atexit.register(self.depart)
        _active = self
        _explain_collective_failures(patches)
        _depart_before_destroy(patches)

    def close(self) -> None:
        """Ends the watcher (within one wait period) and forgets this coordinator."""
        global _active
        if _active is self:
            _active = None
            self._patches.remove(["peer"])
        self._closing.set()
        # A store that went away (its host's process group destroyed) ends the wait by itself.
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(0.05)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            channel = self._channel
            try:
                if channel is not None:
                    channel.wake_own_watcher()
                self._thread.join(1.0)
                if channel is not None and not self._thread.is_alive():
                    channel.forget_own_wake()
            except Exception:  # noqa: BLE001 - the store is gone: so is the watcher's wait
                self._thread.join(1.0)
        # Our store connections go now, not in the interpreter's final collection: once the store's
        # host has left, a rank spent seconds there (issue 32: exits no slower than without us).
        self._drop_store()

    def depart(self) -> None:
        """This rank leaves the run (its default process group destroyed, or its process ending):
        close(), and where this rank hosts the store, every other watcher told first."""
        channel = self._channel
        try:
            if channel is not None and self._hosted_store is not None:
                channel.announce_leaving()
        except Exception:  # noqa: BLE001 - the store is gone already: so are the waits
            pass
        self.close()
        self._hosted_store = None  # the server may go now

    # --- the stopping rank ---

    def publish(self, overflow: Overflow) -> None:
        """Called just before this rank raises its own stop."""
        if self._stopped_here is not None or self.peer is not None:
            return  # one stop per run; a rank stopped by a peer does not publish
        self._stopped_here = int(overflow.step)
        self._session.set_peer_stopped(own=True)  # the hooks now ask check(): the run has ended
        # The fields every rank reads back (core/overflow_facts.cpp, peer_overflow_members).
        facts = {key: getattr(overflow, attr) for key, attr in _C.peer_overflow_fields()}
        facts["rank"] = self._rank
        try:
            # One stop is the run's, the same on every run: the rank whose own data or op made
            # the NaN/inf. A rank that got it through a collective (origin peer) leaves it to the
            # rank that fed it, which stops at that collective too (going into one is damage).
            if overflow.origin == "peer" and self._someone_published():
                return
            channel = self._channel
            if channel is None or channel.store.add(channel.claim_key, 1) > 1:
                return  # two ranks stopped at once: the first to claim is the run's stop
            channel.publish(facts)
            deadline = time.monotonic() + ACK_WAIT_S
            while channel.store.add(channel.seen_key, 0) < self._world - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - a broken store must not hide this rank's own stop
            pass

    def _someone_published(self) -> bool:
        """Whether another rank's stop is, or within a few seconds is, published."""
        deadline = time.monotonic() + ACK_WAIT_S
        while self._channel is not None and self._channel.store.add(self._channel.published_key, 0) == 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    # --- collectives: where a NaN/inf that arrived through one came from ---

    def _input_key(self, call: str) -> str:
        # A send tells "p2p>DST", the receive that pairs with it asks "p2p<SRC": one key.
        if call.startswith("p2p>"):
            call = f"p2p/{self._rank}/{call[4:]}"
        elif call.startswith("p2p<"):
            call = f"p2p/{call[4:]}/{self._rank}"
        return f"{self._in_prefix}{self._session.current_step}/{call}"

    def mark_collective_input(self, call: str) -> None:
        """This rank's input to `call` held NaN/inf; set before the collective runs, so any rank
        that sees its result afterwards finds it."""
        try:
            key = self._input_key(call)
            store = self._channel.store  # None once the store is gone: raises, caught below
            store.set(key, str(self._rank))
            store.add(key + "/marked", 1)  # TCPStore of torch 1.13 has no check(): a counter says
        except Exception:  # noqa: BLE001 - then the receivers judge the call an op origin
            pass

    def collective_input_rank(self, call: str) -> Optional[int]:
        """The rank whose input to `call` held NaN/inf, if any: one store operation, made only
        when the call's result is anomalous and this rank's input was clean."""
        try:
            key = self._input_key(call)
            store = self._channel.store
            return int(store.get(key)) if store.add(key + "/marked", 0) > 0 else None
        except Exception:  # noqa: BLE001
            return None

    # --- the other ranks ---

    def _watch(self) -> None:
        channel = self._channel
        if channel is None:
            return
        try:
            facts = channel.watch(self._closing)
        except Exception:  # noqa: BLE001
            facts, channel.host_left = None, True  # the store is gone: the run ended
        if channel.host_left:
            self._store_gone.set()
            self._drop_store()
        if facts is None:
            return  # closing, or no stop can come any more
        if facts.get("rank") != self._rank:
            self.peer = facts
            self._session.set_peer_stopped()
            # A rank that stopped itself has its evidence on disk already: its step ended,
            # and a write now would be an empty next step.
            if self._stopped_here is None and self._session.current_step >= int(facts["step"]):
                self._write_evidence()  # before the stopping rank may leave
            try:
                channel.watch_store.add(channel.seen_key, 1)
            except Exception:  # noqa: BLE001
                pass
            _abort_nccl()
        self._seen.set()

    def _write_evidence(self) -> str:
        """This rank's records of its step, written as a peer stop, and its line: once."""
        peer = self.peer
        assert peer is not None
        with self._evidence_lock:
            if self._evidence is None:
                self._evidence_step = self._session.current_step  # stop_for_peer ends the step
                self._evidence = self._session.stop_for_peer(peer)
                # Said before the acknowledgement: the rank may die in a failed collective next.
                log.say(logging.WARNING, _C.peer_stop_line(peer, self._rank))
            return self._evidence

    def check(self, gradients: Optional[list] = None) -> None:
        """At each point where the run could go on (a hooked call, start()/stop()/step(), an
        optimizer step, a collective): raises a peer's stop once this rank is in its step, and
        DistributedStopError after this rank's OverflowError."""
        if self._stopped_here is not None:
            raise DistributedStopError(self._rank, self._stopped_here, "this rank overflowed")
        peer = self.peer
        if peer is None:
            return
        if self._raised_peer:
            raise DistributedStopError(self._rank, int(peer["step"]), f"rank {peer['rank']} overflowed")
        if int(peer["step"]) > self._session.current_step:
            return  # this rank finishes its step first: every rank stops in the same step
        self.raise_now(gradients)

    def wait_for_peer(self) -> bool:
        """Non-finite averaged gradients: whether a peer's stop explains them (it publishes at the
        end of its own backward; a few seconds at most, for this rare case only)."""
        deadline = time.monotonic() + ACK_WAIT_S
        while not self._seen.is_set() and not self._store_gone.is_set() and time.monotonic() < deadline:
            self._seen.wait(0.02)
        return self.peer is not None

    def after_collective_failure(self, error: BaseException) -> None:
        """A collective failed: if a peer stopped, that is the reason, raised as such. The stopping
        rank publishes before it leaves, so a failure its leaving caused finds the stop published;
        any other failure (a rank killed, the store's host gone) goes through at once."""
        if self._stopped_here is not None:
            self.check()
        if not is_collective_failure(error):
            return
        if self.peer is None and self._published():
            self.wait_for_peer()  # the watcher reads it within one period
        if self.peer is not None:
            self.check()

    def _published(self) -> bool:
        try:
            return self._channel is not None and self._channel.store.add(self._channel.published_key, 0) > 0
        except Exception:  # noqa: BLE001 - the store is gone: no stop can be read any more
            self._store_gone.set()
            self._drop_store()
            return False

    def _drop_store(self) -> None:
        """Our connections go as soon as the store is gone: torch 1.13's TCPStore client has a
        thread that spins on the closed socket until the client is destroyed, a core each, which
        slowed the exit of every surviving rank (issue 42)."""
        self._channel = None

    def raise_now(self, gradients: Optional[list] = None) -> None:
        peer = self.peer
        assert peer is not None
        dump_dir = self._write_evidence()
        step = self._evidence_step
        self._raised_peer = True
        self._session.set_peer_stopped(own=True)  # raised here: the hooks no longer raise it
        facts = _C.peer_overflow_fields(peer, step, self._rank, dump_dir or "", list(gradients or []))
        raise OverflowError(facts["message"], Overflow(**facts))


def _hosted_store(rank: int) -> Any:
    """The default process group's store where this process hosts its server (rank 0, unless
    torchrun's agent hosts it: TORCHELASTIC_USE_AGENT_STORE), else None."""
    if rank != 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a torch without it: the watchers' waits may break at exit
        return None


def _depart_before_destroy(patches: Patches) -> None:
    """destroy_process_group() of the default group ends this rank's part in the coordination
    first (PeerStop.depart): on the store's host, the store goes with the group. Kind "peer"."""
    for owner in (dist, dist.distributed_c10d):
        original = owner.__dict__.get("destroy_process_group")
        if original is not None:
            patches.replace("peer", owner, "destroy_process_group", _departing_first(original))


def _departing_first(destroy: Any) -> Any:
    def wrapper(group: Any = None, *args: Any, **kwargs: Any) -> Any:
        guard = _active
        if guard is not None and (group is None or group is dist.GroupMember.WORLD):
            guard.depart()
        return destroy(group, *args, **kwargs)
    return _named_like(destroy, wrapper)


def _explain_collective_failures(patches: Patches) -> None:
    """Collectives that no hook sees: DDP's gradient all-reduce (made in its C++ reducer, inside
    loss.backward()) and its forward's buffer broadcast. When one fails because a peer stopped and
    left, the error a rank gets is gloo's "Connection closed by peer"; these wrappers raise the
    peer's stop instead (PeerStop.after_collective_failure). Kind "peer"."""
    targets = [(torch.autograd, "backward")]
    ddp = getattr(getattr(torch.nn, "parallel", None), "DistributedDataParallel", None)
    if ddp is not None:
        targets.append((ddp, "forward"))
    for owner, name in targets:
        original = owner.__dict__.get(name)
        if original is not None:
            patches.replace("peer", owner, name, _told_failures(original))


def _told_failures(call: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except (OverflowError, DistributedStopError):
            raise
        except RuntimeError as e:
            guard = _active
            if guard is not None:
                guard.after_collective_failure(e)
            raise
    return _named_like(call, wrapper)


def _named_like(call: Any, wrapper: Any) -> Any:
    wrapper.__name__ = getattr(call, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(call, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(call, "__doc__", None)
    wrapper.__wrapped__ = call  # type: ignore[attr-defined]
    return wrapper
