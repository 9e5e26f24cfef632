"""Runs a script written for msprobe with our import, and where msprobe is installed (the torch 2
venv) with msprobe's own: the record names of each step folder, to compare."""
import json
import os
import pathlib
import subprocess
import sys
from typing import Dict, List

from testenv import PACKAGE_ROOT, TESTS

EXAMPLES = TESTS / "msprobe_examples"
OUR_IMPORT = "from msprobe_cpp import"
THEIR_IMPORT = "from msprobe.pytorch import"


def msprobe_installed() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import msprobe.pytorch"], capture_output=True)
    return probe.returncode == 0


def run_example(name: str, folder: pathlib.Path, level: str, theirs: bool = False,
                task: str = "statistics") -> Dict[str, List[str]]:
    """Runs msprobe_examples/<name> in `folder` (its config.json dumps into ./dump); returns each
    step folder's record names in file order."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "task": task, "dump_path": "./dump", "rank": [], "step": [], "level": level,
        "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}))
    script = (EXAMPLES / name).read_text()
    if theirs:
        script = script.replace(OUR_IMPORT, THEIR_IMPORT)
    (folder / name).write_text(script)
    path = os.pathsep.join([str(PACKAGE_ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, name, "config.json"], cwd=folder, env=dict(os.environ, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    names = {}
    for dump in sorted((folder / "dump").glob("step*/rank*/dump.json")):
        names[str(dump.parent.relative_to(folder / "dump"))] = list(json.loads(dump.read_text())["data"])
    return names
