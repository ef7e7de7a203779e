"""Real NVIDIA software for the tests: Debian's non-free driver libraries and PyPI's CUDA wheels.

Nothing here is built, stubbed or faked. The packages are downloaded once, by name and
pinned version, into a cache (``GPUREADY_REALNV_CACHE``, default
``/var/cache/gpuready-realnv``), and unpacked there:

- from Debian 12's archive, through an apt configuration of the tests' own (the machine's
  sources name only ``main``; the driver's libraries are in ``non-free``), never the
  system's: ``libnvidia-ml1``, ``nvidia-smi`` and ``libcuda1`` (driver 535.261.03), and
  CUDA 11.8's runtime, cuBLAS and headers (``nvidia-cuda-dev``, for the bindings);
- from PyPI, with pip: the CUDA 12 runtime, cuBLAS, NCCL, cuDNN and NVML headers, and
  CUDA 13's nvcc, each wheel unpacked into one ``site-packages`` folder, laid out as pip
  installs them (``site-packages/nvidia/<part>/lib``), which a test puts on PYTHONPATH:
  an environment of its own, beside the test's.

A Debian package is unpacked with ``dpkg-deb -x`` (no maintainer script runs: these
are libraries and one binary). Each unpacked tree is made in a temporary folder and
renamed into place under a lock, so concurrent test workers fetch it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("GPUREADY_REALNV_CACHE", "/var/cache/gpuready-realnv"))
DEBIAN_MIRROR = os.environ.get("GPUREADY_REALNV_MIRROR", "http://deb.debian.org/debian")
DEBIAN_SUITE = "bookworm"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# Debian 12's driver (non-free, 535.261.03-1) and CUDA 11.8 (non-free, 11.8.0-5~deb12u1).
DRIVER = "535.261.03"
DEBIAN_DRIVER = {
    "libnvidia-ml1": "535.261.03-1",
    "nvidia-smi": "535.261.03-1",
    "libcuda1": "535.261.03-1",
}
DEBIAN_CUDA = {
    "libcudart11.0": "11.8.89~11.8.0-5~deb12u1",
    "libcublas11": "11.11.3.6~11.8.0-5~deb12u1",
    "libcublaslt11": "11.11.3.6~11.8.0-5~deb12u1",
    "libnvidia-ml-dev": "11.8.86~11.8.0-5~deb12u1",
    # nvcc 11.8: the real binary under /usr/lib/nvidia-cuda-toolkit, and /usr/bin/nvcc, a
    # shell wrapper that execs it
    "nvidia-cuda-toolkit": "11.8.89~11.8.0-5~deb12u1",
}
# nvidia-cuda-dev is 774 MB to download, once.
DEBIAN_CUDA_HEADERS = ("nvidia-cuda-dev", "11.8.89~11.8.0-5~deb12u1")
# Its headers, not its 2.8 GB of static libraries: those of /usr/include itself (each
# includes the next: cuda_fp16.h its .hpp), the compiler's crt/ and libcu++'s nv/.
CUDA_HEADER_NAMES = ("*.h", "*.hpp", "crt/*", "nv/*", "nv/detail/*")

# PyPI's wheels: name -> (version, what of it is unpacked; () for all of it).
WHEELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvidia-cuda-runtime-cu12": ("12.9.79", ()),
    # CUDA 13's runtime: newer than Debian's 535 driver (CUDA 12.2), which it refuses.
    "nvidia-cuda-runtime": ("13.5.37", ()),
    "nvidia-cublas-cu12": ("12.9.3.13", ()),
    "nvidia-nccl-cu12": ("2.32.3", ("nvidia/nccl/include/nccl.h", "nvidia/nccl/lib/libnccl.so.2")),
    # cuDNN's engines are 1.1 GB: the collector reads its header and finds its library.
    "nvidia-cudnn-cu12": ("9.28.0.42", ("nvidia/cudnn/include/", "nvidia/cudnn/lib/libcudnn.so.9")),
    "nvidia-cuda-nvcc": ("13.5.37", ()),
    # CUDA 12's compiler wheel: ptxas alone, and the crt/ headers cuda_runtime_api.h includes.
    "nvidia-cuda-nvcc-cu12": ("12.9.86", ()),
    # libcu++'s <nv/target>, which cuda_fp16.h (and so cublas_api.h) includes.
    "nvidia-cuda-cccl-cu12": ("12.9.27", ()),
    # NVML's newest header (CUDA 13): the pynvml the agent ships follows the newest driver.
    "nvidia-nvml-dev": ("13.4.92", ()),
}


class SoftwareUnavailable(RuntimeError):
    """The real software could not be fetched (no network to the registries, no dpkg)."""


@dataclass(frozen=True)
class DebianNvidia:
    """Debian's driver libraries and nvidia-smi, unpacked.

    Attributes:
        root: the unpacked tree (``usr/lib/x86_64-linux-gnu/nvidia/current/...``).
    """

    root: Path

    @property
    def lib_dir(self) -> Path:
        """Where libnvidia-ml.so.1 and libcuda.so.1 are (Debian's alternatives' target)."""
        return self.root / "usr/lib/x86_64-linux-gnu/nvidia/current"

    @property
    def nvidia_smi(self) -> Path:
        """The real nvidia-smi binary."""
        return self.root / "usr/lib/nvidia/current/nvidia-smi"


@dataclass(frozen=True)
class DebianCuda:
    """Debian's CUDA 11.8 runtime, cuBLAS and headers, unpacked."""

    root: Path

    @property
    def lib_dir(self) -> Path:
        """Where libcudart.so.11.0 and libcublas.so.11 are."""
        return self.root / "usr/lib/x86_64-linux-gnu"

    @property
    def include_dir(self) -> Path:
        """cuda_runtime_api.h, cublas_api.h, nvml.h and the rest."""
        return self.root / "usr/include"

    @property
    def nvcc_wrapper(self) -> Path:
        """/usr/bin/nvcc as Debian ships it: ``exec /usr/lib/nvidia-cuda-toolkit/bin/nvcc``."""
        return self.root / "usr/bin/nvcc"

    @property
    def nvcc(self) -> Path:
        """The real nvcc 11.8 binary."""
        return self.root / "usr/lib/nvidia-cuda-toolkit/bin/nvcc"


@dataclass(frozen=True)
class PypiCuda:
    """PyPI's CUDA wheels, unpacked as pip installs them."""

    site: Path  # ends in site-packages: the collectors look for nvidia/*/lib under it

    def part(self, name: str) -> Path:
        """``site-packages/nvidia/<name>`` (cuda_runtime, cublas, nccl, cudnn, cu13, ...)."""
        return self.site / "nvidia" / name


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "fetch.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: Sequence[str], what: str, timeout: float = 1800.0) -> None:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SoftwareUnavailable(f"{what}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SoftwareUnavailable(f"{what} failed ({done.returncode}): {' | '.join(tail)}")


def _ready(path: Path) -> bool:
    return (path / ".complete").is_file()


def _build(final: Path, make: Callable[[Path], None]) -> Path:
    """``final`` made by ``make(tmp)`` in a temporary folder beside it, renamed into place."""
    if _ready(final):
        return final
    with _locked(final.parent):
        if _ready(final):
            return final
        tmp = Path(tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=final.parent))
        try:
            make(tmp)
            (tmp / ".complete").write_text("", encoding="utf-8")
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---------------------------------------------------------------- Debian


def _apt_options(state: Path) -> list[str]:
    """apt's options for the tests' own configuration: non-free, lists and debs in ``state``."""
    return [
        f"-oDir::Etc::SourceList={state / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={state / 'lists'}",
        f"-oDir::Cache={state / 'cache'}",
        f"-oDir::Cache::Archives={state / 'debs'}",
        "-oAPT::Sandbox::User=root",  # the cache is root's: apt's _apt cannot write it
        "-qq",
    ]


def _debs(names: dict[str, str], cache: Path) -> list[Path]:
    """The pinned .debs, downloaded into the cache once (the lists fetched when needed)."""
    state = cache / "apt"
    debs = state / "debs"
    wanted = {name: debs / _deb_name(name, version) for name, version in names.items()}
    missing = {name: path for name, path in wanted.items() if not path.is_file()}
    if not missing:
        return list(wanted.values())
    with _locked(cache):
        for folder in ("lists/partial", "cache", "debs/partial"):
            (state / folder).mkdir(parents=True, exist_ok=True)
        (state / "sources.list").write_text(
            f"deb [signed-by={KEYRING}] {DEBIAN_MIRROR} {DEBIAN_SUITE} main contrib non-free\n",
            encoding="utf-8",
        )
        options = _apt_options(state)
        _run(["apt-get", *options, "update"], "apt-get update (Debian non-free)", 600)
        pins = [f"{name}={names[name]}" for name in missing]
        workdir = state / "debs"
        try:
            done = subprocess.run(
                ["apt-get", *options, "download", *pins],
                cwd=workdir, capture_output=True, text=True, timeout=1800, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SoftwareUnavailable(f"apt-get download: {exc}") from None
        if done.returncode != 0:
            raise SoftwareUnavailable(f"apt-get download {' '.join(pins)}: {done.stderr.strip()}")
    absent = [name for name, path in wanted.items() if not path.is_file()]
    if absent:
        raise SoftwareUnavailable(f"apt-get download gave no .deb for {', '.join(absent)}")
    return list(wanted.values())


def _deb_name(name: str, version: str) -> str:
    # apt-get download names the file with the version's ':' escaped, and '~' kept.
    return f"{name}_{version.replace(':', '%3a')}_amd64.deb"


def debian_nvidia(cache: Path = CACHE_DIR) -> DebianNvidia:
    """Debian's libnvidia-ml1, nvidia-smi and libcuda1, unpacked (fetched once).

    Raises:
        SoftwareUnavailable: they could not be fetched or unpacked.
    """
    debs = _debs(DEBIAN_DRIVER, cache)

    def unpack(tmp: Path) -> None:
        for deb in debs:
            _run(["dpkg-deb", "-x", str(deb), str(tmp)], f"dpkg-deb -x {deb.name}")

    final = cache / f"debian-driver-{_key(DEBIAN_DRIVER)}"
    return DebianNvidia(_build(final, unpack))


def debian_cuda(cache: Path = CACHE_DIR) -> DebianCuda:
    """Debian's CUDA 11.8 runtime, cuBLAS, NVML header and the CUDA headers, unpacked.

    Raises:
        SoftwareUnavailable: they could not be fetched or unpacked.
    """
    name, version = DEBIAN_CUDA_HEADERS
    debs = _debs({**DEBIAN_CUDA, name: version}, cache)
    headers = next(deb for deb in debs if deb.name.startswith(f"{name}_"))

    def unpack(tmp: Path) -> None:
        for deb in debs:
            if deb != headers:
                _run(["dpkg-deb", "-x", str(deb), str(tmp)], f"dpkg-deb -x {deb.name}")
        # Only the headers the bindings need, not 2.8 GB of static libraries.
        members = [f"./usr/include/{header}" for header in CUDA_HEADER_NAMES]
        fsys = subprocess.Popen(
            ["dpkg-deb", "--fsys-tarfile", str(headers)], stdout=subprocess.PIPE
        )
        try:
            _run_tar(fsys, tmp, members)
        finally:
            fsys.wait(timeout=600)

    final = cache / f"debian-cuda-{_key(DEBIAN_CUDA, DEBIAN_CUDA_HEADERS, CUDA_HEADER_NAMES)}"
    return DebianCuda(_build(final, unpack))


def _run_tar(fsys: subprocess.Popen[bytes], into: Path, members: Sequence[str]) -> None:
    done = subprocess.run(
        ["tar", "-x", "-C", str(into), "--wildcards", "--no-wildcards-match-slash", *members],
        stdin=fsys.stdout, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if not (into / "usr/include/cuda_runtime_api.h").is_file():
        raise SoftwareUnavailable(f"no CUDA header came out of nvidia-cuda-dev: {done.stderr}")


# ---------------------------------------------------------------- PyPI


def _wheel_files(folder: Path) -> dict[str, Path]:
    """The pinned wheels already in ``folder``, by name."""
    found = {}
    for name, (version, _) in WHEELS.items():
        match = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        if match:
            found[name] = match[0]
    return found


def _wheels(cache: Path) -> dict[str, Path]:
    """The pinned wheels, downloaded once with pip (from PyPI, or pip's own cache)."""
    folder = cache / "wheels"
    # Under the lock even to look: pip writes a wheel in place, and another test worker
    # must not see it half written.
    with _locked(cache):
        folder.mkdir(parents=True, exist_ok=True)
        missing = [f"{n}=={v}" for n, (v, _) in WHEELS.items() if n not in _wheel_files(folder)]
        if missing:
            _run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "-q", "-d", str(folder), *missing],
                f"pip download {' '.join(missing)}",
            )  # fmt: skip
    found = _wheel_files(folder)
    absent = sorted(set(WHEELS) - set(found))
    if absent:
        raise SoftwareUnavailable(f"pip download gave no wheel for {', '.join(absent)}")
    return found


def _unpacked_wheel(name: str, wheel: Path, cache: Path) -> Path:
    """One wheel unpacked on its own (once), as pip would lay it into site-packages."""
    keep = WHEELS[name][1]

    def unpack(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                # The .dist-info too: pip leaves it, and it names the CUDA major.
                wanted = not keep or ".dist-info/" in info.filename or any(
                    info.filename == k or (k.endswith("/") and info.filename.startswith(k))
                    for k in keep
                )
                if wanted:
                    archive.extract(info, tmp)
                    # zipfile keeps no modes: the binaries (nvcc) must run
                    mode = (info.external_attr >> 16) & 0o777
                    if mode:
                        os.chmod(tmp / info.filename, mode)

    return _build(cache / "unpacked" / f"{wheel.stem}-{_key(keep)}", unpack)


def _link_merged(source: Path, link: Path) -> None:
    """``link`` to ``source``; where two wheels share a folder (nvidia/cu13), their entries.

    pip merges such folders: so a link already there becomes a folder of links.
    """
    if not os.path.lexists(link):
        link.symlink_to(source)
        return
    if link.is_symlink():
        earlier = link.resolve()
        link.unlink()
        link.mkdir()
        for entry in earlier.iterdir():
            (link / entry.name).symlink_to(entry)
    for entry in source.iterdir():
        _link_merged(entry, link / entry.name)


def pypi_cuda(cache: Path = CACHE_DIR) -> PypiCuda:
    """PyPI's CUDA wheels in one site-packages folder, as pip installs them (fetched once).

    Each wheel is unpacked once on its own; the folder links each wheel's ``nvidia/<part>``
    and ``.dist-info`` into place, so adding a wheel unpacks only that one.

    Raises:
        SoftwareUnavailable: they could not be fetched.
    """
    unpacked = [_unpacked_wheel(name, wheel, cache) for name, wheel in _wheels(cache).items()]

    def assemble(tmp: Path) -> None:
        site = tmp / "site-packages"
        (site / "nvidia").mkdir(parents=True)
        for tree in unpacked:
            for entry in tree.iterdir():
                if entry.name.endswith(".dist-info"):
                    (site / entry.name).symlink_to(entry)
            for part in (tree / "nvidia").iterdir() if (tree / "nvidia").is_dir() else ():
                _link_merged(part, site / "nvidia" / part.name)

    final = cache / f"pypi-cuda-{_key(WHEELS, 2)}"
    return PypiCuda(_build(final, assemble) / "site-packages")


__all__ = [
    "CACHE_DIR",
    "DRIVER",
    "DebianCuda",
    "DebianNvidia",
    "PypiCuda",
    "SoftwareUnavailable",
    "debian_cuda",
    "debian_nvidia",
    "pypi_cuda",
]
