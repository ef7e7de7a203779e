"""``gpuready init DIR``: the example inventory and the pins, written from what the wheel ships.

Run as the user types it (click through ``main``); what it writes is read back through
the certify inventory reader, which reads ``group_vars/`` beside the inventory as
ansible-playbook does. The package data that ships the two files is checked in
pyproject.toml (a wheel build needs setuptools 77 from the network, too slow here;
`pip wheel . --no-deps` lists validator/inventory/hosts.example.ini and
validator/inventory/group_vars/all.yml).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

import pytest
import yaml

from validator.cli.main import main
from validator.service.site_init import SITE_FILES, shipped_inventory

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["init", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_writes_the_inventory_and_the_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    code, out, err = run(capsys, str(site))
    assert code == 0, err
    inventory, pins = site / "hosts.ini", site / "group_vars" / "all.yml"
    assert out.splitlines() == [
        f"wrote {inventory}",
        f"wrote {pins}",
        f"next: put your hosts in {inventory}, then: gpuready provision -i {inventory}",
    ]
    assert inventory.read_bytes() == (REPO / "inventory" / "hosts.example.ini").read_bytes()
    assert pins.read_bytes() == (REPO / "inventory" / "group_vars" / "all.yml").read_bytes()
    for path in (inventory, pins):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in site.rglob("*")) == ["all.yml", "group_vars", "hosts.ini"]


def test_the_written_inventory_carries_the_pins_to_every_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.ansible_inventory import load_hosts

    assert run(capsys, str(tmp_path))[0] == 0
    pins = yaml.safe_load((tmp_path / "group_vars" / "all.yml").read_text())
    hosts = load_hosts([str(tmp_path / "hosts.ini")])
    assert hosts
    for host in hosts:
        assert host.vars["gpuready_driver_version"] == pins["gpuready_driver_version"]
        assert host.vars["gpuready_nvcc_version"] == pins["gpuready_nvcc_version"]


def test_existing_files_are_kept_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hosts.ini").write_text("[mine]\nnode1\n")
    code, out, err = run(capsys, str(tmp_path))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"gpuready: error: {tmp_path / 'hosts.ini'} already exists: edit it, or give --force "
        "to overwrite"
    ]
    assert (tmp_path / "hosts.ini").read_text() == "[mine]\nnode1\n"
    assert not (tmp_path / "group_vars").exists()  # nothing written at all

    code, _, err = run(capsys, str(tmp_path), "--force")
    assert code == 0, err
    assert "[h100_sxm]" in (tmp_path / "hosts.ini").read_text()
    assert (tmp_path / "group_vars" / "all.yml").is_file()


@pytest.mark.parametrize(
    ("link", "points_at"),
    [
        ("site/hosts.ini", "victim/hosts.ini"),
        ("site/group_vars/all.yml", "victim/all.yml"),
        ("site/group_vars", "victim"),
        ("site", "victim"),
    ],
)
def test_a_link_is_refused_and_never_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str, points_at: str
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("all.yml", "hosts.ini"):
        (victim / name).write_text("precious\n")
    (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path / points_at, tmp_path / link)
    code, out, err = run(capsys, str(tmp_path / "site"), "--force")
    assert code == 2, err
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "link" in err
    assert sorted(p.name for p in victim.iterdir()) == ["all.yml", "hosts.ini"]
    for name in ("all.yml", "hosts.ini"):
        assert (victim / name).read_text() == "precious\n"


def test_the_wheel_ships_both_files() -> None:
    tomllib = pytest.importorskip("tomllib")  # the standard library's from 3.11
    with (REPO / "pyproject.toml").open("rb") as handle:
        setuptools = tomllib.load(handle)["tool"]["setuptools"]
    assert "validator.inventory" in setuptools["packages"]
    folder = REPO / setuptools["package-dir"]["validator.inventory"]
    assert folder == shipped_inventory()  # the checkout's, found as an install finds its own
    globs = setuptools["package-data"]["validator.inventory"]
    for source in SITE_FILES:
        assert (folder / source).is_file(), source
        assert any(fnmatch.fnmatch(source, glob) for glob in globs), source
