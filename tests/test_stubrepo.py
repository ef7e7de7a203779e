"""The stub apt repository of the provisioning tests, without test hosts.

Builds it (dpkg-deb, dpkg-scanpackages, gpg), then checks its index, its
signature, the packages' payloads against the collector's own parsers, and a real
``apt-get update`` over HTTP on loopback with ``signed-by``.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.provision.stubrepo import (
    FAIL_INSTALL_MARKER,
    KEYRING_PATH,
    NVIDIA_LIST_PATH,
    NVIDIA_URL,
    RepoServer,
    StubRepo,
    StubRepoUnavailable,
    build_repo,
    check_tools,
    repo_key,
    serve_repo,
    stub_packages,
)
from validator.node.parsers.cudnn import parse_cudnn_header, parse_cudnn_packages
from validator.node.parsers.nvcc import parse_nvcc_version


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> StubRepo:
    try:
        check_tools()
    except StubRepoUnavailable as exc:
        pytest.skip(str(exc))
    return build_repo(tmp_path_factory.mktemp("stubrepo-cache"), stub_packages("6.1.0-test-amd64"))


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


def test_index_lists_every_package_and_version_with_matching_hashes(repo: StubRepo) -> None:
    index = stanzas((repo.path / "Packages").read_text())
    versions: dict[str, set[str]] = {}
    for entry in index:
        versions.setdefault(entry["Package"], set()).add(entry["Version"])
        deb = repo.path / entry["Filename"]
        assert deb.parent == repo.path  # flat: every .deb at the top, as NVIDIA's
        assert hashlib.sha256(deb.read_bytes()).hexdigest() == entry["SHA256"]
    assert versions["nvidia-driver-550-open"] == {"550.90.07-1", "550.127.05-1"}
    assert versions["cuda-drivers-550"] == {"550.90.07-1", "550.127.05-1"}
    assert versions["nvidia-fabricmanager-550"] == {"550.90.07-1", "550.127.05-1"}
    assert versions["cudnn9-cuda-12"] == {"9.1.0.70-1", "9.2.0.82-1"}
    assert versions["cuda-toolkit-12-4"] == {"12.4.1-1"}
    assert versions["cuda-keyring"] == {"1.1-1"}
    assert versions["nvidia-driver-pinning-590"] == {"590.44.01-1"}
    assert versions["linux-headers-6.1.0-test-amd64"] == {"1.0-1"}
    assert "cuda" not in versions  # the meta package the roles must never install
    (open_old,) = [
        e
        for e in index
        if e["Package"] == "nvidia-driver-550-open" and e["Version"] == "550.90.07-1"
    ]
    assert open_old["Depends"] == "nvidia-kernel-open-dkms (= 550.90.07-1)"
    assert (
        gzip.decompress((repo.path / "Packages.gz").read_bytes()).decode()
        == (repo.path / "Packages").read_text()
    )
    assert (repo.path / "cuda-keyring_1.1-1_all.deb").is_file()
    assert repo.versions("libcudnn9-cuda-12") == ["9.1.0.70-1", "9.2.0.82-1"]


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


def test_dkms_postinst_fails_only_where_the_marker_exists(repo: StubRepo, tmp_path: Path) -> None:
    tree = extract(repo, "nvidia-kernel-open-dkms", "550.90.07-1", tmp_path / "dkms")
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
    packages = stub_packages("6.1.0-test-amd64")
    assert repo_key(packages) == repo_key(stub_packages("6.1.0-test-amd64"))
    assert repo_key(packages) != repo_key(stub_packages("6.1.0-other-amd64"))
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


def apt(tmp_path: Path, keyring: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    state = tmp_path / "apt"
    (state / "lists/partial").mkdir(parents=True, exist_ok=True)
    (state / "cache/archives/partial").mkdir(parents=True, exist_ok=True)
    sources = state / "sources.list"
    sources.write_text(f"deb [signed-by={keyring}] {url} /\n")
    options = {
        "Dir::Etc::sourcelist": str(sources),
        "Dir::Etc::sourceparts": str(state / "none"),
        "Dir::Etc::preferencesparts": str(state / "none"),
        "Dir::State::Lists": str(state / "lists"),
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
            tmp_path / "good",
            str(repo.keyring),
            server.url,
            "apt-cache",
            "policy",
            "nvidia-driver-550-open",
        )
        assert "550.127.05-1 500" in policy.stdout, policy.stdout
        assert "550.90.07-1 500" in policy.stdout, policy.stdout
        assert server.fetched("InRelease") == ["127.0.0.1"]
        # Any other key must make apt refuse the repository.
        other = tmp_path / "other.gpg"
        other.write_bytes(b"")
        bad = apt(tmp_path / "bad", str(other), server.url, "apt-get", "update")
        assert "is not signed" in bad.stderr or "NO_PUBKEY" in bad.stderr, bad.stderr
