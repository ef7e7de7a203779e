"""The NVIDIA Container Toolkit's outputs and the runtimes' configs, parsed from real recordings.

tests/fixtures/nvidia-ctk holds each file as its public source pasted it (SOURCES.md);
``nvidia-smi -L`` is read from ../shared/captures in place.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.node.parsers.base import ParseError
from validator.node.parsers.nvidia_ctk import (
    parse_cdi_list,
    parse_containerd_toml,
    parse_ctk_version,
    parse_daemon_json,
    parse_smi_list,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-ctk"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_fixture_has_its_source() -> None:
    sources = fixture("SOURCES.md")
    for path in FIXTURES.iterdir():
        if path.name != "SOURCES.md":
            assert f"`{path.name}`" in sources, path.name


def test_an_8x_h100_list_names_every_index_and_uuid() -> None:
    spec = parse_cdi_list(fixture("cdi-list-8x-h100-p5-uuids.txt"))
    assert spec.indexes == tuple(range(8))
    assert len(spec.uuids) == 8
    assert "GPU-20f8adb6-f7e2-5466-6cf5-d07abfe364a9" in spec.uuids
    assert spec.has_all
    assert len(spec.devices) == 17  # "Found 17 CDI devices"


def test_an_older_toolkit_lists_indexes_only() -> None:
    spec = parse_cdi_list(fixture("cdi-list-4gpu-ctk-1.14-indexes-only.txt"))
    assert (spec.indexes, spec.uuids, spec.has_all) == ((0, 1, 2, 3), (), True)


def test_other_kinds_are_kept_but_name_no_gpu() -> None:
    spec = parse_cdi_list(fixture("cdi-list-gpu-operator-management.txt"))
    assert (spec.indexes, spec.uuids, spec.has_all) == ((), (), False)
    assert spec.devices[1] == "management.nvidia.com/gpu=all"


def test_no_spec_at_all_is_an_empty_list() -> None:
    spec = parse_cdi_list("INFO[0000] Found 0 CDI devices\n")
    assert (spec.indexes, spec.uuids, spec.has_all, spec.devices) == ((), (), False, ())


def test_a_list_cut_short_is_refused() -> None:
    text = fixture("cdi-list-8x-h100-p5-uuids.txt").splitlines()[:10]
    with pytest.raises(ParseError, match="found 17 CDI devices but lists 9"):
        parse_cdi_list("\n".join(text))


@pytest.mark.parametrize(
    "text", ["", "nvidia-ctk: command not found\n", "Error: open /etc/cdi: permission denied\n"]
)
def test_what_is_no_list_is_refused(text: str) -> None:
    with pytest.raises(ParseError):
        parse_cdi_list(text)


def test_the_version() -> None:
    assert parse_ctk_version(fixture("nvidia-ctk-version-1.12.0.txt")) == "1.12.0"
    with pytest.raises(ParseError):
        parse_ctk_version("NVIDIA Container Runtime version 1.13.5\n")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("daemon-ctk-configured.json", (True, "runtimes.nvidia", False)),
        (
            "daemon-default-nvidia-cdi.json",
            (True, "runtimes.nvidia, features.cdi, default-runtime nvidia", True),
        ),
        ("daemon-data-root-only.json", (False, "", False)),
    ],
)
def test_docker_daemon_json(name: str, expected: tuple[bool, str, bool]) -> None:
    assert parse_daemon_json(fixture(name)) == expected


def test_a_malformed_daemon_json_is_refused() -> None:
    with pytest.raises(ParseError, match="not JSON"):
        parse_daemon_json(fixture("daemon-malformed.json"))
    with pytest.raises(ParseError, match="not a JSON object"):
        parse_daemon_json("[]")
    assert parse_daemon_json("  \n") == (False, "", False)  # empty: docker's defaults


def test_containerd_config() -> None:
    assert parse_containerd_toml(fixture("containerd-ctk-configured.toml")) == (
        True,
        "runtimes.nvidia",
        False,
    )
    assert parse_containerd_toml(fixture("containerd-no-nvidia.toml")) == (False, "", False)
    commented = "# [plugins.cri.containerd.runtimes.nvidia]\n"
    assert parse_containerd_toml(commented) == (False, "", False)
    assert parse_containerd_toml("[plugins.cri]\n  enable_cdi = true\n")[0] is True
    with pytest.raises(ParseError, match="does not close"):
        parse_containerd_toml("[plugins.cri.containerd.runtimes.nvidia\n")


def test_nvidia_smi_list_from_real_outputs(captures_dir: Path) -> None:
    files = sorted((captures_dir / "nvidia-smi-misc").glob("*__L.txt"))
    assert files
    read = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = [line for line in text.splitlines() if line.startswith("GPU ")]
        if not lines:
            continue
        gpus = parse_smi_list(text)
        assert [index for index, _ in gpus] == list(range(len(gpus))), path.name
        assert all(uuid.startswith("GPU-") for _, uuid in gpus)
        assert len(gpus) == len(lines), path.name  # a MIG device line is no GPU of its own
        read += 1
    assert read >= 5


def test_a_container_that_printed_no_gpu_is_refused() -> None:
    with pytest.raises(ParseError, match="listed no GPU"):
        parse_smi_list(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        )
