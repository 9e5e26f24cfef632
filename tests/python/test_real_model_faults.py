"""Faults planted in real models (tests/python/real_models.py: torchvision's on torch 1.13, Hugging
Face transformers' on torch 2.x), each of which must stop the live guard (task overflow_check,
action raise) in the step where it first does damage, at the call that made the NaN/inf or that it
came in with, with the right origin, at every level (L1, mix, L0) unless said otherwise:

1. NaN in the input batch: origin input, at the first conv (L0: the first module that consumes it).
2. resnet18 trained with SGD lr=1e6: a BatchNorm's running_var becomes +inf in a forward; the stop
   comes in that step, at that batch_norm, with the buffer named (origin op).
3. A checkpoint in eval mode (with and without torch.no_grad) whose BatchNorm running_mean holds NaN
   or running_var +inf: origin parameter at that batch_norm, the buffer named.
4. fp16 overflow in a Llama's eager attention (CPU autocast float16, layer 0's q_proj and k_proj
   weights scaled by 1000): origin op at the attention matmul (L0: in self_attn, made by the
   module's own code).
5. A GPT-2 batch whose labels are all -100 (a 0/0 loss): origin op at cross_entropy (L0: the
   top-level model's own forward).
6. NaN in one weight of a torch.compile'd GPT-2 (backend "eager"): a stop in that step that names
   the compiled region and `_orig_mod`, never a stale gradient.
7. A Hugging Face decoder with activation checkpointing (its layers' forwards run again in the
   backward): the clean run trains as without the tool, and a NaN weight stops with origin
   parameter, that weight named.

Each fault is planted at step K (or, for a checkpoint, before the first start) outside the
debugger's start()/stop() (so no recorded call writes it): the steps before it, the same model
under the same set-up without the fault, are the control and must neither stop nor dump. The clean
runs of the stock set-ups are tests/python/test_real_models.py's.
"""
import contextlib
import math
import os
import re

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: nothing is downloaded

from typing import Any, Callable, ContextManager, List, Optional, Tuple

import pytest
import torch
import torch.nn as nn

import msprobe_cpp
import real_models
from dumps import guard, steps_on_disk
from real_models import Batch, batches, build, loss_of, train

LEVELS = ["L1", "mix", "L0"]
K = 1  # the step a fault is planted in; step 0 before it is the clean control
NAN = float("nan")
INF = float("inf")


class Reached(list):
    """A train() hook (or a loop's): the steps that began, in order."""

    def __call__(self, i: int, model: nn.Module = None, batch: Batch = None) -> None:
        self.append(i)


def stop_of(run: Callable[[], Any], dbg: Any, tmp_path) -> msprobe_cpp.OverflowError:
    """The OverflowError that run() raises; without one, a failure that says what the guard saw."""
    try:
        run()
    except msprobe_cpp.OverflowError as e:
        return e
    pytest.fail(f"no OverflowError; debugger.overflow: {dbg.overflow!r}; on disk: {steps_on_disk(tmp_path)}")


def assert_stopped_in(e: msprobe_cpp.OverflowError, k: int, reached: List[int], tmp_path) -> None:
    """The stop came in step k: every step before it ran to its end without a stop, and the only
    step on disk is k's (a clean step writes nothing)."""
    assert e.step == k, f"stopped in step {e.step}, not {k}:\n{e}"
    assert reached == list(range(k + 1)), reached
    assert steps_on_disk(tmp_path) == [f"step{k}"], f"{steps_on_disk(tmp_path)}\n{e}"


def loop(model: nn.Module, data: List[Batch], dbg: Any, steps: int, reached: Reached,
         optimizer: Optional[torch.optim.Optimizer] = None, started: Optional[nn.Module] = None,
         before_start: Optional[Callable[[int], None]] = None,
         forward_ctx: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
    """real_models.train's steps, with a fault planted by before_start(i) before debugger.start()
    (outside the tool: no recorded call writes it), the forward (and loss) under forward_ctx(), and
    without an optimizer a forward alone (evaluation). `started` is what start() is given (the
    compiled model), `model` what is called."""
    torch.manual_seed(real_models.DROPOUT_SEED)
    for i, batch in zip(range(steps), data):
        if before_start is not None:
            before_start(i)
        dbg.start(started if started is not None else model)
        reached(i)
        if optimizer is not None:
            optimizer.zero_grad()
        with forward_ctx():
            if optimizer is None:
                model(*batch.args, **batch.kwargs)
            else:
                loss = loss_of(model, batch)
        if optimizer is not None:
            loss.backward()
            optimizer.step()
        dbg.stop()
        dbg.step()


def non_finite(value: Any) -> bool:
    return torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all())


# --- 1. NaN in the input batch -------------------------------------------------------------------

# The model, the package it needs, and its image tensor in a batch.
IMAGE_MODELS = {
    "resnet18": lambda b: b.args[0],                  # torchvision, torch 1.13
    "hf_resnet": lambda b: b.kwargs["pixel_values"],  # transformers, torch 2.x
    "hf_vit": lambda b: b.kwargs["pixel_values"],
}


def first_module_fed(name: str, batch: Batch) -> str:
    """The qualified name of the first module whose forward completes with NaN in an input, in a
    tool-free forward of a fresh copy of the model (the same weights)."""
    model = build(name).model
    fed: List[str] = []
    handles = []
    for qualname, module in model.named_modules():
        def hook(m, args, *rest, qualname=qualname):
            kwargs = rest[0] if len(rest) == 2 else {}
            if not fed and any(non_finite(a) for a in list(args) + list(kwargs.values())):
                fed.append(qualname)
        if "with_kwargs" in nn.Module.register_forward_hook.__code__.co_varnames:
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(hook))
    with torch.no_grad():
        model(*batch.args, **batch.kwargs)
    for h in handles:
        h.remove()
    assert fed and fed[0], fed  # a submodule, not the model itself
    return fed[0]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(IMAGE_MODELS))
def test_nan_in_the_batch_stops_at_the_first_conv_with_origin_input(tmp_path, name, level):
    pytest.importorskip(real_models.MODELS[name].requires)
    model, make_batch, make_optimizer = build(name)
    data = batches(make_batch, 2)
    IMAGE_MODELS[name](data[K])[0, 0, 0, 0] = NAN  # before any step: the data pipeline's fault
    first = first_module_fed(name, data[K])
    dbg = guard(tmp_path, level)
    reached = Reached()
    e = stop_of(lambda: train(model, data, make_optimizer, debugger=dbg, steps=2, hook=reached), dbg, tmp_path)
    assert_stopped_in(e, K, reached, tmp_path)
    assert (e.origin, e.parameter, e.caught) == ("input", None, None), str(e)
    if level == "L0":
        assert e.call.startswith(f"Module.{first}."), str(e)
    else:
        assert e.call == "Functional.conv2d.0.forward", str(e)
        assert e.module is not None and e.module.startswith(f"Module.{first}."), str(e)


# --- 1b. NaN in the batch that reaches the first module through code between the modules ---------
# Issue 54: at L0 the first hooked module was given a tensor that the started model's own code made
# from the batch (a view, a normalizing transform), and the stop said "op".

def frcnn() -> Tuple[nn.Module, Callable[[int], Tuple[Any, ...]], str, str]:
    """torchvision's Faster R-CNN, tiny images: its transform (normalize, batch) runs before the
    backbone's first conv. The model, its arguments at step i, the first module that the NaN
    reaches and the first call at L1 and mix."""
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = tv.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3,
                                                        min_size=64, max_size=64)
    g = torch.Generator().manual_seed(1)
    data = [[torch.rand(3, 64, 64, generator=g) for _ in range(2)] for _ in range(K + 1)]
    targets = [{"boxes": torch.tensor([[4.0, 4.0, 30.0, 30.0]]), "labels": torch.tensor([1])} for _ in range(2)]

    def args(i: int) -> Tuple[Any, ...]:
        return data[i], targets
    return model, args, "backbone.body.conv1", "Functional.conv2d.0.forward"


def wav2vec2() -> Tuple[nn.Module, Callable[[int], Tuple[Any, ...]], str, str]:
    """transformers' Wav2Vec2ForCTC: its feature encoder takes input_values[:, None] to its first
    conv (at L1 and mix that __getitem__ is the first call)."""
    hf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = hf.Wav2Vec2Config(vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                               num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, pad_token_id=0,
                               ctc_loss_reduction="mean", mask_time_prob=0.0)
    model = hf.Wav2Vec2ForCTC(config)
    g = torch.Generator().manual_seed(1)
    data = [torch.randn(2, 400, generator=g) for _ in range(K + 1)]

    def args(i: int) -> Tuple[Any, ...]:
        return (data[i],)
    return model, args, "wav2vec2.feature_extractor.conv_layers.0.conv", "Tensor.__getitem__.0.forward"


def _sum_of_losses(out: Any) -> torch.Tensor:
    if hasattr(out, "logits"):  # a transformers ModelOutput (a dict too)
        return out.logits.float().square().mean()
    return sum(out.values())  # a torchvision detector's losses


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("make", [frcnn, wav2vec2], ids=["fasterrcnn", "hf_wav2vec2"])
def test_nan_in_the_batch_carried_to_the_first_module_by_the_models_code_is_input(tmp_path, make, level):
    model, args, first_conv, first_call = make()
    model.train()
    first = args(K)[0]
    (first[0] if isinstance(first, list) else first).view(-1)[7] = NAN  # the data pipeline's fault
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    dbg = guard(tmp_path, level)
    reached = Reached()

    def run() -> None:
        for i in range(K + 1):
            dbg.start(model)
            reached(i)
            _sum_of_losses(model(*args(i))).backward()
            optimizer.step()
            optimizer.zero_grad()
            dbg.stop()
            dbg.step()
    e = stop_of(run, dbg, tmp_path)
    assert_stopped_in(e, K, reached, tmp_path)
    assert (e.origin, e.parameter) == ("input", None), str(e)
    if level == "L0":
        assert e.call.startswith(f"Module.{first_conv}."), str(e)
        assert "own arguments (the batch) held NaN" in e.note, str(e)
    else:
        assert e.call == first_call, str(e)


class MaskedNet(nn.Module):
    """Given -inf in its mask on purpose; its own code (mask * 0) makes NaN from it between its
    modules: that is its op, not the batch's NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.outer = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.outer(self.inner(x) + mask * 0)


def test_nan_the_models_code_makes_from_a_masks_inf_is_still_its_op(tmp_path):
    torch.manual_seed(0)
    model = MaskedNet()
    mask = torch.zeros(2, 4)
    mask[0, 1] = -INF
    dbg = guard(tmp_path, "L0")
    dbg.start(model)
    e = stop_of(lambda: model(torch.randn(2, 4), mask), dbg, tmp_path)
    assert e.origin == "op" and e.call.startswith("Module.outer."), str(e)
    assert "made by the code of the started model MaskedNet's own forward" in e.note, str(e)


# --- 2. resnet18 with SGD lr=1e6: a running_var becomes +inf --------------------------------------

HUGE_LR_STEPS = 4


def huge_lr_sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=1e6)  # no momentum


def first_running_var_overflow() -> Tuple[int, str]:
    """A tool-free dry run of the same training: the first step in which some BatchNorm's
    running_var becomes non-finite during a forward, and that BatchNorm. The run must not have made
    NaN/inf anywhere else first (a module's input or output, the loss, a gradient, a parameter), or
    the tool would be right to stop somewhere else."""
    model, make_batch, _ = build("resnet18")
    events: List[Tuple[int, str, str]] = []
    current = Reached()

    def watch(qualname: str):
        def hook(m, args, output):
            step = current[-1]
            if any(non_finite(a) for a in args):
                events.append((step, qualname, "input"))
            if non_finite(output):
                events.append((step, qualname, "output"))
            if isinstance(m, nn.BatchNorm2d) and not bool(torch.isfinite(m.running_var).all()):
                events.append((step, qualname, "running_var"))
        return hook

    for qualname, module in model.named_modules():
        if qualname:
            module.register_forward_hook(watch(qualname))
    losses = train(model, batches(make_batch, HUGE_LR_STEPS), huge_lr_sgd, steps=HUGE_LR_STEPS, hook=current)
    assert events, f"no running_var overflowed in {HUGE_LR_STEPS} steps (losses {losses})"
    step, qualname, what = events[0]
    assert what == "running_var", events[:5]
    assert all(math.isfinite(l) for l in losses[:step]), losses
    return step, qualname


@pytest.mark.parametrize("level", LEVELS)
def test_a_running_var_that_becomes_inf_stops_at_its_batch_norm_in_that_step(tmp_path, level):
    pytest.importorskip("torchvision")
    step, bn = first_running_var_overflow()
    assert step >= 1  # a clean step before it: the control
    model, make_batch, _ = build("resnet18")
    dbg = guard(tmp_path, level)
    reached = Reached()
    e = stop_of(lambda: train(model, batches(make_batch, HUGE_LR_STEPS), huge_lr_sgd, debugger=dbg,
                              steps=HUGE_LR_STEPS, hook=reached), dbg, tmp_path)
    assert_stopped_in(e, step, reached, tmp_path)
    assert e.origin == "op", str(e)
    assert f"running_var of {bn} became" in str(e), str(e)
    # Issue 43: no ignore rule silences NaN/inf in none of the call's outputs; none is offered.
    assert "output_ignore" not in str(e) and "whose  holds" not in str(e), str(e)
    if level == "L0":
        assert e.call.startswith("Module.") and "BatchNorm2d" in e.call, str(e)
    else:
        assert e.call.startswith("Functional.batch_norm"), str(e)


# --- 3. a checkpoint in eval mode with a NaN running_mean or an inf running_var -------------------

BN = "layer1.0.bn1"  # resnet18's second BatchNorm in forward order (after bn1): batch_norm.1
BN_CALL = "Functional.batch_norm.1.forward"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("grad", ["no_grad", "grad"])
@pytest.mark.parametrize("buffer,value", [("running_mean", NAN), ("running_var", INF)])
@pytest.mark.parametrize("k", [0, K], ids=["before-the-first-start", "between-steps"])
def test_an_eval_checkpoint_with_a_bad_running_stat_stops_at_its_batch_norm(tmp_path, k, buffer, value, grad, level):
    pytest.importorskip("torchvision")
    model, make_batch, _ = build("resnet18")
    model.eval()
    data = batches(make_batch, 2)

    def corrupt(i: int) -> None:
        if i == k:  # k 0: the checkpoint as loaded, before the hooks go in; k 1: between two evaluations
            with torch.no_grad():
                getattr(model.get_submodule(BN), buffer)[3] = value

    dbg = guard(tmp_path, level)
    reached = Reached()
    forward_ctx = torch.no_grad if grad == "no_grad" else contextlib.nullcontext
    e = stop_of(lambda: loop(model, data, dbg, 2, reached, before_start=corrupt, forward_ctx=forward_ctx),
                dbg, tmp_path)
    assert_stopped_in(e, k, reached, tmp_path)
    assert e.origin == "parameter", str(e)
    assert f"{BN}.{buffer}" in str(e), str(e)
    if level == "L0":
        assert e.call.startswith(f"Module.{BN}.BatchNorm2d.forward"), str(e)
    else:
        assert e.call == BN_CALL, str(e)
        assert e.parameter == f"{BN}.{buffer}", str(e)


# --- 4. fp16 overflow in a Llama's eager attention ------------------------------------------------

QK_SCALE = 1000.0  # q_proj and k_proj of layer 0: q and k up to ~370 (finite in float16), q.k^T beyond 65504


def cpu_autocast_float16() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.float16
    except (RuntimeError, TypeError, ValueError):
        return False


@pytest.mark.parametrize("level", LEVELS)
def test_fp16_overflow_in_eager_attention_stops_at_the_attention_matmul(tmp_path, level):
    pytest.importorskip("transformers")
    model, make_batch, make_optimizer = build("hf_llama_eager")
    if cpu_autocast_float16():
        forward_ctx = lambda: torch.autocast("cpu", dtype=torch.float16)  # noqa: E731
    else:  # no float16 autocast on the CPU: the whole model in float16
        model.half()
        forward_ctx = contextlib.nullcontext
    attn = model.model.layers[0].self_attn

    def scale_qk(i: int) -> None:
        if i == K:
            with torch.no_grad():
                attn.q_proj.weight.mul_(QK_SCALE)
                attn.k_proj.weight.mul_(QK_SCALE)

    dbg = guard(tmp_path, level)
    reached = Reached()
    e = stop_of(lambda: loop(model, batches(make_batch, 2), dbg, 2, reached, optimizer=make_optimizer(model),
                             before_start=scale_qk, forward_ctx=forward_ctx), dbg, tmp_path)
    assert_stopped_in(e, K, reached, tmp_path)
    assert e.origin == "op", str(e)
    if level == "L0":
        assert "self_attn" in e.call or "self_attn" in str(e), str(e)
        assert "made by the code of" in str(e), str(e)
    else:
        assert re.fullmatch(r"Torch\.matmul\.\d+\.forward", e.call), str(e)
        assert e.caught is None, str(e)


# --- 5. a decoder batch whose labels are all -100: loss 0/0 ---------------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_labels_all_ignored_stop_where_the_nan_loss_is_made(tmp_path, level):
    pytest.importorskip("transformers")
    model, make_batch, make_optimizer = build("hf_gpt2")
    data = batches(make_batch, 2)
    data[K].kwargs["labels"].fill_(-100)  # every token ignored: a mean over nothing
    dbg = guard(tmp_path, level)
    reached = Reached()
    e = stop_of(lambda: train(model, data, make_optimizer, debugger=dbg, steps=2, hook=reached), dbg, tmp_path)
    assert_stopped_in(e, K, reached, tmp_path)
    assert e.origin == "op", str(e)
    if level == "L0":  # the loss is computed by GPT2LMHeadModel.forward itself
        assert e.call.startswith("Module.") and "GPT2LMHeadModel" in e.call, str(e)
    else:
        assert re.fullmatch(r"Functional\.cross_entropy\.\d+\.forward", e.call), str(e)


# --- 6. NaN in one weight of a torch.compile'd model ----------------------------------------------

COMPILED_WEIGHT = "transformer.h.0.mlp.c_fc.weight"


@pytest.mark.parametrize("level", LEVELS)
def test_nan_weight_of_a_compiled_model_stops_in_that_step_naming_the_compiled_region(tmp_path, level):
    pytest.importorskip("transformers")
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile arrived in PyTorch 2.0")
    from torch import _dynamo
    _dynamo.reset()  # a fresh model each test: no recompile limit reached across tests
    model, make_batch, make_optimizer = build("hf_gpt2")
    compiled = torch.compile(model, backend="eager")  # dynamo's graphs run eagerly: quick to make
    weight = model.get_parameter(COMPILED_WEIGHT)

    def poison(i: int) -> None:
        if i == K:
            with torch.no_grad():
                weight[0, 0] = NAN

    dbg = guard(tmp_path, level)
    reached = Reached()
    e = stop_of(lambda: loop(compiled, batches(make_batch, 2), dbg, 2, reached, optimizer=make_optimizer(model),
                             started=compiled, before_start=poison), dbg, tmp_path)
    assert_stopped_in(e, K, reached, tmp_path)
    assert e.origin in ("op", "parameter"), str(e)
    assert "compiled region" in str(e), str(e)
    assert "_orig_mod" in str(e), str(e)
    assert "from an earlier step" not in str(e) and "zero it" not in str(e), str(e)


# --- 7. activation checkpointing in a Hugging Face decoder ---------------------------------------

CHECKPOINTED_WEIGHT = {"hf_gpt2": "transformer.h.0.mlp.c_fc.weight",
                       "hf_llama_sdpa": "model.layers.0.mlp.gate_proj.weight"}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(CHECKPOINTED_WEIGHT))
def test_a_checkpointed_decoder_trains_unchanged_and_stops_at_a_nan_weight(tmp_path, name, level):
    """gradient_checkpointing_enable(): each layer's forward runs again inside the backward. The
    clean run's losses and weights are the bare run's; a NaN planted in a layer's weight before
    step K's start() stops in step K with that weight named."""
    pytest.importorskip("transformers")

    def checkpointed():
        model, make_batch, make_optimizer = build(name)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model, batches(make_batch, 3), make_optimizer(model)

    results = []
    for dbg in (None, guard(tmp_path / "clean", level)):
        model, data, optimizer = checkpointed()
        results.append((train(model, data, lambda m: optimizer, debugger=dbg, steps=3), real_models.state_of(model)))
    (bare, bare_state), (watched, watched_state) = results
    assert watched == bare
    assert all(torch.equal(bare_state[k], watched_state[k]) for k in bare_state)
    assert steps_on_disk(tmp_path / "clean") == []

    model, data, optimizer = checkpointed()
    weight = dict(model.named_parameters())[CHECKPOINTED_WEIGHT[name]]

    def plant(i: int) -> None:
        if i == K:
            with torch.no_grad():
                weight[0, 0] = NAN

    dbg, reached = guard(tmp_path, level), Reached()
    e = stop_of(lambda: loop(model, data, dbg, 3, reached, optimizer=optimizer, before_start=plant), dbg, tmp_path)
    assert_stopped_in(e, K, reached, tmp_path)
    assert (e.origin, e.parameter) == ("parameter", CHECKPOINTED_WEIGHT[name]), str(e)
