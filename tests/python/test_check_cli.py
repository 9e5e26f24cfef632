"""`msprobe-cpp check` end to end: real msprobe dumps, hand-built dumps, and bad input. On the live
guard's dumps (the stop beside them): test_check_live_stop.py."""
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import List

import pytest

from dumps import INF, NAN, backward, forward, scalar, tensor, write_dump
from testenv import ROOT

EMPTY = {"critical_apis": [], "high_priority_apis": [], "medium_priority_apis": [],
         "anomaly_details": []}


def run(cli: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), "check", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def detail(name: str, rank: str, scene: str, args: List[int] = (), kwargs: List[str] = (),
           outs: List[int] = ()) -> dict:
    return {"api_name": name, "rank": rank, "scene_type": scene,
            "input_args_anomaly_indices": list(args), "input_kwargs_anomaly_keys": list(kwargs),
            "output_anomaly_indices": list(outs)}


def test_msprobe_overflow_dump(cli, fixtures):
    r = run(cli, fixtures / "mlp_overflow_check_L1" / "dump.json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout) == {
        "critical_apis": [], "high_priority_apis": ["Tensor.__mul__.1.forward"],
        "medium_priority_apis": [],
        "anomaly_details": [detail("Tensor.__mul__.1.forward", "high",
                                   "InputAnomalyOutputAnomalyScene", args=[0], outs=[0])]}


@pytest.mark.parametrize("name", ["mlp_statistics_L1", "mlp_statistics_mix"])
def test_clean_msprobe_dumps(cli, fixtures, name):
    r = run(cli, fixtures / name / "dump.json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == EMPTY


def test_folder_gives_one_report_per_dump_keyed_by_path(cli, fixtures):
    r = run(cli, fixtures)
    assert r.returncode == 1, r.stderr
    reports = json.loads(r.stdout)
    assert sorted(reports) == sorted(str(p) for p in fixtures.rglob("dump.json"))
    assert reports[str(fixtures / "mlp_statistics_L1" / "dump.json")] == EMPTY
    assert reports[str(fixtures / "mlp_overflow_check_L1" / "dump.json")]["high_priority_apis"] == [
        "Tensor.__mul__.1.forward"]


def nan_training_step() -> dict:
    """An fp16 step where NaN enters with the data: every scene and a backward record."""
    return {
        "Functional.linear.0.forward": forward([tensor(NAN, NAN, NAN, NAN), tensor()], [tensor(NAN, NAN, NAN, NAN)]),
        "Tensor.masked_fill.0.forward": forward([tensor(), tensor(True, False, None, None, "torch.bool"),
                                                 scalar(-INF)], [tensor(1.0, -INF, -INF, INF)]),
        "Functional.softmax.0.forward": forward([tensor(1.0, -INF, -INF, INF)], [tensor()], {"dim": scalar(-1)}),
        "Torch.exp.0.forward": forward([tensor(88.0)], [tensor(INF, 1.0, INF, INF)]),
        "Torch.mul.0.forward": forward([tensor(norm=1e-3)], [tensor(norm=1e3)]),
        "Torch.empty.0.forward": forward([scalar(4)], [tensor(NAN, NAN, NAN, NAN)]),
        "Functional.cross_entropy.0.forward": forward([tensor(NAN, NAN, NAN, NAN), tensor(dtype="torch.int64")],
                                                      [tensor(NAN, NAN, NAN, NAN, shape=[])]),
        "Functional.cross_entropy.0.backward": backward([tensor(1.0, 1.0, 1.0, 1.0, shape=[])],
                                                        [tensor(NAN, NAN, NAN, NAN), None]),
        "Torch.sqrt.0.backward": backward([tensor()], [tensor(INF, 0.0, INF, INF)]),
    }


def test_hand_built_overflow_dump_default_mode(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", nan_training_step())
    r = run(cli, path)
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert report["critical_apis"] == ["Torch.exp.0.forward", "Torch.sqrt.0.backward"]
    assert report["high_priority_apis"] == [
        "Functional.linear.0.forward", "Tensor.masked_fill.0.forward", "Torch.mul.0.forward",
        "Functional.cross_entropy.0.forward", "Functional.cross_entropy.0.backward"]
    assert report["medium_priority_apis"] == ["Functional.softmax.0.forward"]
    details = {d["api_name"]: d for d in report["anomaly_details"]}
    assert "Torch.empty.0.forward" not in details  # shipped ignore rule
    assert details["Tensor.masked_fill.0.forward"] == detail(
        "Tensor.masked_fill.0.forward", "high", "InputAnomalyOutputAnomalyScene", args=[2], outs=[0])
    assert details["Torch.mul.0.forward"] == {
        **detail("Torch.mul.0.forward", "high", "NumericalMutationScene"),
        "threshold": 100000.0, "scale_change_detected": True}
    assert details["Functional.cross_entropy.0.backward"] == detail(
        "Functional.cross_entropy.0.backward", "high", "InputAnomalyOutputAnomalyScene", outs=[0])
    assert [d["api_name"] for d in report["anomaly_details"]] == [
        "Functional.linear.0.forward", "Tensor.masked_fill.0.forward", "Functional.softmax.0.forward",
        "Torch.exp.0.forward", "Torch.mul.0.forward", "Functional.cross_entropy.0.forward",
        "Functional.cross_entropy.0.backward", "Torch.sqrt.0.backward"]


def test_compat_mode_gives_msprobe_verdicts(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", nan_training_step())
    report = json.loads(run(cli, path, "--compat").stdout)
    assert report["critical_apis"] == ["Tensor.masked_fill.0.forward", "Torch.exp.0.forward",
                                       "Functional.cross_entropy.0.backward", "Torch.sqrt.0.backward"]


def test_threshold_option(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", nan_training_step())
    report = json.loads(run(cli, path, "--threshold", "1e7").stdout)
    assert "Torch.mul.0.forward" not in report["high_priority_apis"]
    report = json.loads(run(cli, path, "--threshold", "10").stdout)
    mul = [d for d in report["anomaly_details"] if d["api_name"] == "Torch.mul.0.forward"]
    assert mul[0]["threshold"] == 10.0


def test_extra_rules_file(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", nan_training_step())
    rules = tmp_path / "my_rules.yaml"
    rules.write_text('ignore_nan_inf:\n  - api_name: "torch.exp"\n    output_ignore:\n      - index: 0\n')
    report = json.loads(run(cli, path, "--rules", rules).stdout)
    assert report["critical_apis"] == ["Torch.sqrt.0.backward"]


def test_exit_zero_when_everything_is_filtered(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", {
        "Torch.empty.0.forward": forward([scalar(4)], [tensor(NAN, NAN, NAN, NAN)]),
        "Tensor.masked_fill_.0.forward": forward([tensor(INF, 0.0, INF, INF), tensor(True, False, None, None, "torch.bool"), scalar(1.0)],
                                                 [tensor(INF, 0.0, INF, INF)])})
    r = run(cli, path)
    assert (r.returncode, json.loads(r.stdout)) == (0, EMPTY)


def test_text_format(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", nan_training_step())
    r = run(cli, path, "--format", "text")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0] == f"{path}: 8 anomalous calls (2 critical, 5 high, 1 medium)"
    assert "  critical\tTorch.exp.0.forward\tInputNormalOutputAnomalyScene\toutput [0]" in lines
    grads = write_dump(tmp_path / "grads" / "dump.json", {
        "Torch.exp.0.backward": backward([tensor(NAN, NAN, NAN, NAN)], [tensor(NAN, NAN, NAN, NAN)])})
    assert "  high\tTorch.exp.0.backward\tInputAnomalyOutputAnomalyScene\tinput [0], output [0]" in \
        run(cli, grads, "--format", "text").stdout.splitlines()
    clean = write_dump(tmp_path / "clean" / "dump.json", {"Torch.add.0.forward": forward([tensor()], [tensor()])})
    r = run(cli, clean, "--format", "text")
    assert (r.returncode, r.stdout) == (0, f"{clean}: no anomaly\n")


def test_strings_inf_nan_and_missing_kwargs(cli, tmp_path):
    path = tmp_path / "dump.json"
    path.write_text('{"task": "statistics", "level": "L1", "data": {"Torch.exp.0.forward": '
                    '{"input_args": [{"type": "torch.Tensor", "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.0}], '
                    '"output": [{"type": "torch.Tensor", "Max": "INF", "Min": "0", "Mean": "nan", "Norm": "Inf"}]}}}')
    r = run(cli, path)
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["critical_apis"] == ["Torch.exp.0.forward"]


# --- unreadable input: exit 2 with one message, never a crash ---

def check_fails(cli, path, *extra) -> str:
    r = run(cli, path, *extra)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.count("\n") >= 1 and "Traceback" not in r.stderr
    return r.stderr


def test_truncated_file(cli, tmp_path, fixtures):
    text = (fixtures / "mlp_statistics_L1" / "dump.json").read_text()
    path = tmp_path / "dump.json"
    for cut in (1, 100, len(text) // 2, len(text) - 3):
        path.write_text(text[:cut])
        msg = check_fails(cli, path)
        line = text[:cut].count("\n") + 1
        assert msg.startswith(f"msprobe-cpp check: {path}:{line}:"), msg


def test_empty_file(cli, tmp_path):
    path = tmp_path / "dump.json"
    path.write_text("")
    assert check_fails(cli, path) == f"msprobe-cpp check: {path}:1:1: empty file, expected a dump.json object\n"


def test_wrong_types(cli, tmp_path):
    path = tmp_path / "dump.json"
    path.write_text('{"task": "statistics",\n "data": {"Torch.a.0.forward": {"input_args": {"x": 1}}}}')
    assert check_fails(cli, path) == (f"msprobe-cpp check: {path}:2:47: data.\"Torch.a.0.forward\".input_args: "
                                      "expected a list, got an object\n")
    path.write_text('{"data": [1, 2]}')
    assert check_fails(cli, path) == f"msprobe-cpp check: {path}:1:10: data: expected an object, got a list\n"
    path.write_text('[]')
    assert "expected an object, got a list" in check_fails(cli, path)
    path.write_text('{"data": {"Torch.a.0.forward": {"output": [{"Max": {"a": 1}}]}}}')
    assert "output.Max: expected a number, string, boolean or null, got an object" in check_fails(cli, path)


def test_binary_garbage(cli, tmp_path):
    path = tmp_path / "dump.json"
    path.write_bytes(bytes(range(256)) * 10)
    assert f"{path}:1:1:" in check_fails(cli, path)


def test_directory_without_dump_json(cli, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "stack.json").write_text("{}")
    assert check_fails(cli, tmp_path) == f"msprobe-cpp check: {tmp_path}: no dump.json file under this directory\n"


def test_missing_path(cli, tmp_path):
    assert check_fails(cli, tmp_path / "nope.json") == \
        f"msprobe-cpp check: {tmp_path / 'nope.json'}: no such file or directory\n"


def test_bad_file_among_good_ones_fails_the_folder(cli, tmp_path, fixtures):
    write_dump(tmp_path / "step0" / "rank" / "dump.json", {"Torch.a.0.forward": forward([tensor()], [tensor()])})
    (tmp_path / "step1" / "rank").mkdir(parents=True)
    (tmp_path / "step1" / "rank" / "dump.json").write_text('{"data": {')
    assert f"{tmp_path / 'step1' / 'rank' / 'dump.json'}:1:11:" in check_fails(cli, tmp_path)


def test_malformed_rules_file(cli, tmp_path, fixtures):
    rules = tmp_path / "rules.yaml"
    rules.write_text("ignore_nan_inf:\n  - api_name: torch.a\n    output_ignore:\n      - index: first\n")
    msg = check_fails(cli, fixtures / "mlp_statistics_L1" / "dump.json", "--rules", rules)
    assert msg == (f"msprobe-cpp check: {rules}:4:16: ignore_nan_inf[0].output_ignore[0].index: "
                   "expected an integer >= 0, got \"first\"\n")
    assert check_fails(cli, fixtures / "mlp_statistics_L1" / "dump.json", "--rules", tmp_path / "none.yaml") \
        .endswith("none.yaml: cannot read: No such file or directory (rules file)\n")


@pytest.mark.parametrize("args, message", [
    ([], "PATH is required"),
    (["a", "b"], 'one PATH only, got "a" and "b"'),
    (["x", "--threshold", "zero"], '--threshold: expected a number > 0, got "zero"'),
    (["x", "--threshold", "-1"], '--threshold: expected a number > 0, got "-1"'),
    (["x", "--threshold", "inf"], '--threshold: expected a number > 0, got "inf"'),
    (["x", "--threshold"], "--threshold needs a number"),
    (["x", "--format", "xml"], '--format: expected json or text, got "xml"'),
    (["x", "--verbose"], "unknown option --verbose"),
])
def test_bad_arguments(cli, args, message):
    r = run(cli, *args)
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == f"msprobe-cpp check: {message}"


def test_unknown_command(cli):
    r = subprocess.run([str(cli), "dump"], capture_output=True, text=True)
    assert r.returncode == 2 and 'unknown command "dump"' in r.stderr


def test_a_fifo_named_dump_json_is_refused_not_waited_on(cli, tmp_path):
    import os
    (tmp_path / "step0").mkdir()
    os.mkfifo(tmp_path / "step0" / "dump.json")
    for target in (tmp_path, tmp_path / "step0" / "dump.json"):
        r = subprocess.run([str(cli), "check", str(target)], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2, r
        assert "is a FIFO (named pipe), not a regular file" in r.stderr


def test_pipes_are_read_to_their_end(cli, fixtures, tmp_path):
    """`check /dev/stdin` and `--rules <(...)`: a pipe reports no size, its content counts."""
    import os
    text = (fixtures / "mlp_overflow_check_L1" / "dump.json").read_text()
    r = subprocess.run([str(cli), "check", "/dev/stdin"], input=text, capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and "Tensor.__mul__.1.forward" in r.stdout, r.stderr
    read_end, write_end = os.pipe()
    os.write(write_end, b"ignore_nan_inf:\n  - api_name: [broken\n")
    os.close(write_end)
    r = subprocess.run([str(cli), "check", str(fixtures / "mlp_overflow_check_L1" / "dump.json"),
                        "--rules", f"/dev/fd/{read_end}"], capture_output=True, text=True, timeout=20,
                       pass_fds=(read_end,))
    os.close(read_end)
    assert r.returncode == 2 and "invalid YAML" in r.stderr, r.stderr  # broken YAML is no longer taken for empty


@pytest.mark.parametrize("value", ["0x10", " 5", "5 ", "infinity", "1e5x"])
def test_threshold_must_be_a_plain_number(cli, fixtures, value):
    r = run(cli, fixtures / "mlp_overflow_check_L1" / "dump.json", "--threshold", value)
    assert r.returncode == 2 and "--threshold: expected a number > 0" in r.stderr, (value, r.stderr)


def test_a_dump_json_link_loop_is_a_clear_error(cli, tmp_path):
    import os
    os.symlink(tmp_path / "dump.json", tmp_path / "dump.json")  # points at itself
    for target in (tmp_path, tmp_path / "dump.json"):
        r = run(cli, target)
        assert r.returncode == 2, r
        assert "filesystem error" not in r.stderr and "dump.json" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_rules_errors_are_one_line(cli, fixtures, tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text('ignore_nan_inf:\n  - api_name: "x"\n    "bad\\nkey": 1\n')  # a key holding a newline
    r = run(cli, fixtures / "mlp_overflow_check_L1" / "dump.json", "--rules", rules)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_check_streams_a_dump_larger_than_its_memory_bound(cli, tmp_path):
    # 150 MB of records through a 64 MB budget: reading the whole file first (as check once did,
    # at 1.1x the file size) cannot pass; streaming holds only a chunk and one record. The last
    # record is anomalous, so the whole file was read and judged.
    sys.path.insert(0, str(ROOT / "bench"))
    import check_throughput
    path = tmp_path / "dump.json"
    check_throughput.generate(path, calls=0, min_bytes=150_000_000)
    with open(path, "r+b") as f:
        f.seek(-len(b"\n }\n}"), os.SEEK_END)
        f.write(b',\n  "Torch.last.0.forward": {"input_args": [], "input_kwargs": {}, "output": '
                b'[{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "Max": NaN, '
                b'"Min": NaN, "Mean": NaN, "Norm": NaN}]}\n }\n}')
    assert path.stat().st_size > 150_000_000
    elapsed, peak_rss = check_throughput.run_check(str(cli), path)
    assert peak_rss < 64_000_000, f"peak RSS {peak_rss / 1e6:.1f} MB"
    report = json.loads(run(cli, path).stdout)
    assert report["anomaly_details"][-1]["api_name"] == "Torch.last.0.forward"


def test_fifty_thousand_rules_cost_little_memory(cli, tmp_path, fixtures):
    # yaml-cpp's node tree held such a file at ~55x its 8.5 MB (467 MB); rules are now built as the
    # parser ends each one. The last rule is the one that filters the dump's finding.
    sys.path.insert(0, str(ROOT / "bench"))
    import check_throughput
    rules = tmp_path / "rules.yaml"
    with open(rules, "w") as f:
        f.write("ignore_nan_inf:\n")
        for i in range(49_999):
            f.write(f'  - api_name: "torch.op{i}"\n    description: "rule {i}"\n'
                    "    input_ignore:\n      - index: 0\n      - name: tensor\n"
                    "    output_ignore:\n      - index: 0\n")
        f.write('  - api_name: "tensor.__mul__"\n    input_ignore: [{index: 0}]\n'
                "    output_ignore: [{index: 0}]\n")
    dump = fixtures / "mlp_overflow_check_L1" / "dump.json"
    assert run(cli, dump).returncode == 1
    r = run(cli, "--rules", rules, dump)
    assert r.returncode == 0, r.stdout + r.stderr
    _, peak_rss = check_throughput.run_check(str(cli), dump, "--rules", str(rules))
    assert peak_rss < 150_000_000, f"peak RSS {peak_rss / 1e6:.1f} MB"


# --- CI gates and people: --fail-on, --format text, --version ---

def causal_mask_step() -> dict:
    """A healthy causal-attention step: the mask is high, its softmax medium; nothing critical."""
    return {
        "Tensor.masked_fill.0.forward": forward([tensor(), tensor(True, False, None, None, "torch.bool"),
                                                 scalar(-INF)], [tensor(1.0, -INF, -INF, INF)]),
        "Functional.softmax.0.forward": forward([tensor(1.0, -INF, -INF, INF)], [tensor()], {"dim": scalar(-1)}),
    }


FAIL_ON_CASES = [
    # dump:             exit status under --fail-on critical, high, medium (and the default)
    (causal_mask_step, (0, 1, 1, 1)),
    (lambda: {"Functional.softmax.0.forward": causal_mask_step()["Functional.softmax.0.forward"]}, (0, 0, 1, 1)),
    (nan_training_step, (1, 1, 1, 1)),
    (lambda: {"Torch.add.0.forward": forward([tensor()], [tensor()])}, (0, 0, 0, 0)),
]


@pytest.mark.parametrize("data, expected", FAIL_ON_CASES)
def test_fail_on_sets_the_lowest_failing_level(cli, tmp_path, data, expected):
    path = write_dump(tmp_path / "dump.json", data())
    statuses = tuple(run(cli, path, "--fail-on", level).returncode for level in ("critical", "high", "medium"))
    assert statuses + (run(cli, path).returncode,) == expected
    # The report itself does not depend on the gate.
    assert run(cli, path, "--fail-on", "critical").stdout == run(cli, path).stdout


@pytest.mark.parametrize("data, expected", FAIL_ON_CASES)
def test_fail_on_gates_the_text_report_as_it_gates_the_json_one(cli, tmp_path, data, expected):
    """A CI gate must not depend on the format it prints: a finding of exactly the --fail-on level
    fails in text too."""
    path = write_dump(tmp_path / "dump.json", data())
    statuses = tuple(run(cli, path, "--format", "text", "--fail-on", level).returncode
                     for level in ("critical", "high", "medium"))
    assert statuses + (run(cli, path, "--format", "text").returncode,) == expected


def test_fail_on_refuses_other_levels(cli, tmp_path):
    path = write_dump(tmp_path / "dump.json", causal_mask_step())
    r = run(cli, path, "--fail-on", "low")
    assert r.returncode == 2
    assert r.stderr.startswith('msprobe-cpp check: --fail-on: expected critical, high or medium, got "low"\n')


def frame(file: str, line: int, func: str, code: str) -> str:
    return f"File {file}, line {line}, in {func}, \n {code}"


def test_text_format_gives_sources_ratios_and_the_probable_origin(cli, tmp_path):
    data = {
        "Tensor.masked_fill.0.forward": causal_mask_step()["Tensor.masked_fill.0.forward"],
        "Torch.mul.0.forward": forward([tensor(norm=1e-3)], [tensor(norm=1e3)]),
        "Torch.exp.0.forward": forward([tensor(88.0)], [tensor(INF, 1.0, INF, INF)]),
        "Torch.exp.0.backward": backward([tensor(NAN, NAN, NAN, NAN)], [tensor(NAN, NAN, NAN, NAN)]),
    }
    path = write_dump(tmp_path / "dump.json", data)
    (tmp_path / "stack.json").write_text(json.dumps({
        "Tensor.masked_fill.0.forward": [
            frame("/usr/lib/python3/dist-packages/msprobe_cpp/api_hooks.py", 40, "wrapper", "return fn(*a)"),
            frame("/home/me/model.py", 31, "forward", "s = s.masked_fill(mask, float('-inf'))")],
        "Torch.mul.0.forward": [frame("/home/me/model.py", 35, "forward", "y = x * 1e6")],
        "Torch.exp.0.forward": [
            frame("<site-packages>/torch/nn/modules/module.py", 1194, "_call_impl", "return forward_call(*input)"),
            frame("/home/me/train.py", 12, "step", "y = torch.exp(x)")],
    }, indent=1))
    r = run(cli, path, "--format", "text")
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"{path}: 4 anomalous calls (1 critical, 3 high, 0 medium)",
        "  high\tTensor.masked_fill.0.forward\tInputAnomalyOutputAnomalyScene\tinput_args [2], output [0]",
        "    at /home/me/model.py:31: s = s.masked_fill(mask, float('-inf'))",
        "  high\tTorch.mul.0.forward\tNumericalMutationScene\tnorm ratio 1e+06 (threshold 1e+05)",
        "    at /home/me/model.py:35: y = x * 1e6",
        "  critical\tTorch.exp.0.forward\tInputNormalOutputAnomalyScene\toutput [0]",
        "    at /home/me/train.py:12: y = torch.exp(x)",
        "  high\tTorch.exp.0.backward\tInputAnomalyOutputAnomalyScene\tinput [0], output [0]",
        "    at /home/me/train.py:12: y = torch.exp(x) (its forward)",
        "  probable origin: Torch.exp.0.forward (critical) at /home/me/train.py:12: y = torch.exp(x)",
    ]
    # Without stack.json the same findings, no source lines; with no critical call, the first high.
    (tmp_path / "stack.json").unlink()
    del data["Torch.exp.0.forward"], data["Torch.exp.0.backward"]
    write_dump(path, data)
    lines = run(cli, path, "--format", "text").stdout.splitlines()
    assert not any(line.startswith("    at ") for line in lines)
    assert lines[-1] == "  probable origin: Tensor.masked_fill.0.forward (high; no call is critical)"
    assert not any(line.endswith("\t-") for line in lines)


def test_version_is_the_projects(cli):
    declared = re.search(r"project\(msprobe_cpp VERSION (\S+)",
                         (ROOT / "CMakeLists.txt").read_text()).group(1)
    r = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"msprobe-cpp {declared}\n")


def test_a_folder_lists_steps_in_number_order_and_skips_unfinished_ones(cli, tmp_path, fixtures):
    """step8 before step11 (issue 33); a hidden folder is a step still being written (or a killed
    run's, issue 32): not a dump."""
    source = (fixtures / "mlp_statistics_L1" / "dump.json").read_text()
    for folder in ["step11/rank", "step8/rank", "step8/rank10", "step8/rank2",
                   ".msprobe_cpp_partial.rank.step12.1.0/rank"]:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "dump.json").write_text(source)
    r = run(cli, tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)) == [str(tmp_path / f / "dump.json") for f in
                                          ["step8/rank", "step8/rank2", "step8/rank10", "step11/rank"]]


def exp_overflow() -> dict:
    """A critical forward (finite input, inf output)."""
    return {"Torch.exp.0.forward": forward([tensor(88.0)], [tensor(INF, 1.0, INF, INF)])}


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_folder_fails_when_any_file_has_anomalies(cli, tmp_path, fmt):
    """The status is the folder's: a clean file after an anomalous one does not clear it."""
    write_dump(tmp_path / "step0" / "rank" / "dump.json", exp_overflow())
    clean = write_dump(tmp_path / "step1" / "rank" / "dump.json",
                       {"Torch.add.0.forward": forward([tensor()], [tensor()])})
    r = run(cli, tmp_path, "--format", fmt)
    assert r.returncode == 1, r.stdout + r.stderr
    if fmt == "text":
        assert r.stdout.splitlines()[-1] == f"{clean}: no anomaly"  # the clean one came last


def test_a_backward_inherits_only_from_the_forwards_of_its_own_file(cli, tmp_path):
    """Every step's dump names its calls from 0 again: step 1's Torch.exp.0.backward is not the
    backward of step 0's Torch.exp.0.forward, so step 0's anomaly must not make it look fed by
    one (high) when, its forward unseen, it made its inf from finite gradients (critical)."""
    first = write_dump(tmp_path / "step0" / "rank" / "dump.json", exp_overflow())
    second = write_dump(tmp_path / "step1" / "rank" / "dump.json", {
        "Torch.exp.0.backward": backward([tensor()], [tensor(INF, 0.0, INF, INF)])})
    r = run(cli, tmp_path)
    assert r.returncode == 1, r.stderr
    reports = json.loads(r.stdout)
    assert reports[str(first)]["critical_apis"] == ["Torch.exp.0.forward"]
    assert reports[str(second)]["critical_apis"] == ["Torch.exp.0.backward"]
    assert reports[str(second)]["high_priority_apis"] == []
    text = run(cli, tmp_path, "--format", "text").stdout.splitlines()
    assert "  critical\tTorch.exp.0.backward\tInputNormalOutputAnomalyScene\toutput [0]" in text


# --- issue 44: what a person reads -----------------------------------------------------------------

def on_a_terminal(command: List[str]) -> str:
    """What `command` writes to a terminal (a pseudo-terminal as its stdout)."""
    import pty
    master, slave = pty.openpty()
    try:
        subprocess.run(command, stdout=slave, stderr=subprocess.DEVNULL, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other side is closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("how", ["binary", "python -m"])
def test_check_writes_text_on_a_terminal_and_json_elsewhere(cli, fixtures, how):
    dump = str(fixtures / "mlp_overflow_check_L1" / "dump.json")
    command = [str(cli)] if how == "binary" else [sys.executable, "-m", "msprobe_cpp"]
    text = on_a_terminal(command + ["check", dump])
    assert not text.lstrip().startswith("{") and "Tensor.__mul__.1.forward" in text, text
    assert json.loads(on_a_terminal(command + ["check", dump, "--format", "json"]))["high_priority_apis"]
    assert json.loads(run(cli, dump).stdout)["high_priority_apis"]  # through a pipe: JSON


@pytest.mark.parametrize("args", [["--version"], ["--help"], []])
def test_the_console_commands_version_and_help_need_no_torch(cli, args):
    """The installed `msprobe-cpp` (msprobe_cpp_cli:main) answers these from the extension's file:
    the same bytes as the binary, and torch is never imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "import sys, msprobe_cpp_cli; sys.exit(msprobe_cpp_cli.main(sys.argv[1:]))", *args],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    binary = subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (binary.returncode, binary.stdout)
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "import time:" in line]
    assert "torch" not in imported and "msprobe_cpp" not in imported, [m for m in imported if "torch" in m]
