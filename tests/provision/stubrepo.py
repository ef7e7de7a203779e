"""A signed, flat apt repository of stub NVIDIA packages, and an HTTP server for it.

The provisioning tests point ``cuda_repository_url`` at this repository instead of
NVIDIA's. It has the layout of NVIDIA's ``compute/cuda/repos/<distro>/<arch>/``
repository: every ``.deb`` at the top next to ``Packages``, ``Packages.gz``,
``Release``, ``InRelease`` and ``Release.gpg``, so ``deb [signed-by=KEYRING] URL /``
works. The packages carry the real names and versions (several versions of the
driver and cuDNN, so that an unpinned install picks the wrong one) with
dependencies between them at exact versions, as the real ones have, but almost no
payload: an ``nvcc`` shell script printing the real ``--version`` text, the real
``cudnn_version.h`` defines, ``update-alternatives`` links as the real packages
make them.

Built with ``dpkg-deb`` and indexed with ``dpkg-scanpackages`` (package dpkg-dev);
the Release file is written here and signed with a throwaway ed25519 key made by
``gpg --batch`` in a temporary GNUPGHOME (package gpg; gpg-agent is started and
stopped by it). The ``cuda-keyring`` package ships that key's public keyring, as
the real one ships NVIDIA's, so the repository role's get_url/``apt: deb=``/
``signed-by`` chain is verified for real on the test hosts.

A repository is cached by a hash of what goes into it (:func:`repo_key`) under
``GPUREADY_STUBREPO_CACHE`` (default ``<tmp>/gpuready-stubrepo``), built into a
temporary directory and renamed into place under a lock.

Failing one host on purpose: the DKMS kernel-module packages
(``nvidia-kernel-open-dkms``, ``nvidia-kernel-dkms``) exit 1 from their postinst,
as a failed DKMS build does, when :data:`FAIL_INSTALL_MARKER` exists on the host.
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Bumped whenever the builder changes what it writes, so the cache key changes too.
BUILDER_VERSION = 1

CACHE_DIR = Path(
    os.environ.get("GPUREADY_STUBREPO_CACHE", Path(tempfile.gettempdir()) / "gpuready-stubrepo")
)

KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
NVIDIA_LIST_PATH = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
NVIDIA_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
FAIL_INSTALL_MARKER = "/etc/gpuready-fail-install"

DRIVER_BRANCH = "550"
DRIVER_VERSIONS = ("550.90.07", "550.127.05")
PINNING_BRANCH = "590"
PINNING_VERSION = "590.44.01"
CUDA_RELEASE = "12.4"
TOOLKIT_VERSION = "12.4.1"
NVCC_VERSION = "12.4.131"
CUDNN_VERSIONS = ("9.1.0.70", "9.2.0.82")
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# What ``nvcc --version`` of CUDA 12.4 Update 1 prints (its build line and date).
NVCC_VERSION_TEXT = f"""\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Mar_28_02:18:24_PDT_2024
Cuda compilation tools, release {CUDA_RELEASE}, V{NVCC_VERSION}
Build cuda_{CUDA_RELEASE}.r{CUDA_RELEASE}/compiler.34097967_0
"""

# Stands for the generated public keyring until the key exists (the cache key
# must not depend on a key that is made fresh for every build).
_KEYRING_PLACEHOLDER = b"@GPUREADY-STUB-KEYRING@"
_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_REQUIRED_TOOLS = ("dpkg-deb", "dpkg-scanpackages", "gpg", "gpgconf")


class StubRepoUnavailable(RuntimeError):
    """This machine lacks a tool needed to build the repository (tests skip)."""


class StubRepoError(RuntimeError):
    """Building or serving the repository failed."""


@dataclass(frozen=True)
class StubFile:
    """One file a stub package ships.

    Args:
        content: the bytes (or text) of the file.
        mode: its permission bits.
    """

    content: bytes | str
    mode: int = 0o644

    def data(self) -> bytes:
        """The content as bytes."""
        return self.content.encode() if isinstance(self.content, str) else self.content


@dataclass(frozen=True)
class StubPackage:
    """One binary package of the stub repository.

    Files under ``/etc`` are declared conffiles, as dpkg-deb expects.

    Args:
        name: the package name, e.g. ``nvidia-driver-550-open``.
        version: the Debian version, e.g. ``550.90.07-1``.
        architecture: ``amd64`` or ``all``.
        depends: the ``Depends`` entries, e.g. ``("libcudnn9-cuda-12 (= 9.1.0.70-1)",)``.
        description: one line for the control file.
        files: absolute path -> file.
        postinst: the postinst script, if any.
        prerm: the prerm script, if any.
    """

    name: str
    version: str
    architecture: str = "amd64"
    depends: tuple[str, ...] = ()
    description: str = ""
    files: Mapping[str, StubFile] = field(default_factory=dict)
    postinst: str | None = None
    prerm: str | None = None

    @property
    def filename(self) -> str:
        """The .deb's file name in the repository (``name_version_arch.deb``)."""
        return f"{self.name}_{self.version}_{self.architecture}.deb"

    def control(self) -> str:
        """The DEBIAN/control file."""
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            "Maintainer: gpuready tests <stub@gpuready.invalid>",
            "Section: multiverse/devel",
            "Priority: optional",
        ]
        if self.depends:
            lines.append("Depends: " + ", ".join(self.depends))
        summary = self.description or f"stub of {self.name}"
        lines.append(f"Description: {summary} (gpuready test stub)")
        return "\n".join(lines) + "\n"

    def fingerprint(self) -> dict[str, Any]:
        """Everything that goes into the .deb, for the cache key."""
        return {
            "control": self.control(),
            "files": {
                path: [hashlib.sha256(f.data()).hexdigest(), f.mode]
                for path, f in sorted(self.files.items())
            },
            "postinst": self.postinst,
            "prerm": self.prerm,
        }


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


# ---------------------------------------------------------------- the packages


def _sh(body: str) -> str:
    return "#!/bin/sh\nset -e\n" + body.strip() + "\n"


def _nvcc_script() -> str:
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --version|-V)\n"
        "    cat <<'EOF'\n" + NVCC_VERSION_TEXT + "EOF\n"
        "    ;;\n"
        "  *)\n"
        '    echo "nvcc fatal   : No input files specified; use option --help for more '
        'information" >&2\n'
        "    exit 1\n"
        "    ;;\n"
        "esac\n"
    )


def cudnn_header(version: str) -> str:
    """A cudnn_version.h for ``version`` (``9.1.0.70``), in the real header's format."""
    major, minor, patch = version.split(".")[:3]
    return (
        "/* cudnn_version.h: stub shipped by gpuready's test repository. */\n"
        "#ifndef CUDNN_VERSION_H_\n"
        "#define CUDNN_VERSION_H_\n\n"
        f"#define CUDNN_MAJOR {major}\n"
        f"#define CUDNN_MINOR {minor}\n"
        f"#define CUDNN_PATCHLEVEL {patch}\n\n"
        "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n\n"
        "#endif /* CUDNN_VERSION_H */\n"
    )


def _dkms_failure_postinst(module: str, version: str) -> str:
    # The one deliberate failure: a DKMS build that fails on the host that has the marker.
    return _sh(
        f"""
if [ "$1" = configure ] && [ -e {FAIL_INSTALL_MARKER} ]; then
    echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64)" >&2
    echo "Consult /var/lib/dkms/{module}/{version}/build/make.log for more information." >&2
    exit 1
fi
"""
    )


def _driver_packages(version: str) -> list[StubPackage]:
    deb = f"{version}-1"
    branch = DRIVER_BRANCH
    packages = []
    for module, flavour in (
        ("nvidia-kernel-open-dkms", "open"),
        ("nvidia-kernel-dkms", "proprietary"),
    ):
        packages.append(
            StubPackage(
                module,
                deb,
                depends=("dkms",),
                description=f"NVIDIA {flavour} kernel module sources (DKMS)",
                files={
                    f"/usr/src/nvidia-{version}/dkms.conf": StubFile(
                        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\n'
                    )
                },
                postinst=_dkms_failure_postinst("nvidia", version),
            )
        )
    userspace = {
        f"{LIBDIR}/libnvidia-ml.so.{version}": StubFile(f"stub libnvidia-ml {version}\n"),
        "/usr/bin/nvidia-persistenced": StubFile(_sh("exit 0"), 0o755),
    }
    packages += [
        StubPackage(
            f"nvidia-driver-{branch}-open",
            deb,
            depends=(f"nvidia-kernel-open-dkms (= {deb})",),
            description=f"NVIDIA driver {branch} branch, open kernel modules",
            files=userspace,
        ),
        StubPackage(
            f"cuda-drivers-{branch}",
            deb,
            depends=(f"nvidia-kernel-dkms (= {deb})",),
            description=f"NVIDIA driver {branch} branch, proprietary kernel modules",
            files=userspace,
        ),
        StubPackage(
            "nvidia-open",
            deb,
            depends=(f"nvidia-driver-{branch}-open (= {deb})",),
            description="NVIDIA driver, open kernel modules (meta)",
        ),
        StubPackage(
            "cuda-drivers",
            deb,
            depends=(f"cuda-drivers-{branch} (= {deb})",),
            description="NVIDIA driver, proprietary kernel modules (meta)",
        ),
        StubPackage(
            f"nvidia-fabricmanager-{branch}",
            deb,
            description="NVIDIA Fabric Manager",
            files={
                "/usr/bin/nv-fabricmanager": StubFile(
                    _sh(f'echo "Fabric Manager version is : {version}"'), 0o755
                ),
                "/lib/systemd/system/nvidia-fabricmanager.service": StubFile(
                    "[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\n"
                    "ExecStart=/usr/bin/nv-fabricmanager\n\n[Install]\nWantedBy=multi-user.target\n"
                ),
            },
        ),
    ]
    return packages


def _cudnn_packages(version: str) -> list[StubPackage]:
    deb = f"{version}-1"
    major = version.split(".", maxsplit=1)[0]
    header = f"/usr/include/x86_64-linux-gnu/cudnn_version_v{major}.h"
    return [
        StubPackage(
            "libcudnn9-cuda-12",
            deb,
            description="cuDNN runtime libraries for CUDA 12",
            files={f"{LIBDIR}/libcudnn.so.{version}": StubFile(f"stub libcudnn {version}\n")},
        ),
        StubPackage(
            "libcudnn9-dev-cuda-12",
            deb,
            depends=(f"libcudnn9-cuda-12 (= {deb})",),
            description="cuDNN development headers for CUDA 12",
            files={header: StubFile(cudnn_header(version))},
            # The real package publishes its header through update-alternatives as well.
            postinst=_sh(
                f"""
if [ "$1" = configure ]; then
    update-alternatives --install /usr/include/cudnn_version.h cudnn_version_h {header} {major}00
fi
"""
            ),
            prerm=_sh(
                f"""
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    update-alternatives --remove cudnn_version_h {header}
fi
"""
            ),
        ),
        StubPackage(
            "cudnn9-cuda-12",
            deb,
            depends=(f"libcudnn9-cuda-12 (= {deb})", f"libcudnn9-dev-cuda-12 (= {deb})"),
            description="cuDNN 9 for CUDA 12 (meta)",
        ),
    ]


def _toolkit_packages() -> list[StubPackage]:
    dashed = CUDA_RELEASE.replace(".", "-")
    prefix = f"/usr/local/cuda-{CUDA_RELEASE}"
    priority = CUDA_RELEASE.replace(".", "")
    major = CUDA_RELEASE.split(".", maxsplit=1)[0]
    return [
        StubPackage(
            f"cuda-nvcc-{dashed}",
            f"{NVCC_VERSION}-1",
            description=f"CUDA nvcc {CUDA_RELEASE}",
            files={f"{prefix}/bin/nvcc": StubFile(_nvcc_script(), 0o755)},
        ),
        StubPackage(
            f"cuda-toolkit-{dashed}-config-common",
            f"{CUDA_RELEASE}.127-1",
            architecture="all",
            description=f"CUDA {CUDA_RELEASE} links and library paths",
            files={
                f"/etc/ld.so.conf.d/988_cuda-{major}.conf": StubFile(
                    f"{prefix}/targets/x86_64-linux/lib\n"
                )
            },
            # /usr/local/cuda and /usr/local/cuda-12 are alternatives, as in the real packages.
            postinst=_sh(
                f"""
if [ "$1" = configure ]; then
    update-alternatives --install /usr/local/cuda cuda {prefix} {priority}
    update-alternatives --install /usr/local/cuda-{major} cuda-{major} {prefix} {priority}
fi
"""
            ),
            prerm=_sh(
                f"""
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    update-alternatives --remove cuda {prefix}
    update-alternatives --remove cuda-{major} {prefix}
fi
"""
            ),
        ),
        StubPackage(
            f"cuda-toolkit-{dashed}",
            f"{TOOLKIT_VERSION}-1",
            depends=(
                f"cuda-nvcc-{dashed} (>= {NVCC_VERSION})",
                f"cuda-toolkit-{dashed}-config-common",
            ),
            description=f"CUDA Toolkit {CUDA_RELEASE} (meta)",
        ),
    ]


def _support_packages(kernel_release: str) -> list[StubPackage]:
    # Debian packages the driver role asks for but a minbase chroot lacks, and the
    # test hosts cannot reach Debian's mirror: stubs stand in for them.
    return [
        StubPackage(
            "dkms",
            "3.0.10-8+gpuready1",
            architecture="all",
            description="Dynamic Kernel Module System",
            files={"/usr/sbin/dkms": StubFile(_sh('[ "$1" = status ] && exit 0; exit 0'), 0o755)},
        ),
        StubPackage(
            f"linux-headers-{kernel_release}",
            "1.0-1",
            description=f"kernel headers for {kernel_release}",
            files={f"/usr/src/linux-headers-{kernel_release}/Makefile": StubFile("# stub\n")},
        ),
    ]


def stub_packages(kernel_release: str | None = None) -> list[StubPackage]:
    """Every package of the stub repository.

    Args:
        kernel_release: the test hosts' kernel (``uname -r``; they share this
            machine's), for the ``linux-headers-<release>`` stub.

    Returns:
        The packages, the keyring's content still a placeholder.
    """
    release = kernel_release or os.uname().release
    keyring = StubPackage(
        "cuda-keyring",
        "1.1-1",
        architecture="all",
        description="GPG keyring for the CUDA repository",
        files={
            KEYRING_PATH: StubFile(_KEYRING_PLACEHOLDER),
            # The real keyring package also enables NVIDIA's own list; the
            # repository role must replace it with its own.
            NVIDIA_LIST_PATH: StubFile(f"deb [signed-by={KEYRING_PATH}] {NVIDIA_URL} /\n"),
        },
    )
    pinning = StubPackage(
        f"nvidia-driver-pinning-{PINNING_BRANCH}",
        f"{PINNING_VERSION}-1",
        architecture="all",
        description=f"pins the NVIDIA driver to the {PINNING_BRANCH} branch",
        files={
            f"/etc/apt/preferences.d/nvidia-driver-pinning-{PINNING_BRANCH}": StubFile(
                "Package: nvidia-open cuda-drivers nvidia-driver* nvidia-kernel* libnvidia*\n"
                f"Pin: version {PINNING_BRANCH}.*\nPin-Priority: 1000\n"
            )
        },
    )
    packages = [keyring, pinning]
    for version in DRIVER_VERSIONS:
        packages += _driver_packages(version)
    packages += _toolkit_packages()
    for version in CUDNN_VERSIONS:
        packages += _cudnn_packages(version)
    packages += _support_packages(release)
    return packages


# ---------------------------------------------------------------- building


def check_tools() -> None:
    """Raise :class:`StubRepoUnavailable` naming the missing build tools."""
    missing = [t for t in _REQUIRED_TOOLS if shutil.which(t, path=_ENV["PATH"]) is None]
    if missing:
        raise StubRepoUnavailable(
            f"the stub apt repository needs {', '.join(missing)} "
            "(apt-get install dpkg-dev gpg gpgconf gpg-agent)"
        )


def repo_key(packages: Sequence[StubPackage]) -> str:
    """The cache key of a repository: a hash of every package's content and the builder."""
    text = json.dumps([BUILDER_VERSION, [p.fingerprint() for p in packages]], sort_keys=True)
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


def _release_file(repo: Path, names: Sequence[str]) -> str:
    lines = [
        "Origin: gpuready stub CUDA repository",
        "Label: gpuready-stub",
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


def _make_key(gnupg: Path) -> str:
    env = {"GNUPGHOME": str(gnupg)}
    _run(
        [
            "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
            "--quick-generate-key", "gpuready stub CUDA repository <stub@gpuready.invalid>",
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


def _build_into(target: Path, packages: Sequence[StubPackage]) -> StubRepo:
    repo = target / "repo"
    repo.mkdir(parents=True)
    # A short path: gpg-agent's socket lives in GNUPGHOME and paths over 107 bytes fail.
    gnupg = Path(tempfile.mkdtemp(prefix="grt-gpg-"))
    try:
        gnupg.chmod(0o700)
        fingerprint = _make_key(gnupg)
        keyring_bytes = subprocess.run(
            ["gpg", "--batch", "--export", fingerprint],
            env={**_ENV, "GNUPGHOME": str(gnupg)},
            capture_output=True,
            check=True,
        ).stdout
        keyring = target / "cuda-archive-keyring.gpg"
        keyring.write_bytes(keyring_bytes)
        work = target / "work"
        for package in packages:
            files = {
                path: StubFile(keyring_bytes, stub.mode)
                if stub.content == _KEYRING_PLACEHOLDER
                else stub
                for path, stub in package.files.items()
            }
            build_deb(
                StubPackage(
                    package.name, package.version, package.architecture, package.depends,
                    package.description, files, package.postinst, package.prerm,
                ),
                repo,
                work,
            )  # fmt: skip
        shutil.rmtree(work)
        # --multiversion: the repository holds two versions of several packages.
        index = _run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo)
        (repo / "Packages").write_text(index, encoding="utf-8")
        with gzip.open(repo / "Packages.gz", "wb", compresslevel=9) as handle:
            handle.write(index.encode())
        (repo / "Release").write_text(
            _release_file(repo, ["Packages", "Packages.gz"]), encoding="utf-8"
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
    listing = [(p.name, p.version) for p in packages]
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
    cache_dir: Path | None = None, packages: Sequence[StubPackage] | None = None
) -> StubRepo:
    """The stub repository, built on first use and cached by :func:`repo_key`.

    Args:
        cache_dir: where repositories are cached (default :data:`CACHE_DIR`).
        packages: the packages (default :func:`stub_packages` for this machine's kernel).

    Raises:
        StubRepoUnavailable: a build tool is missing.
        StubRepoError: a build step failed.
    """
    cache = cache_dir or CACHE_DIR
    chosen = list(packages) if packages is not None else stub_packages()
    final = cache / f"repo-{repo_key(chosen)}"
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
            _build_into(tmp, chosen)
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
