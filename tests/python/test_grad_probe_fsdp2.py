"""grad_probe under FSDP2 (fully_shard on each block and the root; 2 gloo processes on CPU): each
rank summarizes its own shard of every gradient, says so in rank<R>/shards.json (each one's
whole shape and placements), and the training is bit-identical to the run without the tool."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401 - FSDP2, torch 2.x
except Exception as e:  # noqa: BLE001 - ImportError, or torch 1.13's fsdp failing to import under Python 3.11
    pytest.skip(f"this torch has no torch.distributed.fsdp.fully_shard (FSDP2): {type(e).__name__}",
                allow_module_level=True)
from dist_runs import assert_states_equal, clean_bare_run, run_ranks  # noqa: E402
from gloo import needs_gloo  # noqa: E402

pytestmark = [pytest.mark.slow, needs_gloo]

WORLD = 2
STEPS = 3
TIMEOUT_S = 90.0
FSDP2 = ["--wrap", "fsdp2", "--optim", "sgd", "--steps", str(STEPS)]


def test_each_rank_summarizes_its_shard_and_says_so(tmp_path):
    bare = clean_bare_run(tmp_path / "bare", WORLD, FSDP2, TIMEOUT_S)
    dump = tmp_path / "run" / "dump"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "grad_probe", "dump_path": str(dump),
                                  "grad_probe": {"grad_level": "L1"}}))
    run = run_ranks(tmp_path / "run", WORLD, FSDP2 + ["--config", str(config), "--monitor"], timeout=TIMEOUT_S)
    assert run.returncodes == [0] * WORLD, run.context()
    for r in range(WORLD):
        assert run.results[r]["losses"] == bare.results[r]["losses"], f"rank {r}: losses differ"
        assert_states_equal(run.state(r), bare.state(r), f"rank {r}'s local shards")

    torch.manual_seed(0)
    import rank_models
    whole = {n: list(p.shape) for n, p in rank_models.MODELS["mlp"]().named_parameters()}
    shard_rows = {}
    for r in range(WORLD):
        folder = dump / f"rank{r}"
        assert sorted(p.name for p in folder.glob("grad_summary_*.csv")) == \
            [f"grad_summary_{s}.csv" for s in range(STEPS)]
        shards = json.loads((folder / "shards.json").read_text())
        assert "shard" in shards["note"]
        params = shards["parameters"]
        assert {n: p["global_shape"] for n, p in params.items()} == whole
        assert all(p["placements"] == "Shard(dim=0)" for p in params.values()), params
        for name, p in params.items():
            direction = np.load(folder / "step0" / f"{name}.npy")
            assert list(direction.shape) == p["shard_shape"], name  # the shard's, not the whole's
            shard_rows.setdefault(name, []).append(p["shard_shape"])
        lines = (folder / "grad_summary_0.csv").read_text(encoding="utf-8-sig").splitlines()
        shapes = {line.split(",")[0]: line.split(",", 4)[4].strip('"') for line in lines[1:]}
        assert shapes == {n: str(p["shard_shape"]) for n, p in params.items()}
    for name, shapes in shard_rows.items():  # the shards make up the whole along dim 0
        assert sum(s[0] for s in shapes) == whole[name][0], name
