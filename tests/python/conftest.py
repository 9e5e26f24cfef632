import os
import pathlib
import sys

import pytest

# The helper modules of this folder first, then the package under test, for the test modules.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import testenv  # noqa: E402

sys.path.insert(1, str(testenv.PACKAGE_ROOT))


def pytest_configure(config):
    # The slow tier: multi-process runs, installs, real-model zoos, a Jupyter kernel. `tools/test.sh
    # --fast` (pytest -m "not slow") leaves it out; the whole suite runs both tiers.
    config.addinivalue_line("markers", "slow: a test of the slow tier (tools/test.sh --fast skips it)")
    config.addinivalue_line("markers", "msprobe26: msprobe 26.2.0 as a peer (the torch 2.13 venv has it)")
    # Multi-process tests fork their ranks from a warm interpreter (zygote.py), not one import of
    # torch a rank; MSPROBE_TEST_WARM_FORKS=0 starts each afresh.
    import dist_runs
    dist_runs.FORK_FROM_WARM = os.environ.get("MSPROBE_TEST_WARM_FORKS", "1") == "1"


# The files that take minutes, longest first. tools/test.sh runs the suite on two pytest-xdist
# workers, each given whole files in the order collected: these go first, so that the suite does
# not end with one of them running alone.
# test_install.py first: its two pip builds (over 7 min on torch 2) ran alone at the end of the run.
LONG_FILES = ["test_install.py", "test_large_scale.py", "test_deepspeed.py", "test_free_benchmark.py",
              "test_ddp.py", "test_msprobe26_peer.py", "test_msprobe26_features.py", "test_kill.py",
              "test_grad_probe.py", "test_msprobe_block.py"]


def pytest_collection_modifyitems(config, items):
    def order(item) -> int:
        name = pathlib.Path(str(item.fspath)).name
        return LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)
    items.sort(key=order)  # stable: each file's own order stays


@pytest.fixture
def device(request):
    """The parametrized device name, as a torch device string; sets the statistics path."""
    from msprobe_cpp import _C
    name = request.param
    _C._force_generic_statistics(name == "cpu-generic")
    testenv.GENERIC_PATH[0] = name == "cpu-generic"
    yield "cpu" if name == "cpu-generic" else name
    _C._force_generic_statistics(False)
    testenv.GENERIC_PATH[0] = False


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("MSPROBE_CPP_BIN", testenv.ROOT / "build" / "bin" / "msprobe-cpp"))
    if not path.exists():
        pytest.fail(f"{path} not built: run the README's build first")
    return path


@pytest.fixture(scope="session")
def fixtures() -> pathlib.Path:
    return testenv.FIXTURES


@pytest.fixture(autouse=True)
def no_debugger_left_behind():
    """A test that fails midway must not leave hooks installed for the next one."""
    yield
    if "msprobe_cpp" in sys.modules:
        from msprobe_cpp import PrecisionDebugger
        if PrecisionDebugger._instance is not None:
            PrecisionDebugger._instance._release()
            PrecisionDebugger._instance = None
