"""Issue 43: every level as right as L1, and every word of a stop true.

Each fault is planted outside the tool, in a step after a clean one (the control), and must stop
in its step with the right origin, call and words at every level it names:

1. a checkpoint's NaN running statistic read by a train-mode BatchNorm (torchvision's LRASPP
   segmentation model): origin parameter, the buffer named as holding NaN it came in with;
2. NaN/inf made by the code of a module between its submodules and passed down through an
   intermediate module's arguments: origin op, made by that module's code (L0), not the batch;
3. NaN written into an optimizer's state (AdamW's exp_avg_sq of an HF decoder, SGD's momentum of
   resnet18): stopped at that optimizer step, before the parameters take it, naming the state;
4. an infinite CTC loss made in the started model's own forward (HF Wav2Vec2ForCTC; a small
   model on torch 1.13): stopped at what the model returns (L0), never as an earlier step's
   gradients;
5. held NaN/inf that is never absorbed (a metric, what a model not given to start() returns) is
   said to be still held, not absorbed;
6. finfo.min masks in float16 never warn about headroom;
7. advice that fits the cause: a learning-rate spike's overflow points at the update, a
   layer_norm whose variance overflows is an intermediate overflow.
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: nothing is downloaded

from typing import Any, Callable, List, Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import msprobe_cpp
import real_models
from dumps import guard, steps_on_disk

LEVELS = ["L1", "mix", "L0"]
K = 1  # the step a fault is planted in; step 0 before it is the clean control
NAN = float("nan")


def run_steps(steps: int, dbg: Any, started: Optional[nn.Module], step: Callable[[int], None],
              before_start: Callable[[int], None] = lambda i: None) -> Optional[msprobe_cpp.OverflowError]:
    """`steps` guarded steps; the stop, if one came (its step is then the last)."""
    for i in range(steps):
        before_start(i)
        dbg.start(started)
        try:
            step(i)
        except msprobe_cpp.OverflowError as e:
            return e
        dbg.stop()
        dbg.step()
    return None


def params_finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def assert_stop(e: Optional[msprobe_cpp.OverflowError], step: int, origin: str, tmp_path) -> None:
    assert e is not None, f"no stop; on disk: {steps_on_disk(tmp_path)}"
    assert (e.step, e.origin) == (step, origin), str(e)
    assert steps_on_disk(tmp_path) == [f"step{step}"], f"{steps_on_disk(tmp_path)}\n{e}"


# --- 1. a checkpoint's NaN running statistic, read in train mode ----------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_a_checkpoints_nan_running_var_read_in_train_mode_is_origin_parameter(tmp_path, level):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = tv.models.segmentation.lraspp_mobilenet_v3_large(num_classes=3, weights_backbone=None)
    model.train()
    bn = "backbone.1.block.0.1"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 3, 64, 64, generator=g), torch.randint(0, 3, (2, 64, 64), generator=g)

    def plant(i: int) -> None:
        if i == K:
            with torch.no_grad():
                dict(model.named_modules())[bn].running_var[0] = NAN  # what a bad checkpoint loads

    def step(i: int) -> None:
        loss = F.cross_entropy(model(x)["out"], y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    e = run_steps(K + 2, guard(tmp_path, level), model, step, plant)
    assert_stop(e, K, "parameter", tmp_path)
    assert e.parameter == f"{bn}.running_var", str(e)
    assert f"running_var of {bn} holds NaN" in e.note, str(e)
    assert "became" not in str(e) and "output_ignore" not in str(e), str(e)
    assert params_finite(model)


# --- 2. NaN/inf made between the submodules of a nested module -----------------------------------

class Leafed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.leaf = nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.leaf(h)


class Block(nn.Module):
    """Computes between its submodules, and passes the result down through `mid`'s arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.mid = Leafed()
        self.outer = Leafed()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(self.mid(self.a(x) * self.scale))


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fault", ["between-submodules", "batch"])
def test_nan_made_between_submodules_of_a_nested_module_is_that_modules_op(tmp_path, level, fault):
    torch.manual_seed(0)
    model = Nested()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)

    def plant(i: int) -> None:
        if i == K and fault == "between-submodules":
            model.block.scale = 1e39  # float32 overflow in Block's own code: inf

    def step(i: int) -> None:
        batch = x.clone()
        if i == K and fault == "batch":
            batch[0, 0] = NAN
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    e = run_steps(K + 2, guard(tmp_path, level), model, step, plant)
    if fault == "batch":  # only the started model's own arguments are the batch
        assert_stop(e, K, "input", tmp_path)
        return
    assert_stop(e, K, "op", tmp_path)
    if level == "L0":
        assert e.call == "Module.block.mid.leaf.Linear.forward.0", str(e)
        assert "made by the code of Module.block.Block.forward.0 between its submodules" in e.note, str(e)
    else:
        assert e.call == "Tensor.__mul__.0.forward", str(e)
    assert "the batch?" not in str(e)


# --- 3. NaN written into an optimizer's state ----------------------------------------------------

OPTIMIZER_STATE = {
    # model: (the parameter, its state key): an HF decoder with AdamW, torchvision's with SGD momentum
    "hf_gpt2": ("transformer.h.0.mlp.c_fc.weight", "exp_avg_sq"),
    "resnet18": ("layer1.0.conv1.weight", "momentum_buffer"),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(OPTIMIZER_STATE))
def test_nan_in_an_optimizers_state_stops_before_the_parameters_take_it(tmp_path, name, level):
    spec = real_models.MODELS[name]
    pytest.importorskip(spec.requires)
    model, make_batch, make_optimizer = real_models.build(name)
    optimizer = make_optimizer(model)
    data = real_models.batches(make_batch, K + 3)
    parameter, key = OPTIMIZER_STATE[name]
    weight = dict(model.named_parameters())[parameter]

    def plant(i: int) -> None:
        if i == K + 1:  # the state exists once a step has run
            with torch.no_grad():
                optimizer.state[weight][key].view(-1)[0] = NAN

    def step(i: int) -> None:
        optimizer.zero_grad()
        real_models.loss_of(model, data[i]).backward()
        optimizer.step()

    torch.manual_seed(real_models.DROPOUT_SEED)
    e = run_steps(K + 3, guard(tmp_path, level), model, step, plant)
    assert_stop(e, K + 1, "parameter", tmp_path)
    assert (e.parameter, e.optimizer_state) == (parameter, key), str(e)
    assert f"the optimizer's state: {key} of parameter {parameter}" in str(e)
    assert "the batch?" not in str(e) and "(none recorded)" not in str(e), str(e)
    assert params_finite(model), "the parameters took the NaN before the stop"


# --- 4. an infinite loss made in the started model's own forward ---------------------------------

class CTCNet(nn.Module):
    """Returns its CTC loss, as Hugging Face's *ForCTC models do."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(8, 12)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        log_probs = self.enc(x).log_softmax(-1).transpose(0, 1)
        lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.long)
        return F.ctc_loss(log_probs, labels, lengths, torch.full((x.shape[0],), labels.shape[1], dtype=torch.long))


def ctc_model(kind: str):
    """(model, inputs, loss of model(inputs, labels), the started model's class)."""
    torch.manual_seed(0)
    if kind == "hf_wav2vec2":
        hf = pytest.importorskip("transformers")
        config = hf.Wav2Vec2Config(vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                   num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, pad_token_id=0,
                                   ctc_loss_reduction="mean", mask_time_prob=0.0)
        model = hf.Wav2Vec2ForCTC(config)
        return model, torch.randn(2, 400), lambda m, x, labels: m(x, labels=labels).loss, "Wav2Vec2ForCTC"
    return CTCNet(), torch.randn(2, 5, 8), lambda m, x, labels: m(x, labels), "CTCNet"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("at", [0, K], ids=["step0", "after-a-clean-step"])
@pytest.mark.parametrize("kind", ["hf_wav2vec2", "own"])
def test_an_infinite_ctc_loss_stops_where_the_started_model_makes_it(tmp_path, capfd, kind, at, level):
    model, x, loss_of, cls = ctc_model(kind)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    frames = 39 if kind == "hf_wav2vec2" else 5  # what the model's encoder makes of x

    def step(i: int) -> None:
        labels = torch.randint(1, 12, (2, 3 if i != at else frames + 4), generator=g)  # longer: infeasible
        loss = loss_of(model, x, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    e = run_steps(at + 2, guard(tmp_path, level), model, step)
    assert_stop(e, at, "op", tmp_path)
    if level == "L0":
        assert e.call == f"Module.{cls}.forward.0", str(e)
        assert f"the started model {cls}'s own forward" in e.note, str(e)
    else:
        assert e.call == "Functional.ctc_loss.0.forward", str(e)
    assert "earlier step" not in str(e) and "zero_grad" not in str(e), str(e)
    # The stderr summary names the same first anomaly as the exception.
    assert f"first anomaly: {e.call} " in capfd.readouterr().err
    assert params_finite(model)


def test_the_earlier_step_note_needs_an_earlier_step_that_left_gradients(tmp_path):
    """NaN gradients that no recorded call made: at L0 on the first step they were made by this
    step's backward, not left by an earlier one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 4)

    def step(i: int) -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        with torch.no_grad():  # what an unhooked backward (a C++ autograd function) could leave
            model[0].weight.grad[0, 0] = NAN
        optimizer.step()

    def clean(i: int) -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    e = run_steps(2, guard(tmp_path, "L0"), model, step)
    assert e is not None and e.step == 0, str(e)
    assert "earlier step" not in e.note, str(e)
    e = run_steps(2, guard(tmp_path / "later", "L0"), model, lambda i: step(i) if i == 1 else clean(i))
    assert e is not None and e.step == 1, str(e)
    assert "left by an earlier step" in e.note, str(e)


# --- 5. held NaN/inf that was never absorbed ------------------------------------------------------

@pytest.mark.parametrize("case", ["metric", "unstarted-model", "no-model", "cast"])
def test_held_nan_is_absorbed_only_when_something_turned_it_finite(tmp_path, capfd, case):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    other = nn.Linear(4, 1)  # not given to start(): its output overflows
    with torch.no_grad():
        other.weight.fill_(1e38)
    x = torch.randn(8, 4)
    kept: List[torch.Tensor] = []

    def step(i: int) -> None:
        with torch.no_grad():
            y = model(x)
            if case == "metric":
                kept.append((y * 1e30 * 1e30).sum())  # an overflowing metric, still held at the end
            elif case == "unstarted-model":
                kept.append(other(x.abs() + 1))
            elif case == "no-model":
                kept.append(torch.log(y - y))  # -inf in what the user holds
            else:
                kept.append(torch.log(y - y).to(torch.long))  # turned finite by the cast

    e = run_steps(1, guard(tmp_path, "L1"), None if case == "no-model" else model, step)
    assert e is None, str(e)
    line = next(line for line in capfd.readouterr().err.splitlines() if "did no damage" in line)
    if case == "cast":
        assert "turned finite by Tensor.to.0.forward" in line, line
    else:
        assert "still held at the end of the step, in the output of" in line, line
        assert "absorbed" not in line, line
    assert steps_on_disk(tmp_path) == ["step0"]  # flagged and dumped, no stop


# --- 6. finfo.min masks in float16 ----------------------------------------------------------------

class MaskedScores(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = (x.half() * self.w.half()).float().half()
        mask = torch.ones(8, 8, dtype=torch.bool).triu(1)
        masked = scores.masked_fill(mask, torch.finfo(torch.float16).min)  # HF's way to mask
        return (masked + scores).float().softmax(-1).sum()  # an additive mask: finfo.min again


@pytest.mark.parametrize("kind", ["own", "hf_llama_eager"])
def test_finfo_min_masks_never_warn_about_headroom(tmp_path, capfd, kind):
    if kind == "own":
        torch.manual_seed(0)
        model = MaskedScores()
        data = [torch.randn(8, 8) for _ in range(3)]
        loss_of: Callable[[int], torch.Tensor] = lambda i: model(data[i])
    else:
        pytest.importorskip("transformers")
        model, make_batch, _ = real_models.build(kind)
        model.half()
        batches = real_models.batches(make_batch, 3)
        loss_of = lambda i: real_models.loss_of(model, batches[i]).float()  # noqa: E731
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(i: int) -> None:
        optimizer.zero_grad()
        loss_of(i).backward()
        optimizer.step()

    dbg = guard(tmp_path, "L1")
    assert run_steps(3, dbg, model, step) is None
    err = capfd.readouterr().err
    assert "of float16's range" not in err, err
    assert dbg.headroom == []


# --- 7. advice that fits the cause ------------------------------------------------------------------

class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16) * 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.half() * self.w.half()).float().sum()


def test_an_overflow_after_a_learning_rate_spike_points_at_the_update(tmp_path):
    torch.manual_seed(0)
    model = Scaled()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = [torch.randn(16) * 10 for _ in range(4)]

    def spike(i: int) -> None:
        if i == 2:
            with torch.no_grad():
                model.w.mul_(1000)  # what one update at a learning rate 1e5x too large does

    def step(i: int) -> None:
        optimizer.zero_grad()
        model(data[i]).backward()
        optimizer.step()

    e = run_steps(4, guard(tmp_path, "L1"), model, step, spike)
    assert_stop(e, 2, "op", tmp_path)
    assert e.call == "Tensor.__mul__.0.forward", str(e)
    wider = [r for r in e.replay if r["kind"] == "wider"]
    assert wider and wider[0]["finite"], str(e)
    assert "keep this op" not in str(e) and "the learning rate" in wider[0]["verdict"], str(e)


def test_a_layer_norm_whose_variance_overflows_is_an_intermediate_overflow(tmp_path):
    torch.manual_seed(0)
    model = nn.LayerNorm(16).to(torch.bfloat16)
    x = (torch.randn(4, 16) * 1e20).to(torch.bfloat16).requires_grad_()  # finite in bfloat16

    e = run_steps(1, guard(tmp_path, "L1"), model, lambda i: model(x))
    assert_stop(e, 0, "op", tmp_path)
    assert e.call == "Functional.layer_norm.0.forward", str(e)
    assert "undefined" not in str(e), str(e)
    assert "an intermediate overflow" in str(e) and "replay in float64: finite" in str(e), str(e)
