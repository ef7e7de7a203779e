"""Signed, flat apt repositories of stub NVIDIA packages, and an HTTP server for them.

The provisioning tests point ``cuda_repository_url`` at such a repository instead
of NVIDIA's. It has the layout of NVIDIA's ``compute/cuda/repos/<distro>/<arch>/``
repository: every ``.deb`` at the top next to ``Packages``, ``Packages.gz``,
``Release``, ``InRelease`` and ``Release.gpg``, so ``deb [signed-by=KEYRING] URL /``
works.

What is in it depends on the *shape* (:data:`SHAPES`): ``debian12`` (NVIDIA's
``debian12/x86_64`` repository), ``ubuntu2404`` / ``ubuntu2204`` (``ubuntu2404/x86_64``,
both driver naming eras), each a data module (:mod:`tests.provision.stubs_debian12`,
:mod:`tests.provision.stubs_ubuntu`, with :mod:`tests.provision.stubs_common`) whose
every entry names the row of ``../shared/reference/nvidia-packages.md`` it comes
from. The names, version strings and dependencies are NVIDIA's (several versions
per branch so that an unpinned install picks the wrong one and a raised pin
upgrades), the payload almost nothing: an ``nvcc`` printing the real ``--version``
text, the real ``cudnn_version.h`` defines, ``update-alternatives`` links as the
real packages make them, and the apt preferences file of each
``nvidia-driver-pinning-*`` package. Ubuntu shapes also have a competing
repository shaped like Canonical's archive (:func:`archive_packages`).

Built with ``dpkg-deb`` and indexed with ``dpkg-scanpackages`` (package dpkg-dev);
the Release file is written here and signed with a throwaway ed25519 key made by
``gpg --batch`` in a temporary GNUPGHOME (package gpg; gpg-agent is started and
stopped by it). The ``cuda-keyring`` package ships that key's public keyring, as
the real one ships NVIDIA's, so the repository role's get_url/``apt: deb=``/
``signed-by`` chain is verified for real on the test hosts.

A repository is cached by a hash of what goes into it (:func:`repo_key`) under
``GPUREADY_STUBREPO_CACHE`` (default ``<tmp>/gpuready-stubrepo``), built into a
temporary directory and renamed into place under a lock.

Failing one host on purpose: every DKMS kernel-module package exits 1 from its
postinst, as a failed DKMS build does, when :data:`FAIL_INSTALL_MARKER` exists on
the host; ``cuda-toolkit-config-common`` (the CUDA Toolkit role, after the driver's)
does when :data:`FAIL_TOOLKIT_MARKER` exists.
"""

from __future__ import annotations

import contextlib
import email.utils
import fcntl
import functools
import gzip
import hashlib
import http.server
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.provision import stubs_debian12, stubs_ubuntu
from tests.provision.stubpkg import (
    FAIL_INSTALL_MARKER,
    FAIL_TOOLKIT_MARKER,
    KEYRING_PATH,
    KEYRING_PLACEHOLDER,
    StubFile,
    StubPackage,
    nvidia_list_path,
    nvidia_url,
)
from tests.provision.stubs_common import (
    CUDA_RELEASE,
    CUDNN_VERSIONS,
    NVCC_VERSION,
    NVCC_VERSION_TEXT,
    TOOLKIT_VERSION,
    cudnn_header,
)

# Bumped whenever the builder changes what it writes, so the cache key changes too.
BUILDER_VERSION = 2

CACHE_DIR = Path(
    os.environ.get("GPUREADY_STUBREPO_CACHE", Path(tempfile.gettempdir()) / "gpuready-stubrepo")
)

# The Debian 12 shape's, for callers that know one shape only.
NVIDIA_LIST_PATH = nvidia_list_path("debian12")
NVIDIA_URL = nvidia_url("debian12")

_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_REQUIRED_TOOLS = ("dpkg-deb", "dpkg-scanpackages", "gpg", "gpgconf")

__all__ = [
    "CUDA_RELEASE",
    "CUDNN_VERSIONS",
    "FAIL_INSTALL_MARKER",
    "FAIL_TOOLKIT_MARKER",
    "KEYRING_PATH",
    "NVCC_VERSION",
    "NVCC_VERSION_TEXT",
    "NVIDIA_LIST_PATH",
    "NVIDIA_URL",
    "SHAPES",
    "TOOLKIT_VERSION",
    "RepoServer",
    "RepoShape",
    "StubFile",
    "StubPackage",
    "StubRepo",
    "StubRepoError",
    "StubRepoUnavailable",
    "archive_packages",
    "build_archive",
    "build_deb",
    "build_repo",
    "check_tools",
    "cudnn_header",
    "repo_key",
    "serve_repo",
    "stub_packages",
]


class StubRepoUnavailable(RuntimeError):
    """This machine lacks a tool needed to build the repository (tests skip)."""


class StubRepoError(RuntimeError):
    """Building or serving the repository failed."""


@dataclass(frozen=True)
class StubRepo:
    """A built repository.

    Attributes:
        path: the directory to serve (the repository's top).
        keyring: the public keyring (binary, ``gpg --export``) that signed it.
        fingerprint: the signing key's fingerprint.
        packages: (name, version) of every package in it.
    """

    path: Path
    keyring: Path
    fingerprint: str
    packages: tuple[tuple[str, str], ...]

    def versions(self, name: str) -> list[str]:
        """The versions of ``name`` the repository holds."""
        return [version for pkg, version in self.packages if pkg == name]


# ---------------------------------------------------------------- the shapes


@dataclass(frozen=True)
class RepoShape:
    """One distribution's NVIDIA repository, as the stubs model it.

    Attributes:
        name: the shape's name (``debian12``, ``ubuntu2404``, ``ubuntu2204``).
        distro: NVIDIA's directory name for it (``repos/<distro>/x86_64``).
        packages: the CUDA repository's packages for a kernel release.
        archive: the competing distribution archive's packages (None: none).
        archive_keyring: where that archive's keyring lies on a real host.
    """

    name: str
    distro: str
    packages: Callable[[str], list[StubPackage]]
    archive: Callable[[], list[StubPackage]] | None = None
    archive_keyring: str = ""

    @property
    def nvidia_url(self) -> str:
        """NVIDIA's URL of this repository (what the real keyring package lists)."""
        return nvidia_url(self.distro)

    @property
    def nvidia_list_path(self) -> str:
        """Where the real keyring package writes its list."""
        return nvidia_list_path(self.distro)


SHAPES: dict[str, RepoShape] = {
    "debian12": RepoShape("debian12", "debian12", stubs_debian12.packages),
    "ubuntu2404": RepoShape(
        "ubuntu2404",
        "ubuntu2404",
        functools.partial(stubs_ubuntu.packages, distro="ubuntu2404"),
        functools.partial(stubs_ubuntu.archive_packages, "24.04"),
        stubs_ubuntu.ARCHIVE_KEYRING_PATH,
    ),
    "ubuntu2204": RepoShape(
        "ubuntu2204",
        "ubuntu2204",
        functools.partial(stubs_ubuntu.packages, distro="ubuntu2204"),
        functools.partial(stubs_ubuntu.archive_packages, "22.04"),
        stubs_ubuntu.ARCHIVE_KEYRING_PATH,
    ),
}


def _shape(name: str) -> RepoShape:
    try:
        return SHAPES[name]
    except KeyError:
        known = ", ".join(sorted(SHAPES))
        raise ValueError(f"unknown stub repository shape {name!r}; one of {known}") from None


def stub_packages(kernel_release: str | None = None, shape: str = "debian12") -> list[StubPackage]:
    """Every package of one shape's stub CUDA repository.

    Args:
        kernel_release: the test hosts' kernel (``uname -r``; they share this
            machine's), for the kernel stand-ins.
        shape: a key of :data:`SHAPES`.

    Returns:
        The packages, the keyring's content still a placeholder.
    """
    return _shape(shape).packages(kernel_release or os.uname().release)


def archive_packages(shape: str) -> list[StubPackage]:
    """The packages of the shape's competing distribution archive ([] when it has none)."""
    archive = _shape(shape).archive
    return archive() if archive is not None else []


# ---------------------------------------------------------------- building


def check_tools() -> None:
    """Raise :class:`StubRepoUnavailable` naming the missing build tools."""
    missing = [t for t in _REQUIRED_TOOLS if shutil.which(t, path=_ENV["PATH"]) is None]
    if missing:
        raise StubRepoUnavailable(
            f"the stub apt repository needs {', '.join(missing)} "
            "(apt-get install dpkg-dev gpg gpgconf gpg-agent)"
        )


def repo_key(packages: Sequence[StubPackage], origin: str = "", debs: Sequence[Path] = ()) -> str:
    """The cache key of a repository: a hash of every package's content, origin and builder."""
    real = sorted((deb.name, deb.stat().st_size) for deb in debs)
    text = json.dumps(
        [BUILDER_VERSION, origin, [p.fingerprint() for p in packages], real], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(
    argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> str:
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        env={**_ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise StubRepoError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def build_deb(package: StubPackage, out_dir: Path, work: Path) -> Path:
    """Build one package with ``dpkg-deb``.

    Args:
        package: what to build.
        out_dir: where the .deb goes.
        work: a scratch directory for its tree.

    Returns:
        The .deb.
    """
    tree = work / f"{package.name}_{package.version}"
    control_dir = tree / "DEBIAN"
    control_dir.mkdir(parents=True)
    (control_dir / "control").write_text(package.control(), encoding="utf-8")
    conffiles = sorted(path for path in package.files if path.startswith("/etc/"))
    if conffiles:
        (control_dir / "conffiles").write_text(
            "".join(p + "\n" for p in conffiles), encoding="utf-8"
        )
    for script, body in (("postinst", package.postinst), ("prerm", package.prerm)):
        if body is not None:
            (control_dir / script).write_text(body, encoding="utf-8")
            (control_dir / script).chmod(0o755)
    for path, stub in package.files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(stub.data())
        target.chmod(stub.mode)
    for directory in [tree, *(p for p in tree.rglob("*") if p.is_dir() and p.name != "DEBIAN")]:
        directory.chmod(0o755)
    deb = out_dir / package.filename
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)])
    return deb


def _release_file(repo: Path, names: Sequence[str], origin: str) -> str:
    lines = [
        f"Origin: {origin}",
        f"Label: {origin}",
        "Architectures: amd64 all",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "Description: stub NVIDIA packages for gpuready's provisioning tests",
    ]
    for title, algorithm in (
        ("MD5Sum", "md5"),
        ("SHA1", "sha1"),
        ("SHA256", "sha256"),
        ("SHA512", "sha512"),
    ):
        lines.append(f"{title}:")
        for name in names:
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>16} {name}")
    return "\n".join(lines) + "\n"


def make_key(gnupg: Path, user_id: str = "gpuready stub CUDA repository") -> str:
    """A throwaway ed25519 signing key in ``gnupg``; its fingerprint (the rpm stubs' too)."""
    env = {"GNUPGHOME": str(gnupg)}
    _run(
        [
            "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
            "--quick-generate-key", f"{user_id} <stub@gpuready.invalid>",
            "ed25519", "sign", "never",
        ],
        env=env,
    )  # fmt: skip
    listing = _run(["gpg", "--batch", "--with-colons", "--list-secret-keys"], env=env)
    fingerprints = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
    if not fingerprints:
        raise StubRepoError("gpg made no key")
    return fingerprints[0]


def _sign(gnupg: Path, fingerprint: str, repo: Path) -> None:
    env = {"GNUPGHOME": str(gnupg)}
    base = ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
    base += ["--local-user", fingerprint, "--digest-algo", "SHA512"]
    release = str(repo / "Release")
    _run([*base, "--clearsign", "--output", str(repo / "InRelease"), release], env=env)
    _run(
        [*base, "--armor", "--detach-sign", "--output", str(repo / "Release.gpg"), release], env=env
    )


def _build_into(
    target: Path, packages: Sequence[StubPackage], origin: str, debs: Sequence[Path] = ()
) -> StubRepo:
    repo = target / "repo"
    repo.mkdir(parents=True)
    for deb in debs:
        shutil.copyfile(deb, repo / deb.name)
    # A short path: gpg-agent's socket lives in GNUPGHOME and paths over 107 bytes fail.
    gnupg = Path(tempfile.mkdtemp(prefix="grt-gpg-"))
    try:
        gnupg.chmod(0o700)
        fingerprint = make_key(gnupg)
        keyring_bytes = subprocess.run(
            ["gpg", "--batch", "--export", fingerprint],
            env={**_ENV, "GNUPGHOME": str(gnupg)},
            capture_output=True,
            check=True,
        ).stdout
        keyring = target / "cuda-archive-keyring.gpg"
        keyring.write_bytes(keyring_bytes)
        work = target / "work"

        def build(package: StubPackage) -> Path:
            files = {
                path: StubFile(keyring_bytes, stub.mode)
                if stub.content == KEYRING_PLACEHOLDER
                else stub
                for path, stub in package.files.items()
            }
            return build_deb(replace(package, files=files), repo, work)

        # A few hundred tiny packages: dpkg-deb's start-up is the cost, so run some at once.
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(build, packages))
        shutil.rmtree(work)
        # --multiversion: the repository holds two versions of several packages.
        index = _run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo)
        (repo / "Packages").write_text(index, encoding="utf-8")
        with gzip.open(repo / "Packages.gz", "wb", compresslevel=9) as handle:
            handle.write(index.encode())
        (repo / "Release").write_text(
            _release_file(repo, ["Packages", "Packages.gz"], origin), encoding="utf-8"
        )
        _sign(gnupg, fingerprint, repo)
    finally:
        subprocess.run(
            ["gpgconf", "--kill", "all"],
            env={**_ENV, "GNUPGHOME": str(gnupg)},
            capture_output=True,
            check=False,
        )
        shutil.rmtree(gnupg, ignore_errors=True)
    # A real .deb's name is name_version_arch (an epoch's ':' escaped as %3a).
    real = [deb.name.replace("%3a", ":").split("_") for deb in debs]
    listing = [(p.name, p.version) for p in packages] + [(parts[0], parts[1]) for parts in real]
    (target / "manifest.json").write_text(
        json.dumps({"fingerprint": fingerprint, "packages": listing}, indent=1), encoding="utf-8"
    )
    return StubRepo(repo, keyring, fingerprint, tuple(listing))


def _load(target: Path) -> StubRepo | None:
    try:
        manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return StubRepo(
        target / "repo",
        target / "cuda-archive-keyring.gpg",
        str(manifest["fingerprint"]),
        tuple((str(name), str(version)) for name, version in manifest["packages"]),
    )


def build_repo(
    cache_dir: Path | None = None,
    packages: Sequence[StubPackage] | None = None,
    *,
    shape: str = "debian12",
    origin: str = "gpuready stub CUDA repository",
    debs: Sequence[Path] = (),
) -> StubRepo:
    """A stub repository, built on first use and cached by :func:`repo_key`.

    Args:
        cache_dir: where repositories are cached (default :data:`CACHE_DIR`).
        packages: the packages (default :func:`stub_packages` of ``shape`` for this
            machine's kernel).
        shape: a key of :data:`SHAPES`, when ``packages`` is not given.
        origin: the Release file's Origin and Label.
        debs: real packages (.deb files) served beside the stubs, as they are.

    Raises:
        StubRepoUnavailable: a build tool is missing.
        StubRepoError: a build step failed.
    """
    cache = cache_dir or CACHE_DIR
    chosen = list(packages) if packages is not None else stub_packages(shape=shape)
    final = cache / f"repo-{repo_key(chosen, origin, debs)}"
    ready = _load(final)
    if ready is not None:
        return ready
    check_tools()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = _load(final)
        if ready is not None:
            return ready
        tmp = cache / f"{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build_into(tmp, chosen, origin, debs)
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    built = _load(final)
    if built is None:
        raise StubRepoError(f"{final} has no manifest after the build")
    # The served tree must be readable by whoever serves it, whatever the umask.
    for path in [final, *final.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return built


def build_archive(shape: str, cache_dir: Path | None = None) -> StubRepo | None:
    """The shape's competing distribution archive (Canonical's for Ubuntu), or None.

    A second repository with its own key, offering some of the same package names
    at other versions, so that the roles' pins must choose between repositories.
    """
    packages = archive_packages(shape)
    if not packages:
        return None
    return build_repo(cache_dir, packages, origin="Ubuntu")


# ---------------------------------------------------------------- serving


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files; records each request on the server instead of logging to stderr."""

    server: RepoServer

    def log_message(self, format: str, *args: Any) -> None:
        del format
        with self.server.requests_lock:
            self.server.requests.append(
                (self.client_address[0], self.path, str(args[1]) if len(args) > 1 else "")
            )


class RepoServer(http.server.ThreadingHTTPServer):
    """An HTTP server for one directory, on one address, on an ephemeral port.

    A context manager: entering starts it in a thread, leaving stops it. It
    refuses the unspecified address (``0.0.0.0``/``::``): the repository is
    meant for the test hosts' bridge or loopback only.

    Attributes:
        requests: (client address, path, status) of every request, in order.

    Args:
        directory: what to serve.
        address: the address to bind, e.g. the test network's bridge address.
    """

    daemon_threads = True

    def __init__(self, directory: Path, address: str) -> None:
        if ipaddress.ip_address(address).is_unspecified:
            raise ValueError(f"refusing to serve the stub repository on {address}")
        self.requests: list[tuple[str, str, str]] = []
        self.requests_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        handler = functools.partial(_QuietHandler, directory=str(directory))
        super().__init__((address, 0), handler)

    @property
    def url(self) -> str:
        """The repository's base URL, without a trailing slash."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> RepoServer:
        self._thread = threading.Thread(
            target=self.serve_forever, name="stub-apt-repo", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def fetched(self, name: str) -> list[str]:
        """The clients that fetched ``/name`` successfully (status 200)."""
        with self.requests_lock:
            return [
                client
                for client, path, status in self.requests
                if path == f"/{name}" and status == "200"
            ]


@contextlib.contextmanager
def serve_repo(repo: StubRepo, address: str) -> Iterator[RepoServer]:
    """Serve ``repo`` on ``address`` (an ephemeral port) for the ``with`` block.

    Args:
        repo: the repository.
        address: the address to bind; never the unspecified address.

    Yields:
        The running server; ``.url`` is the repository URL.
    """
    with RepoServer(repo.path, address) as server:
        yield server
