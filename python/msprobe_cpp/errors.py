"""What the live overflow guard tells a program: an Overflow, and the OverflowError that carries one."""
from typing import Any


class Overflow:
    """The finding that flagged a step: the call, where its NaN/inf came from, and the evidence.

    `origin` is "op" (the call made NaN/inf from finite inputs), "input" (it came in with a tensor
    argument no call of the step made: the batch), "parameter" (it came in with a parameter or
    buffer of a started model, named in `parameter`), or None (downstream of an origin, or a
    numerical mutation). `tensors` lists each anomalous argument as a dict (position, type, dtype,
    shape, nan, posinf, neginf, text). `gradients` names the parameters whose gradients are not
    finite (backward origins); `masked` is True when a backward anomaly reached none of them.
    `absorbed` is True for foreign NaN/inf that a call turned into finite outputs (no stop: the
    report's first_anomaly of a step with nothing else).
    """

    # The fields are the engine's (_C.overflow_fields lists them): set from its facts.
    peer_stop: bool = False

    def __init__(self, **facts: Any) -> None:
        self.__dict__.update(facts)

    def __repr__(self) -> str:
        return f"Overflow(step={self.step}, call={self.call!r}, origin={self.origin!r})"

    def __str__(self) -> str:
        return self.message


class OverflowError(RuntimeError):  # noqa: A001 - msprobe_cpp.OverflowError, by design
    """Raised at the origin of the first unexplained NaN/inf of a step: out of the hooked call
    (forward), out of loss.backward() (a backward op whose NaN/inf reached a parameter gradient),
    or out of debugger.step() (a loss scaler that missed an overflow, or a loss scale below
    min_loss_scale). The step's files are written and the step has ended when it arrives; the
    hooks stay in, so a program that catches it and goes on is guarded as before.

    The message says it all; the same facts are attributes (those of `Overflow`), and
    `e.overflow` is the Overflow itself."""

    peer_stop: bool = False

    def __init__(self, message: str, overflow: Overflow) -> None:
        super().__init__(message)
        self.overflow = overflow
        for key, value in overflow.__dict__.items():
            setattr(self, key, value)  # message too: the table of docs/overflow-detection.md

    @classmethod
    def _of(cls, **facts: Any) -> "OverflowError":
        """The engine's one call for a stop: the error and its Overflow, made together."""
        return cls(facts["message"], Overflow(**facts))


class DistributedStopError(RuntimeError):
    """Under torch.distributed, the run cannot go on after a stop: raised by the first debugger
    call, hooked call, collective or optimizer step after a rank's OverflowError (its own or a
    peer's). Not an OverflowError on purpose: a program that catches OverflowError and skips the
    batch (the single-process pattern) would pair its next collective with another step's on
    the other ranks (DDP's all-reduce is made in C++, where no hook can hold it back), and the
    ranks' parameters would drift apart. So the run ends, with this message, on every rank."""

    def __init__(self, rank: int, step: int, reason: str) -> None:
        super().__init__(
            f"[rank {rank}] msprobe_cpp: the run stopped at step {step} under torch.distributed "
            f"({reason}) and cannot go on: a rank that skips the batch would pair its next "
            "collective with another step's on the other ranks. Each rank's evidence is in its "
            "step folder; restart from a checkpoint")
        self.rank = rank
        self.step = step
