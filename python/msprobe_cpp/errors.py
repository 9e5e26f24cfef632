"""The exception a live overflow stop raises."""
from typing import List, Optional


class OverflowError(RuntimeError):  # noqa: A001 - msprobe_cpp.OverflowError, by design
    """Raised out of the hooked call (forward) or loss.backward() (backward) at the first call whose
    overflow level reaches the config's stop_level. The step's files are already written and every
    hook is removed when it arrives. The message says it all; the same facts are attributes."""

    def __init__(self, message: str, *, step: int, rank: int, call: str, scene: str, level: str,
                 input_args_anomaly_indices: List[int], input_kwargs_anomaly_keys: List[str],
                 output_anomaly_indices: List[int], module: Optional[str], source: Optional[str],
                 dump_dir: str, tensors: List[str]) -> None:
        super().__init__(message)
        self.step = step
        self.rank = rank
        self.call = call
        self.scene = scene
        self.level = level
        self.input_args_anomaly_indices = input_args_anomaly_indices
        self.input_kwargs_anomaly_keys = input_kwargs_anomaly_keys
        self.output_anomaly_indices = output_anomaly_indices
        self.module = module
        self.source = source
        self.dump_dir = dump_dir
        self.tensors = tensors  # "output[0]: torch.float16 [8, 4]: 0 NaN, 12 +inf, 0 -inf", ...
