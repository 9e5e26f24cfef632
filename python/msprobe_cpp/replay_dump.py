"""`msprobe-cpp replay DUMP_DIR`: msprobe's run_overflow_check for dumps with tensor data. Every
flagged API record (the check command's findings) whose inputs are in dump_tensor_data/ is rebuilt
from dump.json and the .pt files, and replayed on the CPU in the recorded dtype and wider, with
the live replay's verdicts (replay.py). Works on msprobe's own tensor dumps too: the API names map
back to torch callables.

Exit status: 0 when every replayed record is a range problem or a normal overflow, 1 when any is
abnormal (only the recording device overflowed), 2 on unreadable input."""
import argparse
import json
import pathlib
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import _C
from .replay import replay_call

USAGE = "msprobe-cpp replay DUMP_DIR [--format json|text]"


class ReplayInputError(Exception):
    """Input the replay cannot use: one line, exit status 2."""


class CannotRebuild(Exception):
    """A record whose call cannot be rebuilt: said for that record, the others go on."""


def api_callable(call: str) -> Callable[..., Any]:
    """torch's function for a record name: Functional.x -> torch.nn.functional.x, Torch.x ->
    torch.x (a dotted name inside its submodule), Tensor.x -> torch.Tensor.x, _VF.x -> torch._VF.x."""
    parsed = _C.parse_call_name(call)
    section = parsed["section"] if parsed else call
    api = parsed["api"].split(".") if parsed and parsed["api"] else []
    roots = {"Functional": torch.nn.functional, "Torch": torch, "Tensor": torch.Tensor, "_VF": torch._VF}
    if section not in roots or not api:
        raise CannotRebuild(f"no torch function for {section} records")
    fn: Any = roots[section]
    for name in api:
        fn = getattr(fn, name, None)
        if fn is None:
            raise CannotRebuild(f"this torch has no {section}.{'.'.join(api)}")
    return fn


def rebuild(entry: Any, tensors: pathlib.Path, where: str) -> Any:
    """The Python value of a dump.json entry; tensors from dump_tensor_data/."""
    if entry is None:
        return None
    if isinstance(entry, list):
        return [rebuild(e, tensors, f"{where}[{i}]") for i, e in enumerate(entry)]
    if not isinstance(entry, dict):
        raise CannotRebuild(f"{where}: unexpected entry {entry!r}")
    kind = entry.get("type")
    if kind == "torch.Tensor":
        name = entry.get("data_name")
        if not name or not (tensors / name).is_file():
            raise CannotRebuild(f"{where}: its tensor file is not in dump_tensor_data/")
        return torch.load(tensors / name, map_location="cpu")
    if kind in ("int", "float", "bool", "str"):
        return entry.get("value")
    if kind == "slice":
        return slice(*entry["value"])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch.Size":
        return torch.Size(entry["value"])
    if kind in ("torch.dtype", "torch.layout"):
        return getattr(torch, str(entry["value"]).replace("torch.", ""))
    if kind == "torch.device":
        return torch.device("cpu")  # replayed on the CPU
    if kind == "torch.memory_format":
        return getattr(torch, entry.get("format") or str(entry.get("value")))
    if kind is None and list(entry) == ["type"]:
        return None
    raise CannotRebuild(f"{where}: a {kind} argument cannot be rebuilt")


def overflowed_dtype(record: Dict[str, Any]) -> Optional[torch.dtype]:
    """The dtype of the first output whose Max or Min is not finite, else of the first output."""
    outputs = [o for o in record.get("output") or [] if isinstance(o, dict) and o.get("type") == "torch.Tensor"]
    for o in outputs:
        if any(isinstance(o.get(k), float) and (o[k] != o[k] or abs(o[k]) == float("inf")) for k in ("Max", "Min")):
            return getattr(torch, o["dtype"].replace("torch.", ""), None)
    return getattr(torch, outputs[0]["dtype"].replace("torch.", ""), None) if outputs else None


def _finite(entry: Any) -> bool:
    """Whether an argument's recorded statistics hold no NaN/inf (a list's, each of its items)."""
    if isinstance(entry, list):
        return all(_finite(e) for e in entry)
    if isinstance(entry, dict) and entry.get("type") == "torch.Tensor":
        return all(not isinstance(entry.get(k), float) or (entry[k] == entry[k] and abs(entry[k]) != float("inf"))
                   for k in ("Max", "Min"))
    return True


def inputs_finite(record: Dict[str, Any]) -> bool:
    return _finite(record.get("input_args") or []) and _finite(list((record.get("input_kwargs") or {}).values()))


def replay_record(call: str, record: Dict[str, Any], tensors: pathlib.Path) -> Dict[str, Any]:
    out: Dict[str, Any] = {"call": call, "replay": [], "not_replayed": None}
    if not call.endswith(".forward"):
        out["not_replayed"] = "not replayed: a backward call (the autograd engine's, not an API call)"
        return out
    if not inputs_finite(record):
        out["not_replayed"] = "not replayed: its inputs hold NaN/inf already (the overflow started upstream)"
        return out
    if _finite(record.get("output") or []):
        # Flagged for finite values that jumped (a numerical mutation, a lead): nothing overflowed
        # to replay, and a finite replay would read as the device's fault (issue 44).
        out["not_replayed"] = "not replayed: its recorded outputs are finite (a lead, not an overflow)"
        return out
    try:
        fn = api_callable(call)
        args = tuple(rebuild(e, tensors, f"input_args[{i}]") for i, e in enumerate(record.get("input_args") or []))
        kwargs = {k: rebuild(v, tensors, k) for k, v in (record.get("input_kwargs") or {}).items()}
    except CannotRebuild as e:
        out["not_replayed"] = f"not replayed: {e}"
        return out
    except Exception as e:  # noqa: BLE001 - a .pt that does not load
        out["not_replayed"] = f"not replayed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return out
    out.update(replay_call(call, fn, args, kwargs, overflowed_dtype(record), same_dtype_on_cpu=True))
    return out


def abnormal(result: Dict[str, Any]) -> bool:
    return any(r["kind"] == "cpu" and r["finite"] for r in result["replay"])


def dump_files(path: pathlib.Path) -> List[pathlib.Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(path.rglob("dump.json"))
        if found:
            return found
        raise ReplayInputError(f"{path}: no dump.json under it")
    raise ReplayInputError(f"{path}: no such file or folder")


def replay_file(dump: pathlib.Path) -> List[Dict[str, Any]]:
    from . import _C
    tensors = dump.parent / "dump_tensor_data"
    if not tensors.is_dir():
        raise ReplayInputError(f"{dump}: no dump_tensor_data/ beside it: replay needs a dump with tensor data "
                               "(task tensor, or an overflow_check dump)")
    status, report, error = _C._check_json(str(dump))
    if status == 2:
        raise ReplayInputError(error.strip().replace("msprobe-cpp check: ", ""))
    try:
        data = json.loads(dump.read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ReplayInputError(f"{dump}: unreadable: {e}") from e
    names = {d["api_name"] for d in json.loads(report).get("anomaly_details", [])}
    flagged = [name for name in data if name in names]  # in record order
    return [replay_record(name, data[name], tensors) for name in flagged]


def text(results: Dict[str, List[Dict[str, Any]]]) -> str:
    lines: List[str] = []
    for file, records in results.items():
        replayed = sum(1 for r in records if r["replay"])
        lines.append(f"{file}: {len(records)} flagged record{'s' * (len(records) != 1)}, {replayed} replayed")
        for r in records:
            lines.append(f"  {r['call']}")
            lines += [f"    {x['verdict']}" for x in r["replay"]]
            if r["not_replayed"]:
                lines.append(f"    {r['not_replayed']}")
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="msprobe-cpp replay", usage=USAGE,
                                     description="Replay the flagged API records of a dump with tensor data on the "
                                                 "CPU, in the recorded dtype and wider.")
    parser.add_argument("path", metavar="DUMP_DIR", help="a dump.json, or a folder searched for dump.json files")
    parser.add_argument("--format", choices=("json", "text"), default="text")
    try:
        options = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        results = {str(f): replay_file(f) for f in dump_files(pathlib.Path(options.path))}
    except ReplayInputError as e:
        print(f"msprobe-cpp replay: {e}", file=sys.stderr)
        return 2
    if options.format == "json":
        print(json.dumps(results, indent=1))
    else:
        sys.stdout.write(text(results))
    return 1 if any(abnormal(r) for records in results.values() for r in records) else 0
