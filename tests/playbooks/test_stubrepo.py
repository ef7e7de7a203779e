"""The stub apt repositories of the provisioning tests, without test hosts.

Builds them (dpkg-deb, dpkg-scanpackages, gpg), then checks their indexes, their
signatures, the packages' payloads against the collector's own parsers, a real
``apt-get update`` over HTTP on loopback with ``signed-by``, what apt resolves
with and without the ``nvidia-driver-pinning-*`` preferences, and that every
package name and version string comes from ``../shared/reference/nvidia-packages.md``
(so the stubs cannot drift back to matching the roles).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import ipaddress
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.provision.stubrepo import (
    FAIL_INSTALL_MARKER,
    KEYRING_PATH,
    NVIDIA_LIST_PATH,
    NVIDIA_URL,
    SHAPES,
    RepoServer,
    StubPackage,
    StubRepo,
    StubRepoUnavailable,
    archive_packages,
    build_archive,
    build_repo,
    check_tools,
    repo_key,
    serve_repo,
    stub_packages,
)
from validator.node.parsers.cudnn import parse_cudnn_header, parse_cudnn_packages
from validator.node.parsers.nvcc import parse_nvcc_version

KERNEL = "6.1.0-test-amd64"
# CI has the shared folder beside the checkout, as for the captures (tests/conftest.py).
REFERENCE = REPO_ROOT.parent / "shared" / "reference" / "nvidia-packages.md"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        check_tools()
    except StubRepoUnavailable as exc:
        pytest.skip(str(exc))
    return tmp_path_factory.mktemp("stubrepo-cache")


@pytest.fixture(scope="module")
def repo(cache: Path) -> StubRepo:
    return build_repo(cache, stub_packages(KERNEL))


@pytest.fixture(scope="module")
def ubuntu_repo(cache: Path) -> StubRepo:
    return build_repo(cache, stub_packages(KERNEL, "ubuntu2404"))


@pytest.fixture(scope="module")
def archive_repo(cache: Path) -> StubRepo:
    archive = build_archive("ubuntu2404", cache)
    assert archive is not None
    return archive


def stanzas(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if not line[:1].isspace() and ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        out.append(fields)
    return out


def extract(repo: StubRepo, name: str, version: str, dest: Path) -> Path:
    (deb,) = list(repo.path.glob(f"{name}_{version}_*.deb"))
    subprocess.run(["dpkg-deb", "-R", str(deb), str(dest)], check=True)
    return dest


def index_versions(repo: StubRepo) -> dict[str, set[str]]:
    versions: dict[str, set[str]] = {}
    for entry in stanzas((repo.path / "Packages").read_text()):
        versions.setdefault(entry["Package"], set()).add(entry["Version"])
    return versions


def test_index_lists_every_package_and_version_with_matching_hashes(repo: StubRepo) -> None:
    index = stanzas((repo.path / "Packages").read_text())
    for entry in index:
        deb = repo.path / entry["Filename"]
        assert deb.parent == repo.path  # flat: every .deb at the top, as NVIDIA's
        assert hashlib.sha256(deb.read_bytes()).hexdigest() == entry["SHA256"]
    versions = index_versions(repo)
    # Debian 12: no branch in the driver names, `<ver>-1` everywhere (nvidia-packages.md §2c).
    assert versions["nvidia-open"] == {
        "550.90.07-1", "550.127.05-1", "580.105.08-1", "590.48.01-1"
    }  # fmt: skip
    assert versions["nvidia-kernel-open-dkms"] == versions["nvidia-open"]
    assert versions["cuda-drivers-550"] == {"550.90.07-1", "550.127.05-1"}
    assert versions["nvidia-fabricmanager-550"] == {"550.90.07-1", "550.127.05-1"}
    assert versions["nvidia-fabricmanager"] == {"580.105.08-1", "590.48.01-1"}
    assert versions["libnvidia-nscq"] == {"580.105.08-1", "590.48.01-1"}
    assert versions["nvidia-driver-pinning-580"] == {"580.105.08-1"}
    assert versions["nvidia-driver-pinning-550.90.07"] == {"550.90.07-1"}
    assert not [name for name in versions if re.fullmatch(r"nvidia-driver-\d+-open", name)]
    assert versions["cudnn9-cuda-12"] == {"9.1.0.70-1", "9.2.1.18-1"}
    assert versions["cuda-toolkit-12-4"] == {"12.4.1-1"}
    assert versions["libnccl2"] == {"2.23.4-1+cuda12.4", "2.23.4-1+cuda12.6", "2.26.5-1+cuda12.9"}
    assert versions["datacenter-gpu-manager-4-cuda12"] == {"1:4.4.1-1", "1:4.5.2-1"}
    assert versions["nvidia-container-toolkit"] == {"1.19.1-1", "1.20.0-1"}
    assert versions["cuda-keyring"] == {"1.1-1"}
    assert versions[f"linux-headers-{KERNEL}"] == {"1.0-1"}
    assert versions["linux-headers-amd64"] == {"1.0-1"}
    assert "cuda" not in versions  # the meta package the roles must never install
    (open_old,) = [
        e for e in index if e["Package"] == "nvidia-open" and e["Version"] == "550.90.07-1"
    ]
    assert open_old["Depends"] == (
        "nvidia-driver (= 550.90.07-1), nvidia-kernel-open-dkms (= 550.90.07-1)"
    )
    (cuda_580,) = [e for e in index if e["Package"] == "cuda-drivers-580"]
    # Pitfall 1: only `>=`, so without the pinning package it pulls 590.
    assert cuda_580["Depends"] == (
        "nvidia-driver (>= 580.105.08), nvidia-kernel-dkms (>= 580.105.08)"
    )
    (dcgm,) = [
        e
        for e in index
        if e["Package"] == "datacenter-gpu-manager-4-cuda12" and e["Version"] == "1:4.4.1-1"
    ]
    assert dcgm["Depends"] == "datacenter-gpu-manager-4-core (= 1:4.4.1-1)"
    assert dcgm["Filename"] == "./datacenter-gpu-manager-4-cuda12_4.4.1-1_amd64.deb"
    assert (
        gzip.decompress((repo.path / "Packages.gz").read_bytes()).decode()
        == (repo.path / "Packages").read_text()
    )
    assert (repo.path / "cuda-keyring_1.1-1_all.deb").is_file()
    assert repo.versions("libcudnn9-cuda-12") == ["9.1.0.70-1", "9.2.1.18-1"]


def test_ubuntu_repository_has_both_naming_eras(ubuntu_repo: StubRepo) -> None:
    versions = index_versions(ubuntu_repo)
    # nvidia-packages.md §2a: 550 in the name, `-0ubuntu1`; `cuda-drivers*` at `-1`.
    assert versions["nvidia-driver-550-open"] == {"550.90.07-0ubuntu1", "550.163.01-0ubuntu1"}
    assert versions["libnvidia-compute-550"] == versions["nvidia-driver-550-open"]
    assert versions["nvidia-dkms-550-open"] == versions["nvidia-driver-550-open"]
    assert versions["cuda-drivers-550"] == {"550.90.07-1", "550.163.01-1"}
    assert versions["nvidia-fabricmanager-550"] == {"550.90.07-1", "550.163.01-1"}
    assert versions["libnvidia-nscq-550"] == {"550.90.07-1", "550.163.01-1"}
    # From 590 no branch in the name; the pinning packages choose it.
    assert versions["nvidia-open"] == {"590.44.01-0ubuntu1", "590.48.01-0ubuntu1"}
    assert versions["libnvidia-compute"] == versions["nvidia-open"]
    assert versions["nvidia-dkms-open"] == versions["nvidia-open"]
    assert versions["nvidia-driver-pinning-590"] == {"590.48.01-0ubuntu1"}
    assert versions["nvidia-driver-pinning-590.48.01"] == {"590.48.01-0ubuntu1"}
    assert versions["nvidia-driver-pinning-590.44.01"] == {"590.44.01-0ubuntu1"}
    assert versions["nvidia-fabricmanager"] == {"590.44.01-1", "590.48.01-1"}
    assert versions["cuda-drivers"] == {
        "550.90.07-1", "550.163.01-1", "590.44.01-1", "590.48.01-1"
    }  # fmt: skip
    # nvidia-modprobe keeps its name across the eras (§2a lists).
    assert len(versions["nvidia-modprobe"]) == 4
    for gone in ("nvidia-open-590", "cuda-drivers-590", "libnvidia-compute-590"):
        assert gone not in versions  # pitfall 2: these do not exist
    assert versions["linux-headers-generic"] == {"1.0-1"}


def test_canonical_archive_competes_with_the_same_names(
    ubuntu_repo: StubRepo, archive_repo: StubRepo
) -> None:
    cuda, archive = index_versions(ubuntu_repo), index_versions(archive_repo)
    assert archive["libnvidia-compute-550"] == {"550.163.01-0ubuntu0.24.04.1"}
    assert "nvidia-driver-550-server-open" in archive
    shared = set(cuda) & set(archive)
    assert {"nvidia-driver-550-open", "libnvidia-compute-550", "nvidia-dkms-550-open"} <= shared
    assert archive_repo.fingerprint != ubuntu_repo.fingerprint
    assert "Origin: Ubuntu" in (archive_repo.path / "Release").read_text()


def test_release_lists_the_indexes_and_its_signatures_verify(
    repo: StubRepo, tmp_path: Path
) -> None:
    release = (repo.path / "Release").read_text()
    size = (repo.path / "Packages.gz").stat().st_size
    digest = hashlib.sha256((repo.path / "Packages.gz").read_bytes()).hexdigest()
    assert f" {digest} {size:>16} Packages.gz" in release
    keyring = str(repo.keyring)
    ok = subprocess.run(
        ["gpgv", "--keyring", keyring, str(repo.path / "InRelease")],
        capture_output=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    detached = subprocess.run(
        ["gpgv", "--keyring", keyring, str(repo.path / "Release.gpg"), str(repo.path / "Release")],
        capture_output=True,
        check=False,
    )
    assert detached.returncode == 0, detached.stderr
    tampered = tmp_path / "InRelease"
    tampered.write_text((repo.path / "InRelease").read_text().replace("Packages.gz", "Packages.xz"))
    bad = subprocess.run(
        ["gpgv", "--keyring", keyring, str(tampered)], capture_output=True, check=False
    )
    assert bad.returncode != 0


def test_keyring_package_ships_the_signing_key_and_nvidias_own_list(
    repo: StubRepo, tmp_path: Path
) -> None:
    tree = extract(repo, "cuda-keyring", "1.1-1", tmp_path / "keyring")
    shipped = (tree / KEYRING_PATH.lstrip("/")).read_bytes()
    assert shipped == repo.keyring.read_bytes()
    assert not shipped.startswith(b"-----BEGIN")  # binary, as signed-by=*.gpg needs
    listing = (tree / NVIDIA_LIST_PATH.lstrip("/")).read_text()
    assert listing == f"deb [signed-by={KEYRING_PATH}] {NVIDIA_URL} /\n"
    assert (tree / "DEBIAN/conffiles").read_text() == NVIDIA_LIST_PATH + "\n"


def test_ubuntu_keyring_lists_nvidias_ubuntu_repository(
    ubuntu_repo: StubRepo, tmp_path: Path
) -> None:
    tree = extract(ubuntu_repo, "cuda-keyring", "1.1-1", tmp_path / "keyring")
    shape = SHAPES["ubuntu2404"]
    listing = (tree / shape.nvidia_list_path.lstrip("/")).read_text()
    assert shape.nvidia_list_path == "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list"
    assert listing == (
        f"deb [signed-by={KEYRING_PATH}] "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /\n"
    )


def test_nvcc_prints_what_the_collector_parses(repo: StubRepo, tmp_path: Path) -> None:
    tree = extract(repo, "cuda-nvcc-12-4", "12.4.131-1", tmp_path / "nvcc")
    nvcc = tree / "usr/local/cuda-12.4/bin/nvcc"
    out = subprocess.run(
        [str(nvcc), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert parse_nvcc_version(out) == "12.4.131"
    assert out.startswith("nvcc: NVIDIA (R) Cuda compiler driver\n")
    bare = subprocess.run([str(nvcc)], capture_output=True, text=True, check=False)
    assert bare.returncode == 1
    assert "No input files" in bare.stderr


def test_cudnn_header_and_package_names_parse_to_the_pinned_version(
    repo: StubRepo, tmp_path: Path
) -> None:
    tree = extract(repo, "libcudnn9-dev-cuda-12", "9.1.0.70-1", tmp_path / "cudnn")
    header = tree / "usr/include/x86_64-linux-gnu/cudnn_version_v9.h"
    assert parse_cudnn_header(header.read_text()) == "9.1.0"
    postinst = (tree / "DEBIAN/postinst").read_text()
    assert (
        "update-alternatives --install /usr/include/cudnn_version.h cudnn_version_h "
        "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h 900"
    ) in postinst
    # What dpkg-query prints on a host with the packages installed.
    names = ("cudnn9-cuda-12", "libcudnn9-cuda-12", "libcudnn9-dev-cuda-12")
    listing = "".join(f"{name} 9.1.0.70-1\n" for name in names)
    assert parse_cudnn_packages(listing) == ("9.1.0", 12)


DKMS_PACKAGES = [
    ("debian12", "nvidia-kernel-open-dkms", "550.90.07-1"),
    ("debian12", "nvidia-kernel-dkms", "590.48.01-1"),
    ("ubuntu2404", "nvidia-dkms-550-open", "550.90.07-0ubuntu1"),
    ("ubuntu2404", "nvidia-dkms-550", "550.163.01-0ubuntu1"),
    ("ubuntu2404", "nvidia-dkms-open", "590.48.01-0ubuntu1"),
    ("ubuntu2404", "nvidia-dkms", "590.44.01-0ubuntu1"),
]


@pytest.mark.parametrize(("shape", "name", "version"), DKMS_PACKAGES)
def test_dkms_postinst_fails_only_where_the_marker_exists(
    shape: str, name: str, version: str, cache: Path, tmp_path: Path
) -> None:
    repo = build_repo(cache, stub_packages(KERNEL, shape))
    tree = extract(repo, name, version, tmp_path / "dkms")
    marker = tmp_path / "fail-install"
    script = tmp_path / "postinst"
    script.write_text(
        (tree / "DEBIAN/postinst").read_text().replace(FAIL_INSTALL_MARKER, str(marker))
    )
    assert (
        subprocess.run(
            ["sh", str(script), "configure"], capture_output=True, check=False
        ).returncode
        == 0
    )
    marker.touch()
    failed = subprocess.run(
        ["sh", str(script), "configure"], capture_output=True, text=True, check=False
    )
    assert failed.returncode == 1
    assert "Bad return status for module build" in failed.stderr


def test_cache_key_follows_the_content(repo: StubRepo, tmp_path: Path) -> None:
    packages = stub_packages(KERNEL)
    assert repo_key(packages) == repo_key(stub_packages(KERNEL))
    assert repo_key(packages) != repo_key(stub_packages("6.1.0-other-amd64"))
    assert repo_key(packages) != repo_key(stub_packages(KERNEL, "ubuntu2404"))
    assert repo_key(packages) != repo_key(packages, origin="Ubuntu")
    changed = [dataclasses.replace(packages[0], version="1.1-2"), *packages[1:]]
    assert repo_key(changed) != repo_key(packages)
    # A second build with the same content is the cached one: same key, same files.
    again = build_repo(repo.path.parent.parent, packages)
    assert again.fingerprint == repo.fingerprint
    assert again.path == repo.path


def get(server: RepoServer, path: str) -> tuple[int, bytes]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), int(port), timeout=5)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def test_server_refuses_the_unspecified_address_and_serves_loopback(repo: StubRepo) -> None:
    unspecified = str(ipaddress.IPv4Address(0))
    with pytest.raises(ValueError, match=r"0\.0\.0\.0"):
        RepoServer(repo.path, unspecified)
    with serve_repo(repo, "127.0.0.1") as server:
        assert server.url.startswith("http://127.0.0.1:")
        status, body = get(server, "/cuda-keyring_1.1-1_all.deb")
        assert status == 200
        assert body == (repo.path / "cuda-keyring_1.1-1_all.deb").read_bytes()
        assert get(server, "/cuda_12.4.1-1_amd64.deb")[0] == 404
        assert server.fetched("cuda-keyring_1.1-1_all.deb") == ["127.0.0.1"]
    with pytest.raises(ConnectionRefusedError):
        get(server, "/Release")


def apt(
    tmp_path: Path,
    keyring: str,
    url: str,
    *args: str,
    more: Sequence[tuple[str, str]] = (),
    preferences: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run apt against only the given repositories, in a private state directory.

    ``more``: further (keyring, url) repositories; ``preferences``: a directory of
    apt preferences files (none when None). Installs are simulated (``-s``)
    against an empty dpkg status.
    """
    state = tmp_path / "apt"
    (state / "lists/partial").mkdir(parents=True, exist_ok=True)
    (state / "cache/archives/partial").mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    sources = state / "sources.list"
    sources.write_text(
        "".join(f"deb [signed-by={key}] {where} /\n" for key, where in [(keyring, url), *more])
    )
    options = {
        "Dir::Etc::sourcelist": str(sources),
        "Dir::Etc::sourceparts": str(state / "none"),
        "Dir::Etc::preferences": str(state / "none"),
        "Dir::Etc::preferencesparts": str(preferences or state / "none"),
        "Dir::State::Lists": str(state / "lists"),
        "Dir::State::status": str(state / "status"),
        "Dir::Cache": str(state / "cache"),
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "APT::Architecture": "amd64",
        # As root apt fetches as _apt, which cannot read pytest's private tmp dirs.
        "APT::Sandbox::User": "root",
        "Debug::NoLocking": "1",
    }
    argv = [args[0]] + [f"-o{key}={value}" for key, value in options.items()] + list(args[1:])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_apt_verifies_the_repository_through_signed_by(repo: StubRepo, tmp_path: Path) -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get is not installed here")
    with serve_repo(repo, "127.0.0.1") as server:
        good = apt(tmp_path / "good", str(repo.keyring), server.url, "apt-get", "update")
        assert good.returncode == 0, good.stdout + good.stderr
        assert "W:" not in good.stderr, good.stderr
        assert "E:" not in good.stderr, good.stderr
        policy = apt(
            tmp_path / "good", str(repo.keyring), server.url, "apt-cache", "policy", "nvidia-open"
        )
        assert "590.48.01-1 500" in policy.stdout, policy.stdout
        assert "550.90.07-1 500" in policy.stdout, policy.stdout
        assert server.fetched("InRelease") == ["127.0.0.1"]
        # Any other key must make apt refuse the repository.
        other = tmp_path / "other.gpg"
        other.write_bytes(b"")
        bad = apt(tmp_path / "bad", str(other), server.url, "apt-get", "update")
        assert "is not signed" in bad.stderr or "NO_PUBKEY" in bad.stderr, bad.stderr


def pinning_file(repo: StubRepo, name: str, version: str, into: Path) -> Path:
    """The preferences directory of a pinning package, extracted into ``into``."""
    tree = extract(repo, name, version, into)
    return tree / "etc/apt/preferences.d"


def simulated(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """name -> version that ``apt-get -s install`` would unpack."""
    return dict(re.findall(r"^Inst (\S+) \((\S+) ", result.stdout, re.M))


@pytest.fixture
def served(
    repo: StubRepo, ubuntu_repo: StubRepo, archive_repo: StubRepo
) -> Iterator[dict[str, str]]:
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get is not installed here")
    with (
        serve_repo(repo, "127.0.0.1") as debian,
        serve_repo(ubuntu_repo, "127.0.0.1") as ubuntu,
        serve_repo(archive_repo, "127.0.0.1") as archive,
    ):
        yield {"debian12": debian.url, "ubuntu2404": ubuntu.url, "archive": archive.url}


def test_cuda_drivers_580_pulls_590_unless_the_pinning_package_is_there(
    repo: StubRepo, served: dict[str, str], tmp_path: Path
) -> None:
    # nvidia-packages.md pitfall 1, then its fix: nvidia-driver-pinning-580 first.
    url = served["debian12"]
    assert apt(tmp_path, str(repo.keyring), url, "apt-get", "update").returncode == 0
    loose = apt(tmp_path, str(repo.keyring), url, "apt-get", "-s", "install", "cuda-drivers-580")
    assert loose.returncode == 0, loose.stdout + loose.stderr
    assert simulated(loose)["nvidia-driver"] == "590.48.01-1"
    assert simulated(loose)["nvidia-kernel-dkms"] == "590.48.01-1"
    prefs = pinning_file(repo, "nvidia-driver-pinning-580", "580.105.08-1", tmp_path / "pin")
    assert (prefs / "nvidia-driver-pinning-580.pref").read_text().splitlines()[1:] == [
        "Pin: version 580.*",
        "Pin-Priority: 1000",
    ]
    pinned = apt(
        tmp_path,
        str(repo.keyring),
        url,
        "apt-get", "-s", "install", "cuda-drivers-580",
        preferences=prefs,
    )  # fmt: skip
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert simulated(pinned)["nvidia-driver"] == "580.105.08-1"
    assert simulated(pinned)["nvidia-kernel-dkms"] == "580.105.08-1"
    policy = apt(
        tmp_path, str(repo.keyring), url, "apt-cache", "policy", "nvidia-open", preferences=prefs
    )
    assert "Candidate: 580.105.08-1" in policy.stdout, policy.stdout


def test_ubuntu_pinning_packages_choose_branch_and_version(
    ubuntu_repo: StubRepo, served: dict[str, str], tmp_path: Path
) -> None:
    url = served["ubuntu2404"]
    key = str(ubuntu_repo.keyring)
    assert apt(tmp_path, key, url, "apt-get", "update").returncode == 0
    loose = apt(tmp_path, key, url, "apt-get", "-s", "install", "nvidia-open")
    assert simulated(loose)["nvidia-dkms-open"] == "590.48.01-0ubuntu1", loose.stdout
    exact_pin = pinning_file(
        ubuntu_repo, "nvidia-driver-pinning-590.44.01", "590.44.01-0ubuntu1", tmp_path / "pin"
    )
    pinned = apt(
        tmp_path, key, url, "apt-get", "-s", "install", "nvidia-open", preferences=exact_pin
    )
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert simulated(pinned)["nvidia-open"] == "590.44.01-0ubuntu1"
    assert simulated(pinned)["libnvidia-compute"] == "590.44.01-0ubuntu1"
    # cuda-drivers is branch-free in both eras: unpinned it jumps from 550 to 590.
    meta = apt(tmp_path, key, url, "apt-get", "-s", "install", "cuda-drivers")
    assert simulated(meta)["cuda-drivers"] == "590.48.01-1", meta.stdout


def test_canonical_archive_wins_where_the_pin_names_no_revision(
    ubuntu_repo: StubRepo, archive_repo: StubRepo, served: dict[str, str], tmp_path: Path
) -> None:
    key, url = str(ubuntu_repo.keyring), served["ubuntu2404"]
    more = [(str(archive_repo.keyring), served["archive"])]
    assert apt(tmp_path, key, url, "apt-get", "update", more=more).returncode == 0
    policy = apt(tmp_path, key, url, "apt-cache", "policy", "libnvidia-compute-550", more=more)
    # Three candidates from two repositories; the newest is NVIDIA's 550.163.01.
    for version in ("550.163.01-0ubuntu1", "550.163.01-0ubuntu0.24.04.1", "550.90.07-0ubuntu1"):
        assert f" {version} 500" in policy.stdout, policy.stdout
    assert "Candidate: 550.163.01-0ubuntu1" in policy.stdout
    # The server build only Canonical has, next to NVIDIA's name for the same driver.
    server = apt(
        tmp_path, key, url, "apt-get", "-s", "install", "nvidia-driver-550-server-open", more=more
    )
    assert simulated(server)["nvidia-driver-550-server-open"] == "550.163.01-0ubuntu0.24.04.1"


def test_dcgm_partial_pins_fail_and_a_whole_set_installs(
    repo: StubRepo, served: dict[str, str], tmp_path: Path
) -> None:
    # nvidia-packages.md pitfall 13: -cuda12 depends on the exact -core version.
    key, url = str(repo.keyring), served["debian12"]
    assert apt(tmp_path, key, url, "apt-get", "update").returncode == 0
    partial = apt(
        tmp_path, key, url, "apt-get", "-s", "install",
        "datacenter-gpu-manager-4-cuda12=1:4.4.1-1", "datacenter-gpu-manager-4-core=1:4.5.2-1",
    )  # fmt: skip
    assert partial.returncode != 0
    assert "datacenter-gpu-manager-4-core (= 1:4.4.1-1)" in partial.stdout + partial.stderr
    whole = apt(
        tmp_path, key, url, "apt-get", "-s", "install",
        "datacenter-gpu-manager-4-cuda12=1:4.4.1-1", "datacenter-gpu-manager-4-core=1:4.4.1-1",
        "datacenter-gpu-manager-4-proprietary=1:4.4.1-1",
    )  # fmt: skip
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert simulated(whole)["datacenter-gpu-manager-4-core"] == "1:4.4.1-1"
    nccl = apt(tmp_path, key, url, "apt-get", "-s", "install", "libnccl2=2.23.4-1")
    assert nccl.returncode != 0  # pitfall 15: the +cudaX.Y suffix is part of the version


# ---------------------------------------------------------------- against the reference

# Placeholders of the reference's package names (`cuda-drivers-<br>`, `-cuda<N>`, ...).
_PLACEHOLDERS = {
    "br": r"\d{3}",
    "branch": r"\d{3}",
    "ver": r"\d+\.\d+(?:\.\d+)?",
    "version": r"\d+\.\d+(?:\.\d+)?",
    "branch|version": r"(?:\d{3}|\d+\.\d+(?:\.\d+)?)",
    "M": r"\d+",
    "m": r"\d+",
    "N": r"\d+",
    # The 590 rename table's left column: "≤580 name", written with -580.
    "br-le-580": r"(?:[34]\d\d|5[0-7]\d|580)",
}
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.+-]|<[A-Za-z|.0-9-]+>)*")


def line_scope(line: str, section: str) -> str:
    """Which distribution a reference line speaks of: ``ubuntu``, ``debian`` or ``any``."""
    # Table rows (pitfalls too: "| 9 | Debian archive ..."), key facts and list items.
    lead = re.match(r"(?:\| (?:\d+ \| )?|\d\. \*\*|- )(Ubuntu|Debian)", line)
    if section in ("2a", "2b") or (lead and lead.group(1) == "Ubuntu"):
        return "ubuntu"
    if section == "2c" or (lead and lead.group(1) == "Debian"):
        return "debian"
    return "any"


def reference_names(text: str, scope: str = "") -> list[re.Pattern[str]]:
    """Every package name the reference document writes in backticks, as patterns.

    ``<br>``-style placeholders match what they stand for; a ``-suffix`` fragment
    (the DCGM row's ``-cuda12``) extends the name before it in the same row; the
    CUDA ``<M>-<m>`` component names (``cuda-nvcc-12-2``) match any CUDA release;
    in §2a's rename table, whose left column is headed "≤580 name", ``-580`` stands
    for any branch up to 580 (and only those: pitfall 2).

    ``scope`` (``ubuntu``/``debian``) leaves out the lines about the other
    distribution (§2a/§2b and §0's Ubuntu rows; §2c and §0's Debian rows).
    """
    patterns: list[re.Pattern[str]] = []
    renames = False
    section = ""
    other = {"ubuntu": "debian", "debian": "ubuntu"}.get(scope, "")
    for raw in text.splitlines():
        heading = re.match(r"#{2,3} (\d+[a-z]?)\.", raw)
        if heading:
            section = heading.group(1)
        if other and line_scope(raw, section) == other:
            continue
        if "do not exist" in raw:
            continue  # pitfall 2 names what is *not* there
        renames = ("| ≤580 name |" in raw) or (renames and raw.startswith("|"))
        line = raw.replace("-580", "-<br-le-580>") if renames else raw
        previous = ""
        for span in re.findall(r"`([^`]+)`", line):
            for word in re.split(r"[\s,;()]+", span):
                name = re.split(r"[=*:_]", word, maxsplit=1)[0].rstrip(".")
                if name.startswith("-") and previous:
                    name = previous.rsplit("-", 1)[0] + name
                if not _NAME.fullmatch(name):
                    continue
                if not name.startswith("-"):
                    previous = name
                # `cuda-nvcc-12-2` names a family: the CUDA release is part of the name.
                name = re.sub(r"^(cuda-[a-z-]+?)-\d+-\d+$", r"\1-<M>-<m>", name)
                regex = ""
                for part in re.split(r"(<[^>]+>)", name):
                    if part.startswith("<"):
                        regex += _PLACEHOLDERS.get(part[1:-1], r"[a-z0-9.+-]+")
                    else:
                        regex += re.escape(part)
                patterns.append(re.compile(regex))
    return patterns


# (package name pattern, version format, the §0 row it comes from), first match wins.
_COMMON_FORMATS = [
    (r"cuda-keyring", r"1\.1-1", "§1: cuda-keyring_1.1-1_all.deb"),
    (r"cuda-(toolkit|nvcc)-\d+-\d+|cuda-toolkit-config-common", r"\d+\.\d+\.\d+-1",
     "§0 CUDA toolkit (deb) <M.m.p>-1"),
    (r"(lib)?cudnn9.*", r"9\.\d+\.\d+\.\d+-1", "§0 cuDNN 9 (deb) <9.x.y.z>-1"),
    (r"libnccl.*", r"\d+\.\d+\.\d+-1\+cuda\d+\.\d+", "§0 NCCL (deb) <x.y.z>-1+cuda<M.m>"),
    (r"datacenter-gpu-manager-4-.*", r"1:4\.\d+\.\d+-1", "§0 DCGM 4 (deb) 1:<4.x.y>-1"),
    (r"(lib)?nvidia-container.*", r"\d+\.\d+\.\d+-1", "§0 nvidia-container-toolkit <x.y.z>-1"),
    (r"(nvidia-fabricmanager|libnvidia-nscq).*", r"\d{3}\.\d+\.\d+-1",
     "§0 Ubuntu/Debian, Fabric Manager / nscq <ver>-1"),
]  # fmt: skip
FORMATS: dict[str, list[tuple[str, str, str]]] = {
    "debian12": [
        *_COMMON_FORMATS,
        (r".*", r"\d{3}\.\d+\.\d+-1", "§0 Debian 12/13, CUDA repo <ver>-1"),
    ],
    "ubuntu2404": [
        *_COMMON_FORMATS,
        (r"cuda-drivers.*", r"\d{3}\.\d+\.\d+-1", "§0 Ubuntu, CUDA repo, cuda-drivers* <ver>-1"),
        (r"nvidia-driver-pinning-.*", r"\d{3}\.\d+\.\d+-0ubuntu1",
         "§0 Ubuntu, CUDA repo, pinning pkg <ver>-0ubuntu1"),
        (r".*", r"\d{3}\.\d+\.\d+-0ubuntu1", "§0 Ubuntu, CUDA repo, driver libs <ver>-0ubuntu1"),
    ],
    "archive": [
        (r".*", r"\d{3}\.\d+\.\d+-0ubuntu0\.\d\d\.\d\d\.\d+",
         "§0 Ubuntu, Canonical archive <ver>-0ubuntu0.<release>.N"),
    ],
}  # fmt: skip


PIN_VERSION = r"nvidia-driver-pinning-\d{3}\.\d+\.\d+"


@pytest.fixture(scope="module")
def reference_text() -> str:
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE} is not present (../shared beside the checkout)")
    return REFERENCE.read_text(encoding="utf-8")


def test_reference_patterns_read_the_documents_names(reference_text: str) -> None:
    # The reader itself: real names match, names the reference says do not exist do not.
    patterns = reference_names(reference_text)

    def known(name: str) -> bool:
        return any(p.fullmatch(name) for p in patterns)

    for name in (
        "nvidia-driver-550-open", "libnvidia-compute-550", "cuda-drivers-580", "nvidia-open",
        "nvidia-driver-pinning-590.48.01", "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-proprietary-cuda12", "cuda-nvcc-12-4", "libnccl-dev",
    ):  # fmt: skip
        assert known(name), name
    debian = reference_names(reference_text, "debian")
    ubuntu = reference_names(reference_text, "ubuntu")
    # The naming traps of §2c / pitfall 9: each distribution's name is not the other's.
    assert not any(p.fullmatch("nvidia-driver-550-open") for p in debian)
    assert not any(p.fullmatch("nvidia-kernel-open-dkms") for p in ubuntu)
    assert any(p.fullmatch("nvidia-kernel-open-dkms") for p in debian)
    assert any(p.fullmatch("nvidia-fabricmanager-550") for p in debian)  # §3: both
    for name in (
        "nvidia-driver-550-server", "nvidia-kernel-source-590", "nvidia-driver-cuda-550",
        "nvcc-12-4",
        "nvidia-dkms-590",
    ):  # fmt: skip
        assert not known(name), name


def stub_repositories() -> list[tuple[str, list[StubPackage]]]:
    return [
        ("debian12", stub_packages(KERNEL, "debian12")),
        ("ubuntu2404", stub_packages(KERNEL, "ubuntu2404")),
        ("archive", archive_packages("ubuntu2404")),
    ]


@pytest.mark.parametrize("kind", ["debian12", "ubuntu2404", "archive"])
def test_every_stub_name_and_version_comes_from_the_reference(
    kind: str, reference_text: str, cache: Path
) -> None:
    # Debian's stubs from what the reference says of Debian (and of every distro), not
    # from its Ubuntu sections, and the other way round.
    patterns = reference_names(reference_text, "debian" if kind == "debian12" else "ubuntu")
    packages = dict(stub_repositories())[kind]
    built = (
        build_archive("ubuntu2404", cache)
        if kind == "archive"
        else build_repo(cache, stub_packages(KERNEL, kind))
    )
    assert built is not None
    # What the built repository's index says, not what the data modules meant to build.
    index = [(e["Package"], e["Version"]) for e in stanzas((built.path / "Packages").read_text())]
    helpers = {p.name: p.description for p in packages if p.helper}
    assert set(helpers) <= {
        "dkms", f"linux-headers-{KERNEL}", f"linux-image-{KERNEL}",
        "linux-headers-amd64", "linux-image-amd64", "linux-headers-generic", "linux-image-generic",
    }  # fmt: skip
    assert all("stand-in" in why for why in helpers.values()), helpers
    # §2c names only the branch form for Debian; the exact-version form is §0's Ubuntu
    # row carried over (§7: the pinning packages' exact strings are unconfirmed).
    carried = {n for n, _ in index if kind == "debian12" and re.fullmatch(PIN_VERSION, n)}
    unknown = sorted(
        {name for name, _ in index if name not in helpers and name not in carried}
        - {name for name, _ in index if any(p.fullmatch(name) for p in patterns)}
    )
    assert not unknown, f"not in nvidia-packages.md: {unknown}"
    wrong = []
    for name, version in index:
        if name in helpers:
            continue
        for name_re, version_re, row in FORMATS[kind]:
            if re.fullmatch(name_re, name):
                if not re.fullmatch(version_re, version):
                    wrong.append(f"{name} {version} (want {row})")
                break
        else:
            wrong.append(f"{name} {version} (no format rule)")
    assert not wrong, wrong
