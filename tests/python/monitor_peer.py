"""One training run under a TrainerMon, msprobe 26.2.0's or ours, for the monitor's peer tests
(issue 55): the same seeded model, batches and optimizer for both, so that their CSVs can be
compared file by file. Run in the 26.2.0 venv (build-torch213/venv), where both import:

    python monitor_peer.py {msprobe,msprobe_cpp} CONFIG.json OUT_DIR [STEPS]

OUT_DIR gets the monitor's files (MONITOR_OUTPUT_DIR); `csv_files(OUT_DIR)` reads them back keyed
by file name, the run folder's time and id left out."""
import glob
import os
import sys
from typing import Dict


def train(tool: str, config_path: str, out: str, steps: int = 3) -> None:
    os.environ["MONITOR_OUTPUT_DIR"] = out  # both read it when the monitor is made
    import torch
    from torch import nn
    if tool == "msprobe":
        from msprobe.pytorch import TrainerMon
    else:
        from msprobe_cpp import TrainerMon

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 8)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(8, 2)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = TrainerMon(config_path, params_have_main_grad=False)
    monitor.set_monitor(model, optimizer, grad_acc_steps=1)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def csv_files(out: str) -> Dict[str, str]:
    """{"actv_0-0.csv": text, ...} of the one run folder under `out`."""
    runs = [d for d in glob.glob(os.path.join(out, "*-rank*-*")) if os.path.isdir(d)]
    assert len(runs) == 1, runs
    files = {}
    for path in sorted(glob.glob(os.path.join(runs[0], "*.csv"))):
        with open(path, encoding="utf-8") as f:
            files[os.path.basename(path)] = f.read()
    return files


if __name__ == "__main__":
    train(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 3)
