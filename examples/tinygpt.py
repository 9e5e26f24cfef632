"""The demo's model (examples/train_overflow_demo.py): a GPT-style language model, TinyGPT, and the
dynamic loss scaler it trains with. The tests train it too (tests/python/models.py imports it).

    model = TinyGPT()                      # 4 blocks, d=64, seq 32, a causal -inf attention mask
    model.inject = f                       # f(block_index, scores) -> scores, in every block
"""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# f(block_index, attention_scores) -> attention_scores
InjectFn = Callable[[int, torch.Tensor], torch.Tensor]


# How the attention masks its future positions: masked_fill with a -inf scalar, the same on two
# halves joined by torch.cat, or adding a registered buffer that holds -inf; "none" attends to
# every position (no -inf anywhere: the benches' clean-path reference).
MASK_MODES = ("masked_fill", "cat", "buffer", "none")


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, n_heads: int, seq: int, index: int, mask_mode: str = "masked_fill") -> None:
        super().__init__()
        assert mask_mode in MASK_MODES, mask_mode
        self.mask_mode = mask_mode
        assert d % n_heads == 0, "d must be a multiple of n_heads"
        self.d = d
        self.n_heads = n_heads
        self.scale = 1.0 / math.sqrt(d // n_heads)
        self.index = index
        # Set through TinyGPT.inject; a plain attribute, not a submodule, so it never appears in
        # the module tree (and so never in an L0 dump).
        self.inject: Optional[InjectFn] = None
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        if mask_mode == "buffer":
            self.register_buffer("neg_mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        hd = c // self.n_heads
        q, k, v = self.qkv(x).split(self.d, dim=2)
        q = q.view(b, t, self.n_heads, hd).transpose(1, 2)
        k = k.view(b, t, self.n_heads, hd).transpose(1, 2)
        v = v.view(b, t, self.n_heads, hd).transpose(1, 2)
        att = q @ k.transpose(-2, -1) * self.scale
        if self.inject is not None:
            att = self.inject(self.index, att)
        future = self.mask[:, :, :t, :t] == 0 if self.mask_mode != "none" else None
        if self.mask_mode == "cat":
            h = t // 2
            att = torch.cat([att[..., :h].masked_fill(future[..., :h], float("-inf")),
                             att[..., h:].masked_fill(future[..., h:], float("-inf"))], dim=-1)
        elif self.mask_mode == "buffer":
            att = att + self.neg_mask[:t, :t]
        elif self.mask_mode == "none":
            pass
        else:
            att = att.masked_fill(future, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class FeedForward(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int, seq: int, index: int, mask_mode: str = "masked_fill") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_heads, seq, index, mask_mode)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = FeedForward(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """GPT-style language model. `model.inject = f` makes every block call f(block_index, scores) on
    its attention scores before the causal mask (tests use it to plant an overflow in one block);
    with inject None nothing extra is called."""

    def __init__(self, vocab: int = 64, d: int = 64, n_blocks: int = 4, seq: int = 32, n_heads: int = 4,
                 inject: Optional[InjectFn] = None, mask_mode: str = "masked_fill") -> None:
        super().__init__()
        self.vocab = vocab
        self.seq = seq
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, n_heads, seq, i, mask_mode) for i in range(n_blocks)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.inject = inject

    # A property rather than a parameter of forward(): an extra forward argument would show up in
    # every module record of an L0/mix dump.
    @property
    def inject(self) -> Optional[InjectFn]:
        return self._inject

    @inject.setter
    def inject(self, fn: Optional[InjectFn]) -> None:
        self._inject = fn
        for blk in self.blocks:
            blk.attn.inject = fn

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))



class DynamicLossScaler:
    """Dynamic loss scaling as fp16 trainers do it, written out (PyTorch 1.13's GradScaler needs
    CUDA): scale the loss; when a gradient is not finite, skip the optimizer step and halve the
    scale; otherwise unscale the gradients and step. `halve=False` makes a broken scaler."""

    def __init__(self, scale: float, halve: bool = True) -> None:
        self.scale = scale
        self.halve = halve
        self.skipped: List[int] = []

    def get_scale(self) -> float:
        return self.scale

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    def step(self, opt: torch.optim.Optimizer, index: int) -> bool:
        """Returns whether the optimizer stepped."""
        grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
        if all(bool(torch.isfinite(g).all()) for g in grads):
            for g in grads:
                g.div_(self.scale)
            opt.step()
            return True
        self.skipped.append(index)
        if self.halve:
            self.scale *= 0.5
        return False


def token_batches(model: TinyGPT, steps: int, *, seed: int = 0, batch: int = 8) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """`steps` (tokens, next tokens) pairs from a private generator: the global RNG is not touched,
    so nothing the model, the optimizer or a debugger draws can shift the data."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        tokens = torch.randint(0, model.vocab, (batch, model.seq + 1), generator=g)
        out.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    return out


def next_token_loss(model: TinyGPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x).view(-1, model.vocab), y.view(-1))
