"""The stub RPMs carry NVIDIA's real names and RHEL version formats, from the reference.

Reads the package list of tests/provision/stubrpm.py (no build, no tools) and
checks it against /work/shared/reference/nvidia-packages.md: every NVIDIA
package name must appear in one of the document's tables (so the stubs cannot
drift back to matching the roles), and every version must have §0's RHEL
format for its family.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.provision.stubrpm import (
    DRIVER_VERSIONS,
    FM_RENAME_BRANCH,
    StubRpm,
    module_streams,
    modules_yaml,
    stub_rpms,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
REFERENCE_CANDIDATES = (
    REPO_ROOT.parent / "shared" / "reference" / "nvidia-packages.md",
    Path("/work/shared/reference/nvidia-packages.md"),
)
PACKAGES = stub_rpms("6.1.0-18-amd64")
NVIDIA = [p for p in PACKAGES if p.nvidia]


def _reference() -> str:
    for path in REFERENCE_CANDIDATES:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    pytest.skip("shared/reference/nvidia-packages.md is not beside this checkout")


def _generic(text: str) -> str:
    # Versions and placeholders (<br>, <ver>, ${DRIVER_VERSION}) all become "0".
    return re.sub(r"[0-9]+", "0", re.sub(r"<[^>]+>|\$\{[^}]+\}", "0", text))


def _table_names(text: str) -> list[str]:
    """Each word of each code span in a table row, digits and placeholders as ``0``.

    Also §4's NCCL bullets: the document gives NCCL's names (``libnccl-<v>-1+cuda<M.m>``)
    as a list, not a table.
    """
    words: list[str] = []
    nccl = False
    for line in text.splitlines():
        if line.startswith("#"):
            nccl = line.strip() == "### NCCL"
        if line.startswith("|") or (nccl and line.startswith("- ")):
            for span in re.findall(r"`([^`]+)`", line):
                words += [_generic(w) for w in re.split(r"[\s,]+", span) if re.match(r"[a-z]", w)]
    return words


def _appears(name: str, words: list[str]) -> bool:
    """Whether a table names ``name``: the word itself, or it followed by a version.

    ``cuda-nvcc-12-4`` matches ``cuda-nvcc-12-2=12.2.140-1`` (digits generalised),
    ``kmod-nvidia-open-dkms`` matches ``kmod-nvidia-open-dkms-<ver>-1.el9``; a longer
    name (``nvidia-driver-libs``) never matches a shorter one (``nvidia-driver``).
    """
    generic = _generic(name)
    for word in words:
        if word == generic:
            return True
        rest = word[len(generic) :] if word.startswith(generic) else ""
        if re.match(r"[-=:]0", rest) or rest.startswith(("-*", "=*")):
            return True
    return False


def test_reference_table_names_are_read() -> None:
    patterns = _table_names(_reference())
    assert _appears("kmod-nvidia-open-dkms", patterns)
    assert not _appears("nvidia-driver-libs-frobnicated", patterns)
    # A name the reference never lists must not slip through the digit generalisation.
    assert not _appears("nvidia-driver-libs", patterns)


@pytest.mark.parametrize("package", NVIDIA, ids=lambda p: f"{p.name}-{p.evr}")
def test_each_nvidia_stub_name_is_in_the_reference_tables(package: StubRpm) -> None:
    assert _appears(package.name, _table_names(_reference())), (
        f"{package.name} is in no table of nvidia-packages.md ({package.source})"
    )


def test_every_stub_states_its_source() -> None:
    for package in PACKAGES:
        assert package.source, package.name
        if package.nvidia:
            assert package.source.startswith("nvidia-packages.md §"), package.name


# Family of each NVIDIA stub by name prefix or substring (first match wins).
_FAMILIES = (
    ("driver", ("kmod-nvidia", "nvidia-driver", "nvidia-kmod", "nvidia-open")),
    ("driver", ("libnvidia-ml", "nvidia-persistenced")),
    ("fabric", ("nvidia-fabric", "libnvidia-nscq", "libnvsdm", "nvidia-imex")),
    ("cuda", ("cuda-",)),
    ("cudnn", ("libcudnn", "cudnn")),
    ("nccl", ("libnccl",)),
    ("dcgm", ("datacenter-gpu-manager-4",)),
)


def _family(package: StubRpm) -> str:
    for family, prefixes in _FAMILIES:
        if package.name.startswith(prefixes):
            return family
    return "other"


# nvidia-packages.md §0 (RHEL rows) and §4, per family: (epoch, version, release).
FORMATS = {
    "driver": (3, r"[0-9]{3}\.[0-9]+(\.[0-9]+)?", r"1\.el9"),  # 3:<ver>-1.el<N>
    "fabric": (None, r"[0-9]{3}\.[0-9]+\.[0-9]+", r"1"),  # <ver>-1, no dist tag
    "cuda": (None, r"[0-9]+\.[0-9]+\.[0-9]+", r"1"),  # <M.m.p>-1
    "cudnn": (None, r"9\.[0-9]+\.[0-9]+\.[0-9]+", r"1"),  # <9.x.y.z>-1
    "nccl": (None, r"2\.[0-9]+\.[0-9]+", r"1\+cuda[0-9]+\.[0-9]+"),  # <x.y.z>-1+cuda<M.m>
    "dcgm": (1, r"4\.[0-9]+\.[0-9]+", r"1"),  # 1:<4.x.y>-1
}


@pytest.mark.parametrize("package", NVIDIA, ids=lambda p: f"{p.name}-{p.evr}")
def test_each_version_has_the_rhel_format_of_its_family(package: StubRpm) -> None:
    family = _family(package)
    assert family in FORMATS, f"{package.name}: no §0 format for it"
    epoch, version, release = FORMATS[family]
    assert package.epoch == epoch, package.evr
    assert re.fullmatch(version, package.version), package.evr
    assert re.fullmatch(release, package.release), package.evr


def test_fabric_manager_is_renamed_at_580() -> None:
    # nvidia-packages.md §3: nvidia-fabric-manager below 580, nvidia-fabricmanager from it.
    for branch, versions in DRIVER_VERSIONS.items():
        for version in versions:
            names = {p.name for p in NVIDIA if p.version == version and _family(p) == "fabric"}
            if int(branch) >= FM_RENAME_BRANCH:
                assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= names, names
                assert "nvidia-fabric-manager" not in names
            else:
                assert {"nvidia-fabric-manager", f"libnvidia-nscq-{branch}"} <= names, names
                assert "nvidia-fabricmanager" not in names
            # The devel package keeps its old name (§0 key fact 2).
            assert "nvidia-fabric-manager-devel" in names


def test_two_driver_versions_in_each_of_two_branches() -> None:
    assert len(DRIVER_VERSIONS) >= 2
    for branch, versions in DRIVER_VERSIONS.items():
        assert len(set(versions)) == 2
        assert all(v.startswith(branch + ".") for v in versions)
        for version in versions:
            assert f"3:{version}-1.el9" in {p.evr for p in NVIDIA if p.name == "nvidia-driver"}


def test_module_streams_are_the_reference_streams() -> None:
    streams = {s.stream: s for s in module_streams(PACKAGES)}
    # nvidia-packages.md §2d: <br>-open, <br>-dkms, open-dkms, latest-dkms.
    for branch in DRIVER_VERSIONS:
        assert {f"{branch}-open", f"{branch}-dkms"} <= set(streams)
        names = {p.name for p in streams[f"{branch}-open"].artifacts}
        versions = {p.version for p in streams[f"{branch}-open"].artifacts}
        assert "kmod-nvidia-open-dkms" in names
        assert "kmod-nvidia-latest-dkms" not in names
        assert all(v.startswith(branch + ".") for v in versions), versions
    assert {"open-dkms", "latest-dkms"} <= set(streams)
    text = modules_yaml(list(streams.values()))
    # modulemd artifacts are N-E:V-R.A, the epoch written even when 0.
    assert f"nvidia-driver-3:{DRIVER_VERSIONS['550'][0]}-1.el9.x86_64" in text
    assert re.search(r"nvidia-fabric-manager-0:550\.[0-9.]+-1\.x86_64", text)
