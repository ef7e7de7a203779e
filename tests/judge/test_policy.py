"""Policy loading: defaults, a full file, and one-line errors for every kind of bad input."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
import yaml

from validator.error_tree import ExitCode, PolicyError
from validator.judge import (
    DEFAULT_FAIL_XIDS,
    Policy,
    Thresholds,
    load_policy,
    policy_digest,
    policy_from_mapping,
)

FULL = """\
expected_gpu_count: 8
expected_model: h100-sxm
driver_version: "550.90.07"
driver_branch: "550"
cuda_version: "12.4"
nvcc_version: "12.4"
cudnn_version: "9.1"
min_pcie_gen: 5
min_pcie_width: 16
persistence_mode_required: true
mig_mode: false
xid_window_hours: 2
fail_xids: [48, 79, "144-146"]
warn_xids: [13, 31]
require_ecc: true
require_fabric_manager: true
require_nvcc: false
require_cudnn: false
thresholds:
  memory_tolerance_mib: 256
  power_limit_min_ratio: 0.9
  thermal_margin_min_c: 15
  ecc_corrected_volatile_warn: 5000
  retired_pages_max: 5
  remapped_rows_uncorrectable_max: 100
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_defaults() -> None:
    policy = Policy()
    assert policy.expected_gpu_count is None
    assert policy.persistence_mode_required is True
    assert policy.xid_window_hours == 24.0
    assert policy.fail_xids == DEFAULT_FAIL_XIDS
    assert {48, 79, 94, 95, 119, 120, 140, 144, 150} <= set(policy.fail_xids)
    assert 13 not in policy.fail_xids
    assert policy.thresholds == Thresholds(None, 0.95, 10.0, 10000, 10, 512)
    assert (policy.require_ecc, policy.require_nvcc, policy.require_cudnn) == (True, True, True)


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load_policy(write(tmp_path, "# nothing pinned yet\n")) == Policy()


def test_full_file(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, FULL))
    assert policy.expected_gpu_count == 8
    assert policy.driver_version == "550.90.07"
    assert policy.cuda_version == "12.4"
    assert policy.mig_mode is False
    assert policy.xid_window_hours == 2.0
    assert policy.fail_xids == (48, 79, 144, 145, 146)
    assert policy.warn_xids == (13, 31)
    assert policy.require_fabric_manager is True
    assert policy.thresholds == Thresholds(256, 0.9, 15.0, 5000, 5, 100)


def test_unquoted_integer_branch_is_accepted() -> None:
    assert policy_from_mapping({"driver_branch": 550}, "vars").driver_branch == "550"


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, "thresholds:\n  powr_limit_min_ratio: 0.9\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value) == (
        f"{path}, line 2 column 3: unknown key 'thresholds.powr_limit_min_ratio' (did you mean "
        "'power_limit_min_ratio'?); valid keys: memory_tolerance_mib, power_limit_min_ratio, "
        "thermal_margin_min_c, ecc_corrected_volatile_warn, retired_pages_max, "
        "remapped_rows_uncorrectable_max, burn_speed_ratio, burn_relative_min, "
        "burn_power_min_ratio, burn_thermal_margin_c, burn_clock_sag_max, fleet_speed_min, "
        "drift_burn_drop, pcie_replay_growth_max, nvlink_crc_growth_max, "
        "nvlink_replay_growth_max, nvlink_recovery_growth_max, h2d_min_gbs, d2h_min_gbs, "
        "hbm_min_gbs, p2p_min_gbs, all_reduce_min_gbs, interconnect_sibling_min, "
        "fleet_interconnect_min, drift_interconnect_drop"
    )
    assert "\n" not in str(info.value)
    assert info.value.exit_code is ExitCode.BAD_INPUT


def test_unknown_top_level_key_without_a_close_match(tmp_path: Path) -> None:
    path = write(tmp_path, "colour: blue\n")
    with pytest.raises(
        PolicyError, match=r"unknown key 'colour'; valid keys: expected_gpu_count, "
    ):
        load_policy(path)


def test_unknown_top_level_key_with_suggestion() -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_mapping({"driver_verison": "550.90.07"}, "group_vars/gpu.yml")
    assert str(info.value).startswith(
        "group_vars/gpu.yml: unknown key 'driver_verison' (did you mean 'driver_version'?); "
        "valid keys: "
    )


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            "thresholds:\n  power_limit_min_ratio: high\n",
            "line 2 column 26",
            "'thresholds.power_limit_min_ratio' must be a number above 0 up to 1, got 'high' (str)",
        ),
        (
            "thresholds:\n  power_limit_min_ratio: 1.5\n",
            "line 2 column 26",
            "'thresholds.power_limit_min_ratio' must be a number above 0 up to 1, got 1.5 (float)",
        ),
        (
            "expected_gpu_count: eight\n",
            "line 1 column 21",
            "'expected_gpu_count' must be a whole number 1-1024, got 'eight' (str)",
        ),
        (
            "expected_gpu_count: true\n",
            "line 1 column 21",
            "'expected_gpu_count' must be a whole number 1-1024, got True (bool)",
        ),
        (
            "require_ecc: 'yes'\n",
            "line 1 column 14",
            "'require_ecc' must be true or false, got 'yes' (str)",
        ),
        (
            "cuda_version: 12.4\n",
            "line 1 column 15",
            "'cuda_version' must be a quoted version string like '12.4', got 12.4 (float)",
        ),
        (
            "fail_xids: 79\n",
            "line 1 column 12",
            "'fail_xids' must be a list of Xid numbers or ranges like '144-150', got 79 (int)",
        ),
        (
            "fail_xids: [79, '150-144']\n",
            "line 1 column 17",
            "'fail_xids' must be a list of Xid numbers or ranges like '144-150', "
            "got '150-144' (str)",
        ),
        (
            "thresholds: 5\n",
            "line 1 column 13",
            "'thresholds' must be a mapping of threshold keys, got 5 (int)",
        ),
    ],
)
def test_wrong_type_names_key_type_and_value(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value) == f"{path}, {where}: {message}"
    # Without a file (inventory variables), the same words without the line.
    with pytest.raises(PolicyError) as plain:
        policy_from_mapping(yaml.safe_load(text), "vars")
    assert str(plain.value) == f"vars: {message}"


def test_inconsistent_driver_pins() -> None:
    with pytest.raises(
        PolicyError, match=r"driver_version '550.90.07' is not on driver_branch '535'"
    ):
        policy_from_mapping({"driver_version": "550.90.07", "driver_branch": "535"}, "p")


def test_bad_yaml_gives_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "driver_branch: '550'\nthresholds:\n  retired_pages_max: 5\n bad: [\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    text = str(info.value)
    assert text.startswith(f"{path}: line 4: YAML syntax error: ")
    assert "\n" not in text


def test_not_a_mapping_gives_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "# a list by mistake\n- driver_branch: '550'\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert (
        str(info.value)
        == f"{path}: line 2: the policy must be a mapping of keys to values, got a list"
    )


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value) == f"{path}: policy file not found"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r": cannot read policy file: "):
        load_policy(str(tmp_path))


def test_digest_is_stable_and_sensitive(tmp_path: Path) -> None:
    loaded = load_policy(write(tmp_path, FULL))
    again = policy_from_mapping(yaml.safe_load(FULL), "other origin")
    assert policy_digest(loaded) == policy_digest(again)
    assert len(policy_digest(loaded)) == 64
    assert policy_digest(loaded) != policy_digest(Policy())


# ---------------------------------------------- one validation mechanism (validator.fields)


def _policy_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}")
    return message[len(path) :]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "xid_window_hours: .nan\n",
            ", line 1 column 19: 'xid_window_hours' must be a number above 0 up to 8760, "
            "got nan (float)",
        ),
        (
            "thresholds:\n  burn_speed_ratio: .inf\n",
            ", line 2 column 21: 'thresholds.burn_speed_ratio' must be a number above 0 up to 1, "
            "got inf (float)",
        ),
        (
            "thresholds:\n  thermal_margin_min_c: -.inf\n",
            ", line 2 column 25: 'thresholds.thermal_margin_min_c' must be a number from 0 up to "
            "150, got -inf (float)",
        ),
        (
            "xid_window_hours: 100000\n",
            ", line 1 column 19: 'xid_window_hours' must be a number above 0 up to 8760, "
            "got 100000 (int)",
        ),
        (
            "thresholds:\n  thermal_margin_min_c: 200\n",
            ", line 2 column 25: 'thresholds.thermal_margin_min_c' must be a number from 0 up to "
            "150, got 200 (int)",
        ),
        (
            "thresholds:\n  retired_pages_max: 1000000\n",
            ", line 2 column 22: 'thresholds.retired_pages_max' must be a whole number 0-999999, "
            "got 1000000 (int)",
        ),
        (
            "thresholds:\n  memory_tolerance_mib: -1\n",
            ", line 2 column 25: 'thresholds.memory_tolerance_mib' must be a whole number "
            "0-999999, got -1 (int)",
        ),
        (
            "fail_xids: [48, '1-99999999999']\n",
            ", line 1 column 17: 'fail_xids' must be a list of Xid numbers or ranges like "
            "'144-150', got '1-99999999999' (str)",
        ),
        (
            "fail_xids: [48, 70000]\n",
            ", line 1 column 17: 'fail_xids' must be a list of Xid numbers or ranges like "
            "'144-150', got 70000 (int)",
        ),
        (
            "warn_xids:\n  - 13\n  - '1-70000'\n",
            ", line 3 column 5: 'warn_xids' must be a list of Xid numbers or ranges like "
            "'144-150', got '1-70000' (str)",
        ),
        (
            "min_pcie_gen: 9\n",
            ", line 1 column 15: 'min_pcie_gen' must be a whole number 1-6, got 9 (int)",
        ),
    ],
)
def test_out_of_range_and_non_finite_are_refused_with_the_line(
    tmp_path: Path, text: str, message: str
) -> None:
    started = time.monotonic()
    assert _policy_error(tmp_path, text) == message
    assert time.monotonic() - started < 2  # no Xid range of billions is ever expanded


def test_xid_ranges_up_to_the_last_xid_are_fine() -> None:
    policy = policy_from_mapping({"fail_xids": ["0-65535"], "warn_xids": [13, "31 - 32"]}, "p")
    assert len(policy.fail_xids) == 65536
    assert policy.warn_xids == (13, 31, 32)


def test_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    assert _policy_error(
        tmp_path, "require_ecc: true\nrequire_nvcc: false\nrequire_ecc: false\n"
    ) == (", line 3 column 1: duplicate key 'require_ecc' (first at line 1); keep one of them")
    nested = "thresholds:\n  retired_pages_max: 5\n  fleet_speed_min: 0.9\n  retired_pages_max: 6\n"
    assert _policy_error(tmp_path, nested) == (
        ", line 4 column 3: duplicate key 'thresholds.retired_pages_max' (first at line 2); "
        "keep one of them"
    )


def test_unknown_key_has_its_line_and_column(tmp_path: Path) -> None:
    message = _policy_error(tmp_path, "require_ecc: true\n\nrequire_cdnn: false\n")
    assert message.startswith(
        ", line 3 column 1: unknown key 'require_cdnn' (did you mean 'require_cudnn'?); "
        "valid keys: expected_gpu_count, "
    )


def test_a_long_bad_value_is_shown_as_an_excerpt(tmp_path: Path) -> None:
    secret = "hunter2-" * 500
    message = _policy_error(tmp_path, f"driver_version: '{secret}'\n")
    assert message.startswith(
        ", line 1 column 17: 'driver_version' must be a quoted version string like "
        "'550.90.07', got 'hunter2-"
    )
    assert message.endswith(" (str)")
    assert len(message) < 150
    huge_list = _policy_error(tmp_path, f"expected_model: [{', '.join(['x' * 50] * 200)}]\n")
    assert len(huge_list) < 150


def test_bad_values_from_inventory_variables_have_no_line() -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_mapping({"thresholds": {"fleet_speed_min": float("nan")}}, "host gpu07")
    assert str(info.value) == (
        "host gpu07: 'thresholds.fleet_speed_min' must be a number above 0 up to 1, got nan (float)"
    )


def test_inconsistent_pins_point_at_the_branch(tmp_path: Path) -> None:
    text = "driver_version: '550.90.07'\ndriver_branch: '535'\n"
    assert _policy_error(tmp_path, text) == (
        ", line 2 column 16: driver_version '550.90.07' is not on driver_branch '535'; "
        "set one of them"
    )


def test_the_declarations_cover_every_policy_field() -> None:
    from validator.judge.policy import POLICY_FIELDS, THRESHOLD_FIELDS

    assert POLICY_FIELDS.names == tuple(f.name for f in dataclasses.fields(Policy))
    assert THRESHOLD_FIELDS.names == tuple(f.name for f in dataclasses.fields(Thresholds))


def test_the_default_policy_keeps_the_digest_its_certificates_hold() -> None:
    """Issue 34's families at their defaults leave the digest a schema-2 certificate holds."""
    certificates = Path(__file__).parent.parent / "fixtures" / "certificates"
    fixture = certificates / "schema2-h100-node-01-signed.json"
    held = json.loads(fixture.read_text(encoding="utf-8"))["policy_digest"]
    assert policy_digest(Policy()) == held
    for family in ({"gpudirect": {"acs_allowed": True}}, {"host": {"swap_allowed": False}},
                   {"container": {"required": True}}, {"network": {"ports": 4}}):  # fmt: skip
        assert policy_digest(policy_from_mapping(family, "policy")) != held, family
