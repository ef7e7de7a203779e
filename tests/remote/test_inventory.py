"""Inventories through ansible-core: hosts, variables, --limit, errors and per-host policy."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from ansible.release import __version__ as ansible_version

from validator.ansible_inventory import load_hosts, load_inventory, policy_for
from validator.error_tree import BadInputError, ExitCode, PolicyError
from validator.judge.policy import Policy, Thresholds
from validator.model import HostSpec

# ansible-core 2.19 tags values with their origin (file, line); Python 3.9 has 2.15-2.17.
ANSIBLE_TAGS_ORIGINS = tuple(int(part) for part in ansible_version.split(".")[:2]) >= (2, 19)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "inventory"
PROD = str(FIXTURES / "prod" / "hosts.ini")
YAML = str(FIXTURES / "yaml" / "fleet.yml")
BROKEN = FIXTURES / "broken"


@pytest.fixture
def dynamic(tmp_path: Path) -> str:
    """The dynamic inventory script, executable (a checkout may lose the mode bit)."""
    target = tmp_path / "inventory.py"
    shutil.copy(FIXTURES / "dynamic" / "inventory.py", target)
    target.chmod(target.stat().st_mode | stat.S_IXUSR)
    return str(target)


def _by_name(hosts: list[HostSpec]) -> dict[str, HostSpec]:
    return {host.name: host for host in hosts}


# ------------------------------------------------------------ reading


def test_ini_hosts_with_host_and_group_vars() -> None:
    hosts = _by_name(load_hosts([PROD]))
    assert sorted(hosts) == ["gpu01", "gpu02", "gpu03", "gpu07", "gpu08"]
    key = os.path.expanduser("~/.ssh/fleet_key")
    assert hosts["gpu02"] == HostSpec(
        name="gpu02",
        address="10.0.1.2",
        port=2222,
        user="gpuadmin",  # from [all:vars]
        key_file=key,
        python="python3",
        simulate=None,
        vars={
            # group_vars/h100.yml reaches rack1 through [h100:children]; the pin is a template.
            "gpuready_driver_version": "550.90.07",
            "gpuready_expected_gpu_count": 8,
            "gpuready_expected_model": "h100-sxm",
            "gpuready_thresholds": {"fleet_speed_min": 0.9},
        },
    )
    assert hosts["gpu07"].user == "ops"  # host var beats [all:vars]
    assert hosts["gpu07"].simulate == "healthy-8x-a100-80gb"
    assert hosts["gpu07"].port is None
    # host_vars/gpu08.yml beats the inline auto_silent
    assert hosts["gpu08"].python == "/opt/python3.11/bin/python3"
    assert hosts["gpu08"].address == "gpu08"  # no ansible_host: the inventory name
    assert hosts["gpu08"].vars["gpuready_transport"] == "ssh"


def test_values_are_plain_python_types() -> None:
    host = _by_name(load_hosts([PROD]))["gpu01"]
    # Ansible hands out tagged subclasses; ours must be the builtins (pickling, JSON, ==).
    assert type(host.vars["gpuready_driver_version"]) is str
    assert type(host.vars["gpuready_expected_gpu_count"]) is int
    assert type(host.vars["gpuready_thresholds"]) is dict
    assert type(host.address) is str


def test_yaml_inventory_with_ranges_and_auto_interpreter() -> None:
    hosts = _by_name(load_hosts([YAML]))
    assert sorted(hosts) == ["l40s-01", "l40s-02", "l40s-03", "login01"]
    assert hosts["login01"] == HostSpec(
        name="login01", address="192.0.2.10", port=22022, python="python3", vars={}
    )
    assert hosts["l40s-02"].vars == {
        "gpuready_simulate": "healthy-8x-h100-sxm",
        "gpuready_min_pcie_gen": 4,
    }


def test_dynamic_inventory_script(dynamic: str) -> None:
    hosts = _by_name(load_hosts([dynamic]))
    assert sorted(hosts) == ["dyn-01", "dyn-02"]
    assert hosts["dyn-01"].address == "198.51.100.1"
    assert hosts["dyn-01"].vars == {
        "gpuready_expected_gpu_count": 4,
        "gpuready_simulate": "healthy-8x-h100-sxm",
    }
    assert hosts["dyn-02"].port == 2200
    assert hosts["dyn-02"].simulate == "healthy-8x-h100-sxm"


def test_several_sources_add_up(dynamic: str) -> None:
    names = [host.name for host in load_hosts([PROD, YAML, dynamic])]
    assert len(names) == 11
    assert set(names) >= {"gpu01", "login01", "dyn-02"}


def test_comma_separated_host_list() -> None:
    hosts = load_hosts(["node-a,node-b,"])
    assert [(h.name, h.address, h.python) for h in hosts] == [
        ("node-a", "node-a", "python3"),
        ("node-b", "node-b", "python3"),
    ]


# ------------------------------------------------------------ --limit


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("gpu0[1:3]", None),  # not a group: "gpu0" subscript matches nothing -> error below
        ("rack1[0:1]", {"gpu01", "gpu02"}),  # group subscript, inclusive as Ansible has it
        ("h100:&rack1", {"gpu01", "gpu02", "gpu03"}),
        ("all:!gpu07", {"gpu01", "gpu02", "gpu03", "gpu08"}),
        ("gpu0*", {"gpu01", "gpu02", "gpu03", "gpu07", "gpu08"}),
        ("~gpu0[78]", {"gpu07", "gpu08"}),
        ("a100,gpu02", {"gpu02", "gpu07", "gpu08"}),
        (f"@{FIXTURES / 'limit.txt'}", {"gpu01", "gpu07"}),
    ],
)
def test_limit_patterns_as_ansible_reads_them(limit: str, expected: set[str] | None) -> None:
    if expected is None:
        with pytest.raises(BadInputError, match="no hosts matched"):
            load_hosts([PROD], limit=limit)
        return
    assert {host.name for host in load_hosts([PROD], limit=limit)} == expected


def test_limit_that_matches_nothing_names_file_and_pattern() -> None:
    with pytest.raises(BadInputError) as info:
        load_hosts([PROD], limit="gpu9*")
    assert str(info.value) == (
        f"{PROD}: no hosts matched --limit 'gpu9*': check the pattern "
        f"(ansible-inventory -i {PROD} --graph lists the hosts)"
    )
    assert info.value.exit_code is ExitCode.BAD_INPUT


def test_limit_part_that_matches_nothing_is_a_note() -> None:
    inventory = load_inventory([PROD], limit="gpu01:gpu99")
    assert [host.name for host in inventory.hosts] == ["gpu01"]
    assert any("gpu99" in note for note in inventory.notes), inventory.notes


def test_limit_file_missing() -> None:
    with pytest.raises(BadInputError, match=r"--limit '@/nonexistent/limit': .*limit file"):
        load_hosts([PROD], limit="@/nonexistent/limit")


# ------------------------------------------------------------ errors


def _error(sources: list[str]) -> str:
    with pytest.raises(BadInputError) as info:
        load_hosts(sources)
    text = str(info.value)
    assert "\n" not in text
    assert info.value.exit_code is ExitCode.BAD_INPUT
    return text


def test_missing_file() -> None:
    assert _error(["inventory/nope.ini"]) == (
        "inventory/nope.ini: inventory not found: check the path "
        "(or give hosts as a comma-separated list ending in ',')"
    )


def test_unparsable_file_is_an_error_not_an_empty_fleet() -> None:
    path = str(BROKEN / "garbled.ini")
    text = _error([path])
    assert text.startswith(f"{path}: ansible could not parse this inventory (")
    # ansible's own reason, kept (older ansible-core names no plugin, only that it failed)
    assert "'ini' plugin" in text or not ANSIBLE_TAGS_ORIGINS
    assert text.endswith(f"(ansible-inventory -i {path} --list shows ansible's full message)")


def test_unparsable_file_among_good_ones_still_fails() -> None:
    path = str(BROKEN / "garbled.ini")
    assert _error([PROD, path]).startswith(f"{path}: ansible could not parse")


def test_same_broken_file_twice_explains_itself_twice() -> None:
    # Ansible's Display drops repeated warnings; the reason must not vanish the second time.
    path = str(BROKEN / "garbled.ini")
    assert _error([path]) == _error([path])


def test_inventory_without_hosts() -> None:
    path = str(BROKEN / "empty.ini")
    assert _error([path]).startswith(f"{path}: the inventory has no hosts")


def test_ansible_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BadInputError):
        load_hosts([str(BROKEN / "garbled.ini")])
    with pytest.raises(BadInputError):
        load_hosts([PROD], limit="nothing-like-this")
    load_inventory([PROD], limit="gpu01:gpu99")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_bad_port() -> None:
    path = str(BROKEN / "port.ini")
    assert _error([path]) == (
        f"{path}: host gpu01: ansible_port must be a port number 1-65535, got 'ssh' (str); "
        "fix the variable in the inventory or its group_vars/host_vars"
    )


def test_bad_user_type(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("gpus:\n  hosts:\n    gpu01:\n      ansible_user: [ops]\n")
    assert "ansible_user must be a non-empty string" in _error([str(path)])


def test_misspelt_gpuready_variable() -> None:
    path = str(BROKEN / "typo.ini")
    assert _error([path]).startswith(
        f"{path}: host gpu01: unknown variable 'gpuready_expected_gpu_cont' "
        "(did you mean 'gpuready_expected_gpu_count'?); valid variables: "
        "gpuready_expected_gpu_count, "
    )


def test_policy_value_checked_at_load_names_host_and_var() -> None:
    path = str(BROKEN / "cuda-float.ini")
    assert _error([path]) == (
        f"{path}: host gpu01: gpuready_cuda_version: 'cuda_version' must be a quoted "
        "version string like '12.4', got 12.4 (float)"
    )


def test_undefined_template_variable() -> None:
    path = str(BROKEN / "undefined.yml")
    text = _error([path])
    assert text.startswith(f"{path}: host gpu01: gpuready_driver_version could not be rendered")
    assert "no_such_variable" in text


def test_unknown_transport(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[g]\ngpu01 gpuready_transport=telnet\n")
    assert "'gpuready_transport' must be one of local, ssh, ansible, got 'telnet' (str)" in _error(
        [str(path)]
    )


def test_no_sources() -> None:
    assert _error([]).startswith("no inventory given")


# Ansible only warns about a key given twice and keeps the last value: a pin written twice,
# one of them stale, would go unnoticed. Here it is an error, wherever Ansible reads YAML.
def _assert_located(text: str, expected: str) -> None:
    """``text`` is ``expected``; before ansible-core 2.19 (Python 3.9's), without the location.

    ansible-core 2.19 tags every value with its file and line, and the one line names them;
    older releases name at most the inventory given, so there the problem must still be said.
    """
    if ANSIBLE_TAGS_ORIGINS:
        assert text == expected
    else:
        assert text.endswith(expected.split(": ", 1)[1]), text


DUPLICATED = "gpuready_expected_gpu_count: 8\ngpuready_expected_gpu_count: 4\n"


@pytest.mark.parametrize("folder", ["group_vars/gpus.yml", "host_vars/gpu01.yml"])
def test_a_key_given_twice_in_group_or_host_vars(tmp_path: Path, folder: str) -> None:
    (tmp_path / "hosts.ini").write_text("[gpus]\ngpu01\n")
    vars_file = tmp_path / folder
    vars_file.parent.mkdir()
    vars_file.write_text(DUPLICATED)
    _assert_located(
        _error([str(tmp_path / "hosts.ini")]),
        f"{vars_file}, line 2: the key 'gpuready_expected_gpu_count' is given twice in one "
        "mapping: remove one of the two",
    )


def test_a_key_given_twice_in_a_yaml_inventory(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "gpus:\n  hosts:\n    gpu01:\n      ansible_port: 22\n      ansible_port: 2222\n"
    )
    _assert_located(
        _error([str(path)]),
        f"{path}, line 5: the key 'ansible_port' is given twice in one mapping: "
        "remove one of the two",
    )


def test_a_key_given_twice_when_ansible_cfg_makes_an_unparsed_source_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ansible-core then raises instead of warning; the reason is the same one line. The
    # constant, not the environment: ansible.constants read that when ansible was imported.
    import ansible.constants

    monkeypatch.setattr(ansible.constants, "INVENTORY_ANY_UNPARSED_IS_FAILED", True)
    path = tmp_path / "hosts.yml"
    path.write_text("gpus:\n  hosts:\n    gpu01:\n    gpu01:\n")
    _assert_located(
        _error([str(path)]),
        f"{path}, line 4: the key 'gpu01' is given twice in one mapping: remove one of the two",
    )


def test_a_key_given_twice_in_one_file_of_an_inventory_directory(tmp_path: Path) -> None:
    # The directory parses (good.ini does); the file that does not must not just lose its hosts.
    (tmp_path / "good.ini").write_text("[gpus]\ngpu01\n")
    broken = tmp_path / "more.yml"
    broken.write_text("gpus:\n  hosts:\n    gpu02:\n    gpu02:\n")
    _assert_located(
        _error([str(tmp_path)]),
        f"{broken}, line 4: the key 'gpu02' is given twice in one mapping: remove one of the two",
    )


def test_a_key_given_twice_fails_whatever_the_operator_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The operator's own setting (here: ignore) is overridden for the load, and restored after.
    monkeypatch.setenv("ANSIBLE_DUPLICATE_YAML_DICT_KEY", "ignore")
    (tmp_path / "hosts.ini").write_text("[gpus]\ngpu01\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpus.yml").write_text(DUPLICATED)
    assert "given twice" in _error([str(tmp_path / "hosts.ini")])
    assert os.environ["ANSIBLE_DUPLICATE_YAML_DICT_KEY"] == "ignore"
    assert capfd.readouterr() == ("", "")


def test_without_duplicates_the_setting_is_left_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_DUPLICATE_YAML_DICT_KEY", raising=False)
    load_hosts([PROD])
    assert "ANSIBLE_DUPLICATE_YAML_DICT_KEY" not in os.environ


def test_an_unreadable_group_vars_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text("[gpus]\ngpu01\n")
    (tmp_path / "group_vars").mkdir()
    vars_file = tmp_path / "group_vars" / "gpus.yml"
    vars_file.write_text("gpuready_expected_gpu_count: [8\n")
    text = _error([str(tmp_path / "hosts.ini")])
    if ANSIBLE_TAGS_ORIGINS:
        assert text.startswith(
            f"{vars_file}, line 2: ansible could not read the variables of host gpu01 "
            "(YAML parsing failed: "
        )
    else:
        assert "ansible could not read the variables of host gpu01 (" in text
    assert text.endswith("): fix the file")


# ------------------------------------------------------------ per-host policy


def _host(**variables: object) -> HostSpec:
    return HostSpec(name="gpu07", address="gpu07", vars=variables)


def test_policy_for_applies_overrides_over_the_base() -> None:
    base = Policy(
        driver_branch="550", require_cudnn=False, thresholds=Thresholds(burn_speed_ratio=0.7)
    )
    policy = policy_for(
        _host(
            gpuready_expected_gpu_count=4,
            gpuready_driver_version="550.90.07",
            gpuready_min_pcie_gen=4,
            gpuready_fail_xids=[79, "144-146"],
            gpuready_thresholds={"fleet_speed_min": 0.9},
            gpuready_simulate="healthy-8x-h100-sxm",
        ),
        base,
    )
    assert policy.expected_gpu_count == 4
    assert policy.driver_version == "550.90.07"
    assert policy.driver_branch == "550"  # from the base
    assert policy.min_pcie_gen == 4
    assert policy.fail_xids == (79, 144, 145, 146)
    assert policy.require_cudnn is False  # untouched base field
    assert policy.thresholds.fleet_speed_min == 0.9
    assert policy.thresholds.burn_speed_ratio == 0.7  # base threshold kept


def test_policy_for_without_overrides_is_the_base() -> None:
    base = Policy(cuda_version="12.4")
    assert policy_for(_host(gpuready_simulate="x"), base) is base


def test_policy_for_null_unpins() -> None:
    assert policy_for(_host(gpuready_expected_gpu_count=None), Policy(expected_gpu_count=8)) == (
        Policy()
    )


def test_policy_for_every_inventory_host_resolves() -> None:
    hosts = _by_name(load_hosts([PROD]))
    policy = policy_for(hosts["gpu01"], Policy())
    assert (policy.expected_model, policy.expected_gpu_count) == ("h100-sxm", 8)
    assert policy_for(hosts["gpu07"], Policy()).cuda_version == "12.2"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"gpuready_min_pcie_gen": 9},
            "host gpu07: gpuready_min_pcie_gen: 'min_pcie_gen' must be a whole number 1-6, got 9",
        ),
        (
            {"gpuready_require_ecc": "yes"},
            "host gpu07: gpuready_require_ecc: 'require_ecc' must be true or false, got 'yes'",
        ),
        (
            {"gpuready_thresholds": {"fleet_sped_min": 0.9}},
            "host gpu07: gpuready_thresholds: unknown key 'thresholds.fleet_sped_min' "
            "(did you mean 'fleet_speed_min'?)",
        ),
        (
            {"gpuready_thresholds": {"fleet_speed_min": 1.5}},
            "host gpu07: gpuready_thresholds: 'thresholds.fleet_speed_min' must be a number "
            "above 0 up to 1",
        ),
        (
            {"gpuready_burn_speed_ratio": 0.5},
            "host gpu07: unknown variable 'gpuready_burn_speed_ratio'",
        ),
    ],
)
def test_policy_for_rejects_bad_overrides(variables: dict[str, object], message: str) -> None:
    with pytest.raises(BadInputError) as info:
        policy_for(_host(**variables), Policy())
    assert str(info.value).startswith(message), str(info.value)


def test_policy_for_driver_pin_off_the_base_branch() -> None:
    with pytest.raises(PolicyError) as info:
        policy_for(_host(gpuready_driver_version="535.183.01"), Policy(driver_branch="550"))
    assert str(info.value).startswith(
        "host gpu07: driver_version '535.183.01' is not on driver_branch '550' "
        "(gpuready_driver_version set for this host)"
    )


# ------------------------------------------------------------ one validation mechanism


def _override_error(**variables: object) -> str:
    with pytest.raises(BadInputError) as info:
        policy_for(_host(**variables), Policy())
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"gpuready_xid_window_hours": 1e9},
            "host gpu07: gpuready_xid_window_hours: 'xid_window_hours' must be a number above 0 "
            "up to 8760, got 1000000000.0 (float)",
        ),
        (
            {"gpuready_xid_window_hours": float("nan")},
            "host gpu07: gpuready_xid_window_hours: 'xid_window_hours' must be a number above 0 "
            "up to 8760, got nan (float)",
        ),
        (
            {"gpuready_thresholds": {"fleet_speed_min": float("inf")}},
            "host gpu07: gpuready_thresholds: 'thresholds.fleet_speed_min' must be a number "
            "above 0 up to 1, got inf (float)",
        ),
        (
            {"gpuready_fail_xids": ["1-99999999999"]},
            "host gpu07: gpuready_fail_xids: 'fail_xids' must be a list of Xid numbers or ranges "
            "like '144-150', got '1-99999999999' (str)",
        ),
        (
            {"gpuready_expected_gpu_count": 10**7},
            "host gpu07: gpuready_expected_gpu_count: 'expected_gpu_count' must be a whole number "
            "1-1024, got 10000000 (int)",
        ),
        (
            {"gpuready_thresholds": "strict"},
            "host gpu07: gpuready_thresholds: 'thresholds' must be a mapping of threshold keys, "
            "got 'strict' (str)",
        ),
        (
            {"gpuready_requre_ecc": True},
            "host gpu07: unknown variable 'gpuready_requre_ecc' (did you mean "
            "'gpuready_require_ecc'?); valid variables: gpuready_expected_gpu_count, ",
        ),
    ],
)
def test_gpuready_variables_are_declared(variables: dict[str, object], message: str) -> None:
    assert _override_error(**variables).startswith(message)


def test_a_long_bad_variable_is_shown_as_an_excerpt() -> None:
    message = _override_error(gpuready_driver_version="token-" * 1000)
    assert message.startswith(
        "host gpu07: gpuready_driver_version: 'driver_version' must be a quoted version string "
        "like '550.90.07', got 'token-token-"
    )
    assert len(message) < 160


def _inventory_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    with pytest.raises(BadInputError) as info:
        load_hosts([str(path)])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: host gpu01: ")
    return message[len(f"{path}: host gpu01: ") :]


def test_agent_variables_are_declared_too(tmp_path: Path) -> None:
    simulate = "gpus:\n  hosts:\n    gpu01:\n      gpuready_simulate: [healthy]\n"
    assert _inventory_error(tmp_path, simulate) == (
        "'gpuready_simulate' must be a non-empty string, got ['healthy'] (list); "
        "fix the variable in the inventory or its group_vars/host_vars"
    )
    transport = "gpus:\n  hosts:\n    gpu01:\n      gpuready_transport: sssh\n"
    assert _inventory_error(tmp_path, transport).startswith(
        "'gpuready_transport' must be one of local, ssh, ansible, got 'sssh' (str)"
    )


def test_a_yaml_inventory_value_is_checked_with_the_policy_declarations(tmp_path: Path) -> None:
    text = (
        "gpus:\n  hosts:\n    gpu01:\n      gpuready_thresholds:\n        burn_speed_ratio: .nan\n"
    )
    assert _inventory_error(tmp_path, text) == (
        "gpuready_thresholds: 'thresholds.burn_speed_ratio' must be a number above 0 up to 1, "
        "got nan (float)"
    )


def test_the_declarations_name_every_gpuready_variable() -> None:
    from validator.ansible_inventory import AGENT_VARS, GPUREADY_VARS, POLICY_VARS, PROVISION_VARS

    assert set(GPUREADY_VARS.names) == set(POLICY_VARS) | AGENT_VARS | PROVISION_VARS


def test_the_driver_source_is_checked_and_steers_no_policy(tmp_path: Path) -> None:
    """Provisioning's gpuready_driver_source: a typo fails certify too, one line."""
    from validator.ansible_inventory import load_hosts

    assert _inventory_error(
        tmp_path, "gpus:\n  hosts:\n    gpu01:\n      gpuready_driver_source: debian\n"
    ) == (
        "'gpuready_driver_source' must be one of nvidia, distribution, got 'debian' (str); "
        "fix the variable in the inventory or its group_vars/host_vars"
    )
    path = tmp_path / "ok.yml"
    path.write_text("gpus:\n  hosts:\n    gpu01:\n      gpuready_driver_source: distribution\n")
    (host,) = load_hosts([str(path)])
    assert host.vars["gpuready_driver_source"] == "distribution"
