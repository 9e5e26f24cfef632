"""Real models, written by others: torchvision's (torch 1.13, Debian's python3-torchvision) and
Hugging Face transformers' (torch 2.x, requirements-torch2.txt), as tiny random-init configs, with
the batches they are trained on and a training loop, for tests/python/test_real_models.py and any
test that plants a fault in one of them.

    model, make_batch, make_optimizer = build("gpt2")     # seeded: two calls give equal weights
    losses = train(model, batches(make_batch), make_optimizer, debugger=dbg)

    losses, state, model = run("gpt2", debugger=dbg)       # the same, in one call

A batch is a `Batch`: the model is called as model(*args, **kwargs); with a `target` the loss is
cross_entropy(output, target) (torchvision's models return logits), without one it is the
output's `.loss` (transformers' models compute it themselves from `labels`). Models stay in
train mode, dropout and stochastic depth on: their draws come from torch's global generator,
seeded by train() before its first step, so the tool must not draw from it. The data come from a
private generator, drawn before any step.

Nothing is downloaded: HF_HUB_OFFLINE is set before transformers is imported, and every model is
made from a config (random init), never from_pretrained.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported, anywhere

import dataclasses
import importlib
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 3
MODEL_SEED = 0   # torch.manual_seed before a model is built
DATA_SEED = 1    # the private generator of the batches
DROPOUT_SEED = 2  # torch.manual_seed before the first step: dropout, stochastic depth

BATCH = 2
SEQ = 16
VOCAB = 100
CLASSES = 10


@dataclasses.dataclass
class Batch:
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    target: Optional[torch.Tensor] = None  # cross_entropy's target; None: the output's .loss


MakeBatch = Callable[[torch.Generator], Batch]
MakeOptimizer = Callable[[nn.Module], torch.optim.Optimizer]


class Built(NamedTuple):
    model: nn.Module
    make_batch: MakeBatch
    make_optimizer: MakeOptimizer


def loss_of(model: nn.Module, batch: Batch) -> torch.Tensor:
    out = model(*batch.args, **batch.kwargs)
    if batch.target is not None:
        return F.cross_entropy(out, batch.target)
    return out.loss


# --- batches -------------------------------------------------------------------------------------

def image_batch(size: int = 32) -> MakeBatch:
    def make(g: torch.Generator) -> Batch:
        x = torch.randn(BATCH, 3, size, size, generator=g)
        return Batch((x,), target=torch.randint(0, CLASSES, (BATCH,), generator=g))
    return make


def hf_image_batch(size: int = 32) -> MakeBatch:
    def make(g: torch.Generator) -> Batch:
        x = torch.randn(BATCH, 3, size, size, generator=g)
        return Batch(kwargs={"pixel_values": x, "labels": torch.randint(0, CLASSES, (BATCH,), generator=g)})
    return make


def causal_lm_batch(g: torch.Generator) -> Batch:
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    return Batch(kwargs={"input_ids": ids, "labels": ids.clone()})


MASK_TOKEN = 3  # BertConfig has no mask token of its own; any id the labels do not need


def masked_lm_batch(g: torch.Generator) -> Batch:
    """15% of the tokens masked (at least one per row), the others' labels -100; the second row
    right-padded (pad id 0) with an attention mask."""
    ids = torch.randint(5, VOCAB, (BATCH, SEQ), generator=g)
    attention = torch.ones(BATCH, SEQ, dtype=torch.long)
    attention[1, SEQ - 5:] = 0
    ids[1, SEQ - 5:] = 0
    masked = (torch.rand(BATCH, SEQ, generator=g) < 0.15) & attention.bool()
    masked[:, 1] = True
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    inputs = torch.where(masked, torch.full_like(ids, MASK_TOKEN), ids)
    return Batch(kwargs={"input_ids": inputs, "attention_mask": attention, "labels": labels})


def seq2seq_batch(g: torch.Generator) -> Batch:
    """T5: the encoder gets SEQ tokens, the labels (SEQ // 2 tokens, the decoder's inputs shifted
    from them by the model) end with EOS (1); pad is 0."""
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(2, VOCAB, (BATCH, SEQ // 2), generator=g)
    labels[:, -1] = 1
    return Batch(kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})


# --- optimizers ----------------------------------------------------------------------------------

def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)


# --- the models ----------------------------------------------------------------------------------

def _tv() -> Any:
    return importlib.import_module("torchvision.models")


def _hf() -> Any:
    return importlib.import_module("transformers")


def tv_vit() -> nn.Module:
    return _tv().VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                   mlp_dim=64, num_classes=CLASSES, dropout=0.1, attention_dropout=0.1)


def gpt2() -> nn.Module:
    hf = _hf()
    return hf.GPT2LMHeadModel(hf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64,
                                              bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1))


def llama(attn: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        hf = _hf()
        config = hf.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64,
                                attention_dropout=0.1)  # the default 0.0 would leave no dropout at all
        return hf.LlamaForCausalLM._from_config(config, attn_implementation=attn)
    return make


def bert_mlm() -> nn.Module:
    hf = _hf()
    return hf.BertForMaskedLM(hf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=2, intermediate_size=64,
                                            max_position_embeddings=64, pad_token_id=0))


def t5() -> nn.Module:
    hf = _hf()
    return hf.T5ForConditionalGeneration(hf.T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=2,
                                                     num_heads=2, d_kv=16, pad_token_id=0, eos_token_id=1,
                                                     decoder_start_token_id=0))


def hf_vit() -> nn.Module:
    hf = _hf()
    return hf.ViTForImageClassification(hf.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=CLASSES,
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))  # the defaults are 0.0


def hf_resnet() -> nn.Module:
    hf = _hf()
    return hf.ResNetForImageClassification(hf.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                           num_labels=CLASSES))


class Spec(NamedTuple):
    requires: str  # the package the model comes from: the test skips without it
    make_model: Callable[[], nn.Module]
    make_batch: MakeBatch
    make_optimizer: MakeOptimizer


MODELS: Dict[str, Spec] = {
    # torchvision (on torch 1.13: Debian's python3-torchvision 0.14)
    "resnet18": Spec("torchvision", lambda: _tv().resnet18(num_classes=CLASSES), image_batch(), sgd),
    "mobilenet_v3_small": Spec("torchvision", lambda: _tv().mobilenet_v3_small(num_classes=CLASSES), image_batch(),
                               sgd),
    "efficientnet_b0": Spec("torchvision", lambda: _tv().efficientnet_b0(num_classes=CLASSES), image_batch(), sgd),
    "convnext_tiny": Spec("torchvision", lambda: _tv().convnext_tiny(num_classes=CLASSES), image_batch(), adamw),
    "vit": Spec("torchvision", tv_vit, image_batch(), adamw),
    "swin_t": Spec("torchvision", lambda: _tv().swin_t(num_classes=CLASSES), image_batch(), adamw),
    # Hugging Face transformers (on torch 2.x: requirements-torch2.txt)
    "hf_gpt2": Spec("transformers", gpt2, causal_lm_batch, adamw),
    "hf_llama_sdpa": Spec("transformers", llama("sdpa"), causal_lm_batch, adamw),
    "hf_llama_eager": Spec("transformers", llama("eager"), causal_lm_batch, adamw),
    "hf_bert_mlm": Spec("transformers", bert_mlm, masked_lm_batch, adamw),
    "hf_t5": Spec("transformers", t5, seq2seq_batch, adamw),
    "hf_vit": Spec("transformers", hf_vit, hf_image_batch(), adamw),
    "hf_resnet": Spec("transformers", hf_resnet, hf_image_batch(), sgd),
}


def build(name: str, seed: int = MODEL_SEED) -> Built:
    """The model (seeded: equal weights on every call with the same seed; in train mode), how to
    make its batches and its optimizer."""
    spec = MODELS[name]
    torch.manual_seed(seed)
    model = spec.make_model()
    model.train()
    return Built(model, spec.make_batch, spec.make_optimizer)


def batches(make_batch: MakeBatch, steps: int = STEPS, seed: int = DATA_SEED) -> List[Batch]:
    g = torch.Generator().manual_seed(seed)
    return [make_batch(g) for _ in range(steps)]


# hook(step_index, model, batch): called after debugger.start() and before the forward (a test
# plants its fault there).
StepHook = Callable[[int, nn.Module, Batch], None]


def train(model: nn.Module, data: Iterable[Batch], make_optimizer: MakeOptimizer,
          debugger: Any = None, steps: int = STEPS, seed: int = DROPOUT_SEED,
          hook: Optional[StepHook] = None) -> List[float]:
    """`steps` steps (at most as many as `data` has) of zero_grad, forward, backward, optimizer
    step, with debugger.start(model) before and stop(), step() after each; the losses.
    An exception (msprobe_cpp.OverflowError) goes to the caller."""
    optimizer = make_optimizer(model)
    model.train()
    torch.manual_seed(seed)
    losses: List[float] = []
    for i, batch in zip(range(steps), data):
        if debugger is not None:
            debugger.start(model)
        if hook is not None:
            hook(i, model, batch)
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())  # a float32 loss: exact as a float
    if debugger is not None and hasattr(debugger, "drain"):
        debugger.drain()  # async_dump: the steps' files on disk for the caller to read
    return losses


def state_of(model: nn.Module) -> Dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def run(name: str, debugger: Any = None, steps: int = STEPS,
        hook: Optional[StepHook] = None) -> Tuple[List[float], Dict[str, torch.Tensor], nn.Module]:
    """build(name), then train it on its batches: (losses, state_dict copy, model)."""
    model, make_batch, make_optimizer = build(name)
    losses = train(model, batches(make_batch, steps), make_optimizer, debugger=debugger, steps=steps, hook=hook)
    return losses, state_of(model), model
