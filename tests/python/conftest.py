import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "msprobe-1.1.1"


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("MSPROBE_CPP_BIN", ROOT / "build" / "bin" / "msprobe-cpp"))
    if not path.exists():
        pytest.fail(f"{path} not built: run the README's build first")
    return path


@pytest.fixture(scope="session")
def fixtures() -> pathlib.Path:
    return FIXTURES
