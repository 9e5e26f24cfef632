"""Everyday training idioms under the live guard (task overflow_check), at L1 and mix.

Written the way users write their models and loops, not the way the guard was built: masks made
every way (masked_fill, additive, torch.full().triu, torch.where with a -inf tensor, index
assignment, F.pad with -inf), data with NaN for missing values that the model cleans, weights
drawn into uninitialised memory, a running minimum started at +inf, and gradients left by a step
that a loss scaler skipped, zeroed in place. None of these may stop training or dump a step
(the cleaned NaN is dumped once, as absorbed). The real overflows among them (a fully masked row,
masked scores cast to float16, the log of an underflowed softmax) must stop at their own step and
call, with origin op."""
import math
import pathlib
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
from dumps import LEVELS, dumped_steps, guard, report
from models import DynamicLossScaler, TabularNet, guarded_step, tabular_batches, train_tabular

VOCAB, T, D = 24, 8, 16
NEG_INF = float("-inf")


def first_anomaly(tmp_path: pathlib.Path, step: int) -> Dict[str, Any]:
    return report(tmp_path, step)["first_anomaly"]


# --- a small language model whose attention is masked the way the idiom says -------------------

def causal_bool(t: int) -> torch.Tensor:
    return torch.tril(torch.ones(t, t, dtype=torch.bool))


class MaskedAttentionLM(nn.Module):
    """Embedding, one attention layer, a vocabulary head. `mask` names how the scores are masked;
    `pad` (a bool [B, T], True at padding) masks keys too where the idiom uses it."""

    def __init__(self, mask: str, banned: Tuple[int, ...] = ()) -> None:
        super().__init__()
        self.mask = mask
        self.banned = list(banned)
        self.emb = nn.Embedding(VOCAB, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("causal", causal_bool(T))

    def scores(self, x: torch.Tensor, pad: Optional[torch.Tensor]) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = q @ k.transpose(-2, -1) / math.sqrt(D)
        t = x.shape[1]
        if self.mask == "full_triu":          # a causal mask built every step
            att = att + torch.full((t, t), NEG_INF).triu(1)
        elif self.mask == "masked_fill":
            att = att.masked_fill(~self.causal[:t, :t], NEG_INF)
        elif self.mask == "where_tensor":     # a -inf constant in tensor form
            att = torch.where(self.causal[:t, :t], att, torch.tensor(NEG_INF))
        elif self.mask == "additive_padding":  # causal plus a key padding mask, both additive
            additive = torch.zeros(x.shape[0], 1, t).masked_fill(pad[:, None, :], NEG_INF)
            att = att + additive + torch.full((t, t), NEG_INF).triu(1)
        elif self.mask == "padding_fill":     # key padding only, by masked_fill
            att = att.masked_fill(pad[:, None, :], NEG_INF)
        elif self.mask == "causal_and_padding":
            att = att.masked_fill(~self.causal[:t, :t], NEG_INF).masked_fill(pad[:, None, :], NEG_INF)
        elif self.mask != "none":
            raise ValueError(self.mask)
        return att, v

    def forward(self, idx: torch.Tensor, pad: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.emb(idx)
        att, v = self.scores(x, pad)
        y = F.softmax(att, dim=-1) @ v
        logits = self.head(x + y)
        if self.banned:
            logits[:, :, self.banned] = NEG_INF  # a vocabulary mask by index assignment
        return logits


def lm_batches(n: int, banned: Tuple[int, ...] = (), seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([i for i in range(VOCAB) if i not in banned])
    out = []
    for _ in range(n):
        tokens = allowed[torch.randint(0, len(allowed), (4, T + 1), generator=g)]
        lengths = torch.randint(T // 2, T + 1, (4,), generator=g)
        pad = torch.arange(T)[None, :] >= lengths[:, None]  # right padding: key 0 is always real
        out.append((tokens[:, :-1], tokens[:, 1:], pad))
    return out


def train_lm(model: MaskedAttentionLM, dbg, steps: int, banned: Tuple[int, ...] = ()) -> List[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return [guarded_step(dbg, model, opt, lambda: F.cross_entropy(model(x, pad).reshape(-1, VOCAB), y.reshape(-1)))
            for x, y, pad in lm_batches(steps, banned)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("mask", ["full_triu", "masked_fill", "where_tensor", "additive_padding",
                                  "padding_fill"])
def test_masks_built_every_way_never_stop_and_write_nothing(tmp_path, level, mask):
    torch.manual_seed(0)
    model = MaskedAttentionLM(mask)
    losses = train_lm(model, guard(tmp_path, level), 4)
    assert all(math.isfinite(l) for l in losses)
    assert dumped_steps(tmp_path) == []


@pytest.mark.parametrize("level", LEVELS)
def test_a_vocabulary_mask_written_by_index_assignment_never_stops(tmp_path, level):
    banned = (3, 7, 11)
    torch.manual_seed(0)
    model = MaskedAttentionLM("masked_fill", banned=banned)
    losses = train_lm(model, guard(tmp_path, level), 4, banned)
    assert all(math.isfinite(l) for l in losses)
    assert dumped_steps(tmp_path) == []


class PaddedPool(nn.Module):
    """conv, then max pooling over a border padded with -inf (so padding never wins the max), a
    running minimum over channel groups started at +inf, and a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8 + 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv(x))
        h = F.max_pool2d(F.pad(h, (1, 1, 1, 1), value=NEG_INF), kernel_size=3, stride=1)
        running = torch.full(h.shape[2:], float("inf")).expand(h.shape[0], -1, -1)
        for group in h.split(2, dim=1):
            running = torch.minimum(running, group.amin(dim=1))
        return self.fc(torch.cat([h.flatten(1), running.flatten(1)], dim=1))


@pytest.mark.parametrize("level", LEVELS)
def test_pad_with_minus_inf_and_a_running_minimum_never_stop(tmp_path, level):
    torch.manual_seed(0)
    model = PaddedPool()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dbg = guard(tmp_path, level)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)
        assert math.isfinite(guarded_step(dbg, model, opt, lambda: F.cross_entropy(model(x), y)))
    assert dumped_steps(tmp_path) == []


# --- weights drawn into uninitialised memory -------------------------------------------------------

class NoisyMLP(nn.Module):
    """Draws its input noise each step into a fresh torch.empty buffer, as weight initialisers do.
    `garbage` plants NaN in those bytes first (what the allocator may hand back, by chance), through
    numpy so that no hooked call sees it happen."""

    def __init__(self, garbage: bool) -> None:
        super().__init__()
        self.garbage = garbage
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 3)

    def fresh(self, *shape: int) -> torch.Tensor:
        buf = torch.empty(*shape)
        if self.garbage:
            buf.numpy().reshape(-1)[::3] = float("nan")
        return buf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = self.fresh(*x.shape).uniform_(-0.01, 0.01)
        jitter = self.fresh(*x.shape).normal_(0.0, 0.01)
        scale = torch.empty_like(x).fill_(1.0)
        extra = self.fresh(12)
        extra.copy_(torch.zeros(12))
        late = nn.Linear(12, 12)  # built inside the step: torch.empty + kaiming_uniform_
        with torch.no_grad():
            late.weight.copy_(torch.eye(12))
            late.bias.zero_()
        return self.fc2(late(torch.tanh(self.fc1(x * scale + noise + jitter))) + extra)


@pytest.mark.parametrize("level", LEVELS)
def test_writers_never_read_the_garbage_they_overwrite(tmp_path, level):
    torch.manual_seed(0)
    model = NoisyMLP(garbage=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = guard(tmp_path, level)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x, y = torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)
        assert math.isfinite(guarded_step(dbg, model, opt, lambda: F.cross_entropy(model(x), y)))
    assert dumped_steps(tmp_path) == []


# --- data with NaN for missing values, cleaned by the model's first op ------------------------------

CLEANERS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "nan_to_num": lambda x: torch.nan_to_num(x),
    "where_isnan": lambda x: torch.where(torch.isnan(x), 0.0, x),
    "masked_fill_isnan": lambda x: x.masked_fill(torch.isnan(x), 0.0),
}
FIRST_ABSORBER = {"nan_to_num": "Torch.nan_to_num.0.forward", "where_isnan": "Torch.isnan.0.forward",
                  "masked_fill_isnan": "Torch.isnan.0.forward"}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cleaner", sorted(CLEANERS))
def test_nan_the_model_cleans_is_absorbed_dumped_once_and_never_stops(tmp_path, capfd, level, cleaner):
    torch.manual_seed(0)
    model = TabularNet(CLEANERS[cleaner])
    seen: List[Any] = []
    dbg = guard(tmp_path, level, overflow_nums=-1, on_overflow=seen.append)
    losses = train_tabular(model, dbg, tabular_batches(5, nan_at=(1, 2, 4)))
    assert all(math.isfinite(l) for l in losses)
    assert seen == [] and dbg.overflow is None
    # Flagged and dumped the first time the call site absorbs; later batches cost nothing.
    assert dumped_steps(tmp_path) == [1]
    first = first_anomaly(tmp_path, 1)
    assert first["absorbed"] is True
    assert (first["api_name"], first["origin"]) == (FIRST_ABSORBER[cleaner], "input")
    assert first["scene_type"] == "InputAnomalyOutputNormalScene"
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if "was absorbed by" in l]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"msprobe_cpp: step 1: NaN in an input was absorbed by {FIRST_ABSORBER[cleaner]}")
    assert lines[0].endswith("; no stop (said once per call site)")
    assert "test_idioms.py" in lines[0]  # the user's line


@pytest.mark.parametrize("level", LEVELS)
def test_the_same_batch_without_the_cleaning_op_stops_at_its_first_nan_output(tmp_path, level):
    torch.manual_seed(0)
    model = TabularNet(None)
    data = tabular_batches(3, nan_at=(1,))
    dbg = guard(tmp_path, level)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        train_tabular(model, dbg, data)
    e = info.value
    assert (e.step, e.call, e.origin, e.absorbed) == (1, "Functional.linear.0.forward", "input", False)
    assert e.input_args_anomaly_indices == [0]
    assert dumped_steps(tmp_path) == [1]


@pytest.mark.parametrize("level", LEVELS)
def test_without_overflow_nums_left_an_absorbed_step_is_not_dumped(tmp_path, level):
    """The absorbed step counts against overflow_nums like any flagged step."""
    torch.manual_seed(0)
    model = TabularNet(CLEANERS["nan_to_num"])
    dbg = guard(tmp_path, level, overflow_nums=1)
    train_tabular(model, dbg, tabular_batches(3, nan_at=(0,)))
    assert dumped_steps(tmp_path) == [0]


# --- real overflows: each stops at its own step and call, origin op ---------------------------------

class FullyMaskedRow(MaskedAttentionLM):
    """Key padding by masked_fill on a batch where one sequence is nothing but padding: its rows
    have no key to attend to, and their softmax is NaN."""

    def __init__(self) -> None:
        super().__init__("padding_fill")

    def forward(self, idx: torch.Tensor, pad: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.emb(idx)
        att, v = self.scores(x, pad)
        y = att.softmax(-1) @ v
        return self.head(x + y)


class MaskedHalf(MaskedAttentionLM):
    """Masked scores, scaled and cast to float16: finite scores beyond 65504 become ±inf beside the
    mask's -inf."""

    def __init__(self) -> None:
        super().__init__("masked_fill")

    def forward(self, idx: torch.Tensor, pad: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.emb(idx)
        att, v = self.scores(x, pad)
        att = (att * 1e5).half()
        y = F.softmax(att.float(), dim=-1) @ v
        return self.head(x + y)


class LogOfSoftmax(MaskedAttentionLM):
    """log(softmax(masked scores)) instead of log_softmax: the masked probabilities are exactly 0."""

    def __init__(self) -> None:
        super().__init__("masked_fill")

    def forward(self, idx: torch.Tensor, pad: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.emb(idx)
        att, v = self.scores(x, pad)
        logp = torch.log(F.softmax(att, dim=-1))
        return self.head(x + (logp.clamp(min=-30) @ v))


def run_until_stop(model: MaskedAttentionLM, dbg, bad_step: int, spoil) -> msprobe_cpp.OverflowError:
    data = lm_batches(bad_step + 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y, pad) in enumerate(data):
        if i == bad_step:
            pad = spoil(pad)
        dbg.start(model)
        try:
            opt.zero_grad()
            loss = F.cross_entropy(model(x, pad).reshape(-1, VOCAB), y.reshape(-1))
            loss.backward()
            opt.step()
        except msprobe_cpp.OverflowError as e:
            assert i == bad_step, f"stopped at step {i}, expected {bad_step}: {e}"
            return e
        dbg.stop()
        dbg.step()
    raise AssertionError("no stop")


def fully_padded_first_row(pad: torch.Tensor) -> torch.Tensor:
    pad = pad.clone()
    pad[0] = True
    return pad


@pytest.mark.parametrize("level", LEVELS)
def test_a_fully_masked_row_stops_at_the_softmax(tmp_path, level):
    torch.manual_seed(0)
    e = run_until_stop(FullyMaskedRow(), guard(tmp_path, level), 2, fully_padded_first_row)
    assert (e.step, e.call, e.origin) == (2, "Tensor.softmax.0.forward", "op")
    nan = T * T  # the padded sequence's T rows of T scores
    assert f"NaN: {nan} new; the explained inputs held -inf only" in e.note
    assert "a row where every element is -inf (fully masked) gives NaN" in e.note
    assert e.tensors[-1]["position"] == "output[0]" and e.tensors[-1]["nan"] == nan
    assert dumped_steps(tmp_path) == [2]
    assert first_anomaly(tmp_path, 2)["note"] == e.note


@pytest.mark.parametrize("level", LEVELS)
def test_masked_scores_cast_to_float16_stop_at_the_cast(tmp_path, level):
    torch.manual_seed(0)
    e = run_until_stop(MaskedHalf(), guard(tmp_path, level), 0, lambda pad: pad)
    assert (e.step, e.call, e.origin) == (0, "Tensor.half.0.forward", "op")
    assert re.search(r"\+inf: \d+ new", e.note), e.note
    assert "the explained inputs held -inf only" in e.note


@pytest.mark.parametrize("level", LEVELS)
def test_the_log_of_an_underflowed_softmax_stops_at_the_log(tmp_path, level):
    torch.manual_seed(0)
    e = run_until_stop(LogOfSoftmax(), guard(tmp_path, level), 0, lambda pad: pad)
    assert (e.step, e.call, e.origin, e.level) == (0, "Torch.log.0.forward", "op", "critical")
    # The way out when it is intended: the ignore rule that silences this call.
    assert 'api_name: "torch.log"' in str(e) and "output_ignore:" in str(e) and "- index: 0" in str(e)


def left_padding(pad: torch.Tensor) -> torch.Tensor:
    """The same lengths, padded on the left: a padded query's causal keys are all padding."""
    return pad.flip(-1)


@pytest.mark.parametrize("level", LEVELS)
def test_left_padding_with_a_causal_mask_under_a_loss_scaler_stops_at_the_softmax(tmp_path, capfd, level):
    """A forward NaN is never a loss scaler's skip: it stops where it is made, at step 0."""
    torch.manual_seed(0)
    model = MaskedAttentionLM("causal_and_padding")
    scaler = DynamicLossScaler(2.0 ** 16)
    dbg = guard(tmp_path, level)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y, pad = lm_batches(1)[0]
    pad = left_padding(pad)
    assert pad[:, 0].any()
    dbg.start(model, loss_scaler=scaler)
    with pytest.raises(msprobe_cpp.OverflowError) as info:
        loss = F.cross_entropy(model(x, pad).reshape(-1, VOCAB), y.reshape(-1))
        scaler.scale_loss(loss).backward()
        scaler.step(opt, 0)
    e = info.value
    assert (e.step, e.call, e.origin) == (0, "Functional.softmax.0.forward", "op")
    assert "fully masked" in e.note
    assert "the loss scaler skipped" not in capfd.readouterr().err
    assert scaler.skipped == []
