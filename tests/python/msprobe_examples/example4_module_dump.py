# msprobe 1.1.1's module-dump example, on the CPU: between module_dump() and module_dump_end(),
# only the module's own forward and backward are recorded.
import sys

import torch
import torch.nn as nn

from msprobe_cpp import PrecisionDebugger, module_dump, module_dump_end  # msprobe: from msprobe.pytorch import ...


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


torch.manual_seed(0)
module = Inner()
head = nn.Linear(8, 2)
data = torch.randn(4, 8)
debugger = PrecisionDebugger(sys.argv[1])
debugger.start()
x = torch.tanh(data)
module_dump(module, "MyModuleOP")
y = module(x)
module_dump_end()
loss = torch.square(head(y)).sum()
loss.backward()
debugger.stop()
