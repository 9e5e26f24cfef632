# Two training steps of the tests' TinyGPT-style model (causal mask, AdamW, foreach off), written as
# an msprobe user writes them: the wrap-list test runs it with our import and with msprobe's.
import sys

import torch

from msprobe_cpp import PrecisionDebugger  # msprobe: from msprobe.pytorch import ...
from models import make_batches, make_model, make_optimizer, train_step

torch.manual_seed(0)
model = make_model("gpt")
opt = make_optimizer(model)
debugger = PrecisionDebugger(sys.argv[1], model=model)
for x, y in make_batches(model, 2, seed=0):
    train_step(model, opt, x, y, debugger)  # start, zero_grad, loss, backward, step, stop, step
