# msprobe 1.1.1's whole-training-loop example, on the CPU: the debugger made once, start, forward,
# loss, backward, stop and step in every iteration.
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe_cpp import PrecisionDebugger, seed_all  # msprobe: from msprobe.pytorch import ...

seed_all()

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = PrecisionDebugger(sys.argv[1], model=model)
for step in range(3):
    data, target = torch.randn(4, 8), torch.randint(0, 3, (4,))
    debugger.start()
    output = model(data)
    loss = F.cross_entropy(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    debugger.stop()
    debugger.step()
