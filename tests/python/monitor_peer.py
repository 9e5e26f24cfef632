"""One training run under a TrainerMon, msprobe 26.2.0's or ours, for the monitor's peer tests
(issue 55): the same seeded model, batches and optimizer for both, so that their CSVs can be
compared file by file. Run in the 26.2.0 venv (build-torch213/venv), where both import:

    python monitor_peer.py {msprobe,msprobe_cpp} CONFIG.json OUT_DIR [STEPS [MODEL [GRAD_ACC]]]

MODEL is `net` (two linears), `xy` (modules with several positional inputs, a keyword input,
a tuple output holding None, one module called twice), `stack` (names squash_name shortens) or
`cc` (`net` on one gloo rank whose steps call collectives: MASTER_PORT must be free),
GRAD_ACC the micro batches of a step. With PEER_DYNAMIC_ON_AT=<step>, the config file is given
dynamic_on: true after that step (DYNAMIC_MONITOR=true runs).

OUT_DIR gets the monitor's files (MONITOR_OUTPUT_DIR); `csv_files(OUT_DIR)` reads them back keyed
by file name, the run folder's time and id left out."""
import glob
import json
import os
import sys
from typing import Dict

# The parameter families, for configs that want them all.
FAMILIES = {"wg_distribution": True, "mv_distribution": True, "param_distribution": True}


def train(tool: str, config_path: str, out: str, steps: int = 3, model_kind: str = "net",
          grad_acc: int = 1) -> None:
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

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x, y, scale=None):
            h = self.a(x) + y
            return h * scale, h.sum(dim=1), None

    class XyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 8)
            self.pair = Pair()
            self.fc2 = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            h = self.fc1(x)
            h, s, _ = self.pair(h, torch.relu(h), scale=torch.full_like(h, 0.5))
            h = self.fc2(torch.relu(self.fc2(h)))
            return self.head(h) + s.unsqueeze(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.fc(x))

    class Stack(nn.Module):  # names that squash_name shortens: model.layers.<i>, model.norm
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(4, 8)
            self.model = nn.Module()
            self.model.layers = nn.ModuleList([Block(), Block()])
            self.model.norm = nn.LayerNorm(8)
            self.output = nn.Linear(8, 2)

        def forward(self, x):
            h = self.inp(x)
            for block in self.model.layers:
                h = block(h)
            return self.output(self.model.norm(h))

    def share_gradients(model, step):  # cc: a step's collectives, as a hand-written data-parallel loop
        dist = torch.distributed
        for p in model.parameters():
            dist.all_reduce(p.grad)
        gather_norms(model)
        work = dist.all_reduce(torch.ones(3) * 2, async_op=True)
        work.wait()
        dist.broadcast(next(model.parameters()).detach().clone(), 0)
        dist.broadcast(torch.full((2,), 4.0 ** step), 0)  # growing: what the alert rules catch

    def gather_norms(model):
        norms = torch.stack([p.grad.norm() for p in model.parameters()])
        gathered = [torch.zeros_like(norms)]
        torch.distributed.all_gather(gathered, norms)

    if model_kind == "cc":  # one rank of gloo, for the collectives
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    model = {"net": Net, "xy": XyNet, "stack": Stack, "cc": Net}[model_kind]()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = TrainerMon(config_path, params_have_main_grad=False)
    monitor.set_monitor(model, optimizer, grad_acc_steps=grad_acc)
    batches = [(torch.randn(16, 4), torch.randn(16, 2)) for _ in range(grad_acc)]
    switch_at = int(os.environ.get("PEER_DYNAMIC_ON_AT", "-1"))
    for step in range(steps):
        optimizer.zero_grad()
        for x, y in batches:
            (nn.functional.mse_loss(model(x), y) / grad_acc).backward()
        if model_kind == "cc":
            share_gradients(model, step)
        optimizer.step()
        if step == switch_at:  # the user turns the monitor on (DYNAMIC_MONITOR=true)
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
            with open(config_path, "w", encoding="utf-8") as f:
                json.dump({**config, "dynamic_on": True}, f)


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
    args = sys.argv[1:]
    try:
        train(args[0], args[1], args[2], int(args[3]) if len(args) > 3 else 3,
              args[4] if len(args) > 4 else "net", int(args[5]) if len(args) > 5 else 1)
    except Exception as e:  # print_struct ends the run at its first step, by design
        if "print model struct" not in str(e) and "print cc stack" not in str(e):
            raise
        print(f"stopped: {e}")
