# msprobe 1.1.1's quick start (05.data_dump_PyTorch.md, section 2), on the CPU. The test runs it
# with the import line below, and with msprobe's own where msprobe is installed.
import sys

import torch
import torch.nn as nn

from msprobe_cpp import PrecisionDebugger, seed_all  # msprobe: from msprobe.pytorch import ...

seed_all()


class ModuleOP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_features=8, out_features=4)
        self.linear_2 = nn.Linear(in_features=4, out_features=2)
        self.relu = nn.ReLU()

    def forward(self, x):
        x1 = self.linear_1(x)
        x2 = self.linear_2(x1)
        r1 = self.relu(x2)
        return r1


if __name__ == "__main__":
    module = ModuleOP()
    debugger = PrecisionDebugger(sys.argv[1], model=module)
    debugger.start()
    x = torch.randn(10, 8)
    out = module(x)
    loss = out.sum()
    loss.backward()
    debugger.stop()
