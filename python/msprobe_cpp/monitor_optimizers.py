"""Where TrainerMon finds each parameter's reduced gradient and Adam moments, as msprobe 26.2.0's
OptimizerMonFactory finds them: by the optimizer's class name.

- A torch optimizer (and any other) keeps its state by parameter and the gradient is `p.grad`
  (or `p.main_grad`).
- DeepSpeed's ZeRO optimizers step flat fp32 copies: the state is keyed by a group's flat tensor
  and a parameter's moments are its slice of it; the reduced gradients are DeepSpeed's own
  partitions (`averaged_gradients`), `p.grad` being None. With several ranks a rank holds the
  slice of its partition only: a parameter outside it gets no gradient row and nan moments, as
  in msprobe; one that straddles two partitions gets its piece on each rank.

Nothing here imports deepspeed: the wrappers are told by their class's name, as msprobe tells them.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

# (name, parameter, reduced gradient, whether the optimizer keeps state for it, exp_avg, exp_avg_sq)
StepParameter = Tuple[str, torch.Tensor, Optional[torch.Tensor], bool, Optional[torch.Tensor],
                      Optional[torch.Tensor]]


def _local_grad(grad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # A DTensor's gradient is read as its shard, as msprobe reads it (its moments stay whole).
    # Any other is handed over as the very tensor (no detach: the C++ side reads under no_grad),
    # so that the monitor knows it for the gradient it read as it accumulated (same object and
    # version: read once).
    if grad is not None and grad.__class__.__name__ == "DTensor":
        return grad.to_local().detach()
    return grad


class OptimizerView:
    """A torch optimizer: its state by parameter, the gradient on the parameter."""

    def __init__(self, optimizer: Any, params_have_main_grad: bool) -> None:
        self.optimizer = optimizer
        self.params_have_main_grad = params_have_main_grad

    def has_state(self) -> bool:
        return bool(getattr(self.optimizer, "state", None))

    def grad(self, param: torch.Tensor) -> Optional[torch.Tensor]:
        return getattr(param, "main_grad", None) if self.params_have_main_grad else param.grad

    def moments(self, param: torch.Tensor) -> Tuple[bool, Optional[torch.Tensor], Optional[torch.Tensor]]:
        state = getattr(self.optimizer, "state", {})
        kept = state.get(param) if param in state else None
        if kept is None:
            return False, None, None
        return True, kept.get("exp_avg"), kept.get("exp_avg_sq")

    def parameters(self, params: Sequence[Tuple[str, torch.Tensor]], grads: bool = True,
                   moments: bool = True) -> List[StepParameter]:
        out = []
        for name, param in params:
            in_state, exp_avg, exp_avg_sq = self.moments(param) if moments else (False, None, None)
            grad = _local_grad(self.grad(param)) if grads else None
            out.append((name, param, grad, in_state, exp_avg, exp_avg_sq))  # read under no_grad
        return out


class _Slot:
    """One parameter's place in a ZeRO optimizer: its group, its slice of the group's flat fp32
    tensor (None outside this rank's partition) and its index among the group's gradients."""
    __slots__ = ("group", "start", "numel", "grad_index")

    def __init__(self, group: int, start: Optional[int], numel: int, grad_index: Optional[int]) -> None:
        self.group, self.start, self.numel, self.grad_index = group, start, numel, grad_index


class ZeroView(OptimizerView):
    """DeepSpeed's ZeRO wrappers. Subclasses name the groups, the flat tensors and the slots."""
    groups_attr = ""
    flat_attr = ""
    grads_attr = "averaged_gradients"

    def __init__(self, optimizer: Any, params_have_main_grad: bool) -> None:
        super().__init__(optimizer, params_have_main_grad)
        self._slots: Optional[Dict[int, _Slot]] = None  # made at the first step: DeepSpeed is set up then

    def _slot_of(self, param: torch.Tensor) -> Optional[_Slot]:
        if self._slots is None:
            self._slots = {id(p): self.slot(group, index, p)
                           for group, params in enumerate(getattr(self.optimizer, self.groups_attr))
                           for index, p in enumerate(params)}
        return self._slots.get(id(param))

    def slot(self, group: int, index: int, param: torch.Tensor) -> _Slot:
        raise NotImplementedError

    def _flat(self, slot: _Slot) -> torch.Tensor:
        return getattr(self.optimizer, self.flat_attr)[slot.group]

    def grad(self, param: torch.Tensor) -> Optional[torch.Tensor]:
        slot = self._slot_of(param)
        if slot is None or slot.start is None:
            return None
        if getattr(self.optimizer, "cpu_offload", False):
            grads = self._flat(slot).grad
            return None if grads is None else grads.narrow(0, slot.start, slot.numel)
        grads = (getattr(self.optimizer, self.grads_attr, None) or {}).get(slot.group)
        if grads is None or slot.grad_index is None or slot.grad_index >= len(grads):
            return None
        return grads[slot.grad_index]

    def moments(self, param: torch.Tensor) -> Tuple[bool, Optional[torch.Tensor], Optional[torch.Tensor]]:
        slot = self._slot_of(param)
        if slot is None:
            return False, None, None
        kept = self.optimizer.state.get(self._flat(slot))
        if kept is None:
            return False, None, None
        if slot.start is None:  # outside this rank's partition: msprobe's nan row
            return True, None, None
        return True, *(self._narrow(kept.get(key), slot) for key in ("exp_avg", "exp_avg_sq"))

    @staticmethod
    def _narrow(flat: Optional[torch.Tensor], slot: _Slot) -> Optional[torch.Tensor]:
        return None if flat is None else flat.narrow(0, slot.start, slot.numel)


class ZeroPartitionView(ZeroView):
    """ZeRO-1 and 2 (DeepSpeedZeroOptimizer), and ZeRO-0's bf16 optimizer (BF16_Optimizer): a
    parameter's slice is its `_hp_mapping`'s address; the gradients are listed for the parameters
    in the partition only."""
    groups_attr = "bit16_groups"
    flat_attr = "single_partition_of_fp32_groups"

    def __init__(self, optimizer: Any, params_have_main_grad: bool) -> None:
        super().__init__(optimizer, params_have_main_grad)
        self._in_partition = {id(param): index for params in getattr(optimizer, "params_in_partition", [])
                              for index, param in enumerate(params)}

    def slot(self, group: int, index: int, param: torch.Tensor) -> _Slot:
        mapping = getattr(param, "_hp_mapping", None)
        if mapping is None:
            return _Slot(group, None, 0, None)
        address = mapping.get_hp_fragment_address()
        # BF16_Optimizer lists every parameter of the group among its gradients.
        return _Slot(group, address.start, address.numel, self._in_partition.get(id(param), index))


class Bf16View(ZeroPartitionView):
    groups_attr = "bf16_groups"
    flat_attr = "fp32_groups_flat_partition"
    grads_attr = "fp32_groups_gradient_dict"


class Zero3View(ZeroView):
    """ZeRO-3 (DeepSpeedZeroOptimizer_Stage3): every parameter has its slice on every rank, at
    `grad_position`; the gradients are listed for the whole group."""
    groups_attr = "fp16_groups"
    flat_attr = "fp32_partitioned_groups_flat"

    def slot(self, group: int, index: int, param: torch.Tensor) -> _Slot:
        _, start, numel = self.optimizer.grad_position[self.optimizer.get_param_id(param)]
        return _Slot(group, int(start), int(numel), index)


class CopiesView(OptimizerView):
    """DeepSpeed's FP16_UnfusedOptimizer (ZeRO off, fp16, or bf16 without fp32 accumulation): an
    fp32 copy of each parameter, `fp32_groups[i][j]` for `fp16_groups[i][j]`, holds its state.
    msprobe 26.2.0 maps no such optimizer and writes no moments here; a user would expect them."""

    def __init__(self, optimizer: Any, params_have_main_grad: bool) -> None:
        super().__init__(optimizer, params_have_main_grad)
        self._copies = {id(p): copy for params, copies in zip(optimizer.fp16_groups, optimizer.fp32_groups)
                        for p, copy in zip(params, copies)}

    def moments(self, param: torch.Tensor) -> Tuple[bool, Optional[torch.Tensor], Optional[torch.Tensor]]:
        copy = self._copies.get(id(param))
        return super().moments(param if copy is None else copy)


_VIEWS = {"DeepSpeedZeroOptimizer": ZeroPartitionView, "BF16_Optimizer": Bf16View,
          "DeepSpeedZeroOptimizer_Stage3": Zero3View, "FP16_UnfusedOptimizer": CopiesView}


def optimizer_view(optimizer: Any, params_have_main_grad: bool) -> OptimizerView:
    return _VIEWS.get(type(optimizer).__name__, OptimizerView)(optimizer, params_have_main_grad)
