"""Every input is bounded: policy numbers, scenario sizes, durations, flags, empty names,
fault injections, matrix sizes and inventory scripts. Bad input is one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collecting import collect_simulated
from validator import ansible_inventory
from validator.ansible_inventory import DEFAULT_SCRIPT_TIMEOUT_S, load_inventory, set_script_timeout
from validator.cli.main import main
from validator.cli.options import Deadline, FiniteFloat
from validator.error_tree import BadInputError, ExitCode, ScenarioError
from validator.model import NodeFacts
from validator.node.burnin.burn_config import (
    MIN_DURATION_S,
    WEEK_S,
    BurnConfig,
    Dtype,
    Injection,
    parse_burn_duration,
    parse_deadline,
    parse_duration,
)
from validator.node.live.live_source import LiveSource
from validator.node.sim.scenario import MAX_DEPTH, MAX_FILE_BYTES, load_scenario
from validator.node.sim.simulated_source import SimulatedSource

HEALTHY = "healthy-8x-h100-sxm"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the command; it must end as exit 2 with one ``gpuready: error:`` line and no output."""
    code, out, err = run(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == ExitCode.BAD_INPUT, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("gpuready: error: "), err
    assert "Traceback" not in err
    assert out == ""
    return lines[0]


def write_scenario(tmp_path: Path, data: dict[str, object], name: str = "s.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


# ------------------------------------------------------------ policy


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('fail_xids: ["1-99999999999"]\n', "'fail_xids'"),
        ("xid_window_hours: .nan\n", "'xid_window_hours'"),
        ("thresholds:\n  burn_clock_sag_max: .nan\n", "'thresholds.burn_clock_sag_max'"),
        ("expected_gpu_count: 100000000000\n", "'expected_gpu_count'"),
    ],
)
def test_policy_numbers_are_bounded_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text(text)
    line = one_error_line(
        capsys, "certify", "--simulate", HEALTHY, "--policy", "p.yaml", "--report-dir", "out"
    )
    assert needle in line
    assert "p.yaml, line" in line
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------ scenarios


def test_a_scenario_of_twenty_thousand_gpus_is_refused(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path, {"name": "big", "extends": HEALTHY, "nvml": {"gpu_count": 20000}}
    )
    with pytest.raises(ScenarioError, match=r"'nvml.gpu_count' must be a count 0-64, got 20000"):
        load_scenario(path)


def test_json_nested_too_deep_for_the_parser_says_so_once(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"name": "deep", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert str(info.value) == f"scenario file {path}: invalid JSON (nested too deep); fix the file"


def test_nesting_the_parser_takes_is_still_bounded(tmp_path: Path) -> None:
    value: object = "leaf"
    for _ in range(MAX_DEPTH + 5):
        value = {"a": value}
    path = write_scenario(tmp_path, {"name": "deep", "files": value})
    with pytest.raises(ScenarioError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load_scenario(path)


def test_nesting_is_refused_before_anything_walks_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Below the parser's own limit, deep enough to break any recursive walk after it.
    text = '{"name": "deep", "extends": "' + HEALTHY + '", "files": ' + '{"a": ' * 900
    path = tmp_path / "deep.json"
    path.write_text(text + "1" + "}" * 900 + "}")
    line = one_error_line(capsys, "certify", "--simulate", str(path), "--burn", "0")
    assert "nested" in line


def test_a_scenario_file_is_bounded_in_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text('{"name": "huge", "description": "' + "x" * MAX_FILE_BYTES + '"}')
    with pytest.raises(ScenarioError, match="is larger than 16 MiB"):
        load_scenario(str(path))


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"files": {f"/f{i}": "" for i in range(10_001)}}, "'files' must be an object of path"),
        ({"burn": {"xids": ["x"] * 10_001}}, "'burn.xids' must be a list of at most 10000"),
        (
            {"nvml": {"gpu_count": 1, "gpu": {"memory_total_mib": 10**300}}},
            "'nvml.gpu.memory_total_mib' must be an integer from -1e15 to 1e15",
        ),
        (
            {"nvml": {"gpu_count": 1, "gpu": {"power_limit_enforced_w": 1e300}}},
            "'nvml.gpu.power_limit_enforced_w' must be a number from -1e15 to 1e15",
        ),
        ({"host": {"uptime_s": 1e300}}, "'host.uptime_s' must be a number of seconds"),
        ({"commands": {"x": {"rc": 10**20}}}, "'commands.x.rc' must be an exit status"),
    ],
)
def test_scenario_sizes_and_numbers_are_bounded(
    tmp_path: Path, data: dict[str, object], needle: str
) -> None:
    path = write_scenario(tmp_path, {"name": "s", **data})
    with pytest.raises(ScenarioError, match="fix the scenario") as info:
        load_scenario(path)
    assert needle in str(info.value)


# ------------------------------------------------------------ durations


def test_parse_duration_names_the_flag_it_was_given_to() -> None:
    with pytest.raises(BadInputError, match=r"^--deadline 'soon' is not a duration"):
        parse_duration("soon", "--deadline")
    with pytest.raises(BadInputError, match=r"^--burn 'soon' is not a duration.*0 to skip"):
        parse_duration("soon")


def test_burn_bounds() -> None:
    assert parse_burn_duration("0") == 0.0  # no burn, as ever
    assert parse_burn_duration("1s") == MIN_DURATION_S
    assert parse_burn_duration("168h") == WEEK_S
    with pytest.raises(BadInputError, match=r"--burn '99999h' is longer than a week"):
        parse_burn_duration("99999h")
    with pytest.raises(BadInputError, match=r"the shortest burn is 1s .*warm-up.*windows"):
        parse_burn_duration("0.5s")
    with pytest.raises(BadInputError, match="must not be negative"):
        parse_burn_duration("-3s")
    with pytest.raises(BadInputError, match="longer than a week"):
        parse_burn_duration("1" + "0" * 400)  # float('inf') after parsing


def test_deadline_bounds() -> None:
    assert parse_deadline("90s") == 90.0
    assert Deadline().convert("5m", None, None) == 300.0
    for text in ("0", "0s", "-5", "-5m"):
        with pytest.raises(BadInputError, match="--deadline must be longer than 0s"):
            parse_deadline(text)
    with pytest.raises(BadInputError, match="--deadline '169h' is longer than a week"):
        parse_deadline("169h")
    with pytest.raises(BadInputError, match="--deadline 'nan' is not a duration"):
        parse_deadline("nan")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("certify", "--simulate", HEALTHY, "--burn", "99999h"), "--burn '99999h' is longer"),
        (("certify", "--simulate", HEALTHY, "--burn", "0.5s"), "the shortest burn is 1s"),
        (("certify", "--simulate", HEALTHY, "--burn", "-3s"), "must not be negative"),
        (("drift", "--simulate", HEALTHY, "--burn", "99999h"), "--burn '99999h' is longer"),
        (("certify", "--simulate", HEALTHY, "--burn", "0", "--deadline", "0"), "longer than 0s"),
        (("certify", "--simulate", HEALTHY, "--burn", "0", "--deadline", "-1m"), "than 0s"),
        (("drift", "--simulate", HEALTHY, "--deadline", "99999h"), "--deadline '99999h'"),
        (("certify", "--simulate", HEALTHY, "--deadline", "soon"), "--deadline 'soon' is not"),
    ],
)
def test_duration_flags_are_bounded(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    assert needle in one_error_line(capsys, *args)


def test_provision_burn_is_bounded_before_ansible_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nnode-a ansible_connection=local\n")
    line = one_error_line(capsys, "provision", "-i", str(hosts), "--certify", "--burn", "0.2s")
    assert "the shortest burn is 1s" in line


# ------------------------------------------------------------ numbers


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "0", "fast"])
def test_connect_timeout_must_be_a_finite_number(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    line = one_error_line(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "0", "--connect-timeout", value
    )
    assert "--connect-timeout must be a finite number from 0.1 up to 3600 seconds" in line


@pytest.mark.parametrize("value", ["nan", "inf", "0", "0.99"])
def test_burn_memory_fraction_must_be_a_finite_share(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    line = one_error_line(capsys, "certify", "--simulate", HEALTHY, "--burn-memory-fraction", value)
    assert "--burn-memory-fraction must be a finite number from 0.01 up to 0.98" in line


def test_finite_float_refuses_nan_whatever_its_range() -> None:
    for text in ("nan", "NaN", "inf"):
        with pytest.raises(BadInputError):
            FiniteFloat(-1e300, 1e300).convert(text, None, None)
    assert FiniteFloat(0.0, 1.0, above=True).convert("0.5", None, None) == 0.5


def test_burn_config_refuses_non_finite_settings() -> None:
    with pytest.raises(BadInputError, match="duration"):
        BurnConfig(duration_s=float("nan"))
    with pytest.raises(BadInputError, match="memory fraction"):
        BurnConfig(memory_fraction=float("nan"))
    with pytest.raises(BadInputError, match="matrix size"):
        BurnConfig(matrix_size=10**8)


@pytest.mark.parametrize("value", ["99999999", "8", "1e4", "²"])
def test_matrix_size_has_an_absolute_bound(capsys: pytest.CaptureFixture[str], value: str) -> None:
    line = one_error_line(capsys, "certify", "--simulate", HEALTHY, "--burn-matrix-size", value)
    assert "--burn-matrix-size must be a whole number from 16 up to 65536" in line


# ------------------------------------------------------------ empty names and paths


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (("certify", "--simulate", ""), "--simulate"),
        (("certify", "--capture", ""), "--capture"),
        (("certify", "--policy", "", "--simulate", HEALTHY), "--policy"),
        (("certify", "--report-dir", "", "--simulate", HEALTHY, "--burn", "0"), "--report-dir"),
        (("certify", "--db", "", "--simulate", HEALTHY), "--db"),
        (("certify", "-i", ""), "--inventory"),
        (("certify", "-i", "x,", "--limit", ""), "--limit"),
        (("certify", "--sign-key", "", "--simulate", HEALTHY), "--sign-key"),
        (("certify", "--prom-file", "", "--simulate", HEALTHY, "--burn", "0"), "--prom-file"),
        (("certify", "-i", "x,", "--ssh-config", " "), "--ssh-config"),
        (("certify", "-i", "x,", "--known-hosts", ""), "--known-hosts"),
        (("drift", "--simulate", ""), "--simulate"),
        (("drift", "--certificate", ""), "--certificate"),
        (("drift", "--prom-file", ""), "--prom-file"),
        (("drift", "--policy", ""), "--policy"),
        (("capture", ""), "DIRECTORY"),
        (("capture", "out", "--simulate", ""), "--simulate"),
        (("history", ""), "HOST"),
        (("history", "--db", ""), "--db"),
        (("verify-cert", ""), "FILE"),
        (("verify-cert", "c.json", "--sign-key", ""), "--sign-key"),
        (("provision", "-i", ""), "--inventory"),
        (("provision", "-i", "x,", "--tags", ""), "--tags"),
        (("provision", "-i", "x,", "--playbook", ""), "--playbook"),
        (("provision", "-i", "x,", "-e", ""), "--extra-vars"),
    ],
)
def test_an_empty_name_or_path_is_refused_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    label: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(capsys, *args)
    assert line.startswith(f"gpuready: error: {label} is empty: give ")
    assert list(tmp_path.iterdir()) == []  # no report, bundle or database in "" (the cwd)


def test_a_required_option_is_not_offered_to_be_left_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = one_error_line(capsys, "provision", "-i", "")
    assert line == "gpuready: error: --inventory is empty: give INVENTORY"


# ------------------------------------------------------------ fault injection


@pytest.fixture(scope="module")
def healthy_facts() -> NodeFacts:
    return collect_simulated(HEALTHY)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("flip:0:0", "iteration 0 is never reached"),
        ("flip:0:99999999999", "iteration 99999999999 is never reached"),
        ("flip:²:1", "is not KIND:GPU:ITERATION"),
        ("zap:0:1", "is not KIND:GPU:ITERATION"),
    ],
)
def test_injection_text_is_bounded(text: str, needle: str) -> None:
    with pytest.raises(BadInputError, match=needle):
        Injection.parse(text)


def test_injection_on_a_gpu_the_node_lacks_is_refused_before_the_burn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    line = one_error_line(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "5s", "--burn-inject", "flip:9:1"
    )
    assert "--burn-inject flip:9:1 names GPU 9, but this node has 8 GPUs (indexes 0-7)" in line
    assert time.monotonic() - started < 4.0  # refused before the 5 s burn


def test_injection_without_a_burn_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "0", "--burn-inject", "flip:0:1"
    )
    assert "--burn-inject needs a burn" in line


def test_an_injection_the_burn_never_reached_leaves_the_burn_unknown(
    healthy_facts: NodeFacts,
) -> None:
    from validator.judge.checks import burn as burn_check
    from validator.judge.policy import Policy

    config = BurnConfig(duration_s=0.3, grace_s=2.0, inject=Injection(1, 10**9, "flip"))
    result = SimulatedSource(HEALTHY).burn(healthy_facts, config, None)
    assert result.error is not None
    assert "--burn-inject flip:1:1000000000 was never applied (GPU 1 ran" in result.error
    facts = dataclasses.replace(healthy_facts, burn=result)
    run_finding = next(f for f in burn_check.check(facts, Policy(), None) if f.check == "burn.run")
    assert run_finding.severity.value == "UNKNOWN"


def test_an_injection_the_burn_reached_is_applied_and_found(healthy_facts: NodeFacts) -> None:
    config = BurnConfig(duration_s=0.3, grace_s=2.0, inject=Injection(2, 1, "flip"))
    result = SimulatedSource(HEALTHY).burn(healthy_facts, config, None)
    assert result.error is None
    assert {gpu.index: gpu.mismatched_elements for gpu in result.gpus}[2] == 1


# ------------------------------------------------------------ matrix size


def test_a_matrix_that_cannot_fit_the_gpu_is_refused_before_the_burn(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    small = write_scenario(
        tmp_path, {"name": "small", "extends": HEALTHY, "nvml": {"gpu": {"memory_total_mib": 1024}}}
    )
    line = one_error_line(
        capsys, "certify", "--simulate", small, "--burn", "5s", "--burn-matrix-size", "16384"
    )
    # 3 bf16 matrices of 16384^2 are 1.5 GiB; 0.9 of 1 GiB holds 12690^2 of them.
    assert "--burn-matrix-size 16384 does not fit GPU 0's 1024 MiB" in line
    assert "give --burn-matrix-size 12690 or less" in line


def test_a_live_burn_checks_the_matrix_against_each_gpu_before_cuda_starts(
    healthy_facts: NodeFacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validator.node.burnin import devices

    def no_cuda() -> None:
        raise AssertionError("the burn started")

    monkeypatch.setattr(devices, "prepare_cuda_environment", no_cuda)
    config = BurnConfig(duration_s=5, matrix_size=65536, dtype=Dtype.FP32)  # 48 GiB of 80
    gpus = tuple(
        dataclasses.replace(gpu, memory_total_mib=40960) if gpu.index == 3 else gpu
        for gpu in healthy_facts.gpus
    )
    facts = dataclasses.replace(healthy_facts, gpus=gpus)
    with pytest.raises(BadInputError, match="does not fit GPU 3's 40960 MiB"):
        LiveSource(load_scenario(HEALTHY).system()).burn(facts, config, None)


def test_a_simulated_burn_checks_the_matrices_against_the_host(
    healthy_facts: NodeFacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validator.node.burnin import burn_request

    monkeypatch.setattr(burn_request, "_host_memory_bytes", lambda: float(4 << 30))
    config = BurnConfig(duration_s=5, matrix_size=8192)  # 8 GPUs x 7 x 256 MiB on the CPU
    with pytest.raises(BadInputError, match="does not fit this host's 4 GiB"):
        SimulatedSource(HEALTHY).burn(healthy_facts, config, None)


# ------------------------------------------------------------ inventory scripts


# A sleep no other process runs, to find leftovers by: this test process's own (the
# suite's other runs, side by side, run the same scripts).
MARKER = f"600.{os.getpid():07d}"


def sleeping_script(path: Path) -> str:
    path.write_text(f"#!/bin/sh\nsleep {MARKER}\necho '{{}}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def sleepers() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if MARKER.encode() in cmdline and b"sleep" in cmdline:
            found.append(entry.name)
    return found


@pytest.fixture
def restore_timeout() -> Iterator[None]:
    yield
    set_script_timeout(DEFAULT_SCRIPT_TIMEOUT_S)


def test_a_hanging_inventory_script_is_killed_at_the_timeout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = sleeping_script(tmp_path / "slow.sh")
    started = time.monotonic()
    line = one_error_line(capsys, "certify", "-i", script, "--inventory-timeout", "2")
    assert time.monotonic() - started < 30
    assert line == (
        f"gpuready: error: inventory script {script} did not finish within 2 s: "
        "fix the script or raise --inventory-timeout"
    )
    assert sleepers() == []  # the script's own children went with it
    # Put back after the command.
    assert ansible_inventory._script_timeout_s == DEFAULT_SCRIPT_TIMEOUT_S


def test_a_hanging_script_inside_an_inventory_directory(
    tmp_path: Path, restore_timeout: object
) -> None:
    folder = tmp_path / "inventory"
    folder.mkdir()
    (folder / "hosts.ini").write_text("[gpu]\nnode-a\n")
    script = sleeping_script(folder / "cloud.sh")
    set_script_timeout(2)
    with pytest.raises(BadInputError, match=f"inventory script {script} did not finish within 2 s"):
        load_inventory([str(folder)])
    assert sleepers() == []


def test_the_inventory_timeout_from_the_environment(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = sleeping_script(tmp_path / "slow.sh")
    monkeypatch.setenv("GPUREADY_INVENTORY_TIMEOUT", "1.5")
    line = one_error_line(capsys, "drift", "-i", script)
    assert "did not finish within 1.5 s" in line
    monkeypatch.setenv("GPUREADY_INVENTORY_TIMEOUT", "nan")
    line = one_error_line(capsys, "drift", "-i", script)
    assert "--inventory-timeout (from $GPUREADY_INVENTORY_TIMEOUT) must be a finite number" in line


@pytest.mark.parametrize("value", ["0", "nan", "-1", "inf"])
def test_the_inventory_timeout_is_bounded(capsys: pytest.CaptureFixture[str], value: str) -> None:
    line = one_error_line(capsys, "certify", "-i", "x,", "--inventory-timeout", value)
    assert "--inventory-timeout must be a finite number above 0" in line


def test_a_quick_script_still_loads_under_a_short_timeout(
    tmp_path: Path, restore_timeout: object
) -> None:
    script = tmp_path / "quick.sh"
    body = {"gpu": {"hosts": ["node-a"]}, "_meta": {"hostvars": {}}}
    script.write_text(f"#!/bin/sh\necho '{json.dumps(body)}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    set_script_timeout(5)
    assert [host.name for host in load_inventory([str(script)]).hosts] == ["node-a"]
    assert os.environ.get("GPUREADY_INVENTORY_TIMEOUT") is None
