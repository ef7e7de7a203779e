"""Stub packages of NVIDIA's CUDA repository for Ubuntu (``repos/ubuntu2404/x86_64/``),
and of Canonical's archive competing with it.

Names and versions from nvidia-packages.md, never from the roles:

* §0: driver libraries and modules ``<ver>-0ubuntu1``; ``cuda-drivers*`` metas
  ``<ver>-1``; the pinning package ``nvidia-driver-pinning-<ver>=<ver>-0ubuntu1``;
  Fabric Manager / NSCQ ``<ver>-1``.
* §2a: branch 550 carries the branch in every name (the full 550-open list of
  idx:65933029383); from 590 the names drop it (the 590.48.01 system of
  idx:53096049030), and the branch or version is locked by installing
  ``nvidia-driver-pinning-<br>`` / ``-<ver>`` first.
* §2b / §0 "Canonical archive": ``<ver>-0ubuntu0.<release>.N``, the same library
  names (and ``-server`` builds) from another repository, which apt offers too.
"""

from __future__ import annotations

from tests.provision import stubs_common
from tests.provision.stubpkg import (
    StubFile,
    StubPackage,
    dkms_failure_postinst,
    dkms_source,
    dkms_stand_in,
    exact,
    fabricmanager,
    kernel_stand_ins,
    keyring,
    library,
    nvidia_smi,
    persistenced,
    pinning_preferences,
)

# §2a 535/550 row: `nvidia-driver-550-open ... all =550.163.01-0ubuntu1` (idx:65933029383);
# §0: `cuda-drivers-550=550.90.07-1` (idx:37605553662).
BRANCH_550_VERSIONS = ("550.90.07", "550.163.01")
# §5: CUDA 13.1 GA 590.44.01, Update 1 590.48.01; §0: `nvidia-open=590.48.01-0ubuntu1`.
BRANCH_590_VERSIONS = ("590.44.01", "590.48.01")
DRIVER_VERSIONS = BRANCH_550_VERSIONS + BRANCH_590_VERSIONS
REVISION = "0ubuntu1"  # §0 Ubuntu, CUDA repo, driver libs/modules
META_REVISION = "1"  # §0 Ubuntu, CUDA repo, `cuda-drivers*` meta
FM_REVISION = "1"  # §0 Ubuntu/Debian, Fabric Manager / nscq / imex
KERNEL_META = "generic"
# §0 Canonical archive: `nvidia-headless-no-dkms-535-open 535.183.01-0ubuntu0.24.04.1`.
ARCHIVE_VERSION = "550.163.01"
ARCHIVE_KEYRING_PATH = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"

# §2a 550-open list (idx:65933029383) minus the two that keep no branch in the name.
_SUFFIXED_550 = (
    "libnvidia-cfg1",
    "libnvidia-common",
    "libnvidia-compute",
    "libnvidia-decode",
    "libnvidia-encode",
    "libnvidia-extra",
    "libnvidia-fbc1",
    "libnvidia-gl",
    "nvidia-compute-utils",
    "nvidia-kernel-common",
    "nvidia-utils",
    "xserver-xorg-video-nvidia",
)
# §2a 550-open list: branch-free names even at 550.
_UNSUFFIXED_550 = ("nvidia-modprobe", "nvidia-settings", "libxnvctrl0")
# §2a rename table, 590.48.01 system (idx:53096049030), all `=590.48.01-0ubuntu1`.
_NAMES_590 = (
    "nvidia-kernel-common",
    "nvidia-firmware",
    "nvidia-modprobe",
    "nvidia-persistenced",
    "nvidia-settings",
    "libnvidia-gl",
    "libnvidia-compute",
    "libnvidia-decode",
    "libnvidia-encode",
    "libnvidia-fbc1",
    "libnvidia-extra",
    "libnvidia-cfg1",
    "libnvidia-gpucomp",
    "xserver-xorg-video-nvidia",
    "libnvidia-common",
)


def _branch(version: str) -> str:
    return version.split(".", maxsplit=1)[0]


def _payload(name: str, version: str) -> dict[str, StubFile]:
    # The few files a test or role looks at; everything else is an empty package.
    if name.startswith("libnvidia-compute"):
        return {**library("libnvidia-ml.so", version), **library("libcuda.so", version)}
    if name.startswith("nvidia-utils"):
        return nvidia_smi(version)
    if name.startswith(("nvidia-compute-utils", "nvidia-persistenced")):
        return persistenced()
    return {}


def _plain(name: str, version: str, depends: tuple[str, ...] = ()) -> StubPackage:
    return StubPackage(
        name,
        version,
        depends=depends,
        description=f"NVIDIA driver component {name}",
        files=_payload(name, version),
    )


def branch_550(version: str) -> list[StubPackage]:
    """Branch 550 (branch in the name), one driver version."""
    deb = f"{version}-{REVISION}"
    br = _branch(version)
    packages = [_plain(f"{name}-{br}", deb) for name in _SUFFIXED_550]
    packages += [_plain(name, deb) for name in _UNSUFFIXED_550]
    packages += [
        # §2a 535/550 open, full: `nvidia-driver-<br>-open` (pulls `nvidia-dkms-<br>-open`,
        # `nvidia-kernel-source-<br>-open`); the rest of idx:65933029383's list at `=`.
        StubPackage(
            f"nvidia-driver-{br}-open",
            deb,
            depends=(
                exact(f"nvidia-dkms-{br}-open", deb),
                exact(f"nvidia-kernel-source-{br}-open", deb),
                *(exact(f"{name}-{br}", deb) for name in _SUFFIXED_550),
                *(exact(name, deb) for name in _UNSUFFIXED_550),
            ),
            description=f"NVIDIA driver {br} branch, open kernel modules (full)",
        ),
        # §2a 535/550 list: `nvidia-kernel-source-550-open`.
        _plain(f"nvidia-kernel-source-{br}-open", deb),
        # §2a 535/550 list / compute-only: `nvidia-dkms-<br>-open`.
        StubPackage(
            f"nvidia-dkms-{br}-open",
            deb,
            depends=(
                "dkms",
                exact(f"nvidia-kernel-common-{br}", deb),
                exact(f"nvidia-kernel-source-{br}-open", deb),
            ),
            description=f"NVIDIA {br} open kernel module sources (DKMS)",
            files=dkms_source(version),
            postinst=dkms_failure_postinst("nvidia", version),
        ),
        # §2a 535/550 proprietary, full: `nvidia-driver-<br>` (idx:37605553662).
        StubPackage(
            f"nvidia-driver-{br}",
            deb,
            depends=(
                exact(f"nvidia-dkms-{br}", deb),
                exact(f"libnvidia-compute-{br}", deb),
                exact(f"nvidia-utils-{br}", deb),
                exact(f"nvidia-kernel-common-{br}", deb),
            ),
            description=f"NVIDIA driver {br} branch, proprietary kernel modules (full)",
        ),
        # §2b rename table / §2a: `nvidia-dkms-<br>` (proprietary DKMS).
        StubPackage(
            f"nvidia-dkms-{br}",
            deb,
            depends=("dkms", exact(f"nvidia-kernel-common-{br}", deb)),
            description=f"NVIDIA {br} proprietary kernel module sources (DKMS)",
            files=dkms_source(version),
            postinst=dkms_failure_postinst("nvidia", version),
        ),
        # §0 Ubuntu `cuda-drivers*` meta `<ver>-1`: `cuda-drivers-550=550.90.07-1`; pitfall 1:
        # `>=` dependencies only.
        StubPackage(
            f"cuda-drivers-{br}",
            f"{version}-{META_REVISION}",
            depends=(f"nvidia-driver-{br} (>= {version})",),
            description=f"NVIDIA driver {br} branch (meta)",
        ),
        # §0: `cuda-drivers=550.90.07-1`.
        StubPackage(
            "cuda-drivers",
            f"{version}-{META_REVISION}",
            depends=(f"cuda-drivers-{br} (>= {version})",),
            description="NVIDIA driver, newest branch (meta)",
        ),
    ]
    packages += fabric(version)
    return packages


def branch_590(version: str) -> list[StubPackage]:
    """Branch 590 (branch-free names), one driver version."""
    deb = f"{version}-{REVISION}"
    packages = [_plain(name, deb) for name in _NAMES_590]
    packages += [
        # §2a >= 590 open: `nvidia-open` (meta, the driver at `=`); idx:53096049030.
        StubPackage(
            "nvidia-open",
            deb,
            depends=(exact("nvidia-driver-open", deb),),
            description="NVIDIA driver, open kernel modules (meta)",
        ),
        # §2a rename table: `nvidia-driver-580-open` -> `nvidia-driver-open` (idx:53096049030).
        StubPackage(
            "nvidia-driver-open",
            deb,
            depends=(
                exact("nvidia-dkms-open", deb),
                exact("nvidia-kernel-source-open", deb),
                *(exact(name, deb) for name in _NAMES_590),
            ),
            description="NVIDIA driver, open kernel modules (full)",
        ),
        # §2a rename table: `nvidia-kernel-source-580-open` -> `nvidia-kernel-source-open`.
        _plain("nvidia-kernel-source-open", deb),
        # §2a >= 590 compute-only open: `libnvidia-compute nvidia-dkms-open`.
        StubPackage(
            "nvidia-dkms-open",
            deb,
            depends=(
                "dkms",
                exact("nvidia-kernel-common", deb),
                exact("nvidia-kernel-source-open", deb),
            ),
            description="NVIDIA open kernel module sources (DKMS)",
            files=dkms_source(version),
            postinst=dkms_failure_postinst("nvidia", version),
        ),
        # §2a >= 590 compute-only proprietary: `libnvidia-compute nvidia-dkms`.
        StubPackage(
            "nvidia-dkms",
            deb,
            depends=("dkms", exact("nvidia-kernel-common", deb)),
            description="NVIDIA proprietary kernel module sources (DKMS)",
            files=dkms_source(version),
            postinst=dkms_failure_postinst("nvidia", version),
        ),
        # §2a >= 590 proprietary: `cuda-drivers` (rename table: unchanged); `>=` as pitfall 1.
        StubPackage(
            "cuda-drivers",
            f"{version}-{META_REVISION}",
            depends=(f"libnvidia-compute (>= {version})", f"nvidia-dkms (>= {version})"),
            description="NVIDIA driver, proprietary kernel modules (meta)",
        ),
    ]
    packages += fabric(version)
    return packages


def fabric(version: str) -> list[StubPackage]:
    """Fabric Manager and NSCQ (§3: branch in the name below 580, none from 580)."""
    deb = f"{version}-{FM_REVISION}"
    suffix = f"-{_branch(version)}" if int(_branch(version)) < 580 else ""
    return [
        # §3 Fabric Manager: `nvidia-fabricmanager-<br>=<ver>-1` / `nvidia-fabricmanager=<ver>*`.
        StubPackage(
            f"nvidia-fabricmanager{suffix}",
            deb,
            description="NVIDIA Fabric Manager",
            files=fabricmanager(version),
        ),
        # §3 Fabric Manager: `+nvidia-fabricmanager-dev-<br>` / `nvidia-fabricmanager-dev=<ver>*`.
        StubPackage(
            f"nvidia-fabricmanager-dev{suffix}",
            deb,
            depends=(exact(f"nvidia-fabricmanager{suffix}", deb),),
            description="NVIDIA Fabric Manager development files",
        ),
        # §3 NSCQ: `libnvidia-nscq-<br>=<ver>-1` / `libnvidia-nscq=<ver>*`.
        StubPackage(
            f"libnvidia-nscq{suffix}",
            deb,
            description="NVIDIA NVSwitch configuration and query library",
            files=library("libnvidia-nscq.so", version),
        ),
    ]


def driver(version: str) -> list[StubPackage]:
    """Every package of one driver version, in its branch's naming."""
    return branch_550(version) if int(_branch(version)) < 590 else branch_590(version)


def pinning() -> list[StubPackage]:
    """``nvidia-driver-pinning-590`` and ``nvidia-driver-pinning-<590 version>``.

    §0 Ubuntu pinning package (590+): `nvidia-driver-pinning-590.48.01=590.48.01-0ubuntu1`
    (idx:67666954195); §2a >= 590 lock: `nvidia-driver-pinning-<br>` first. Each ships an
    apt preferences file pinning its branch (`590.*`) or version (`<ver>-*`).
    """
    result: list[StubPackage] = []
    names_590: set[str] = set()
    for version in BRANCH_590_VERSIONS:
        names = [p.name for p in driver(version)]
        names_590.update(names)
        name = f"nvidia-driver-pinning-{version}"
        result.append(
            StubPackage(
                name,
                f"{version}-{REVISION}",
                architecture="all",
                description=f"pins the NVIDIA driver to {version}",
                files=pinning_preferences(name, names, f"{version}-*"),
            )
        )
    newest = BRANCH_590_VERSIONS[-1]
    result.append(
        StubPackage(
            "nvidia-driver-pinning-590",
            # §7: the branch package's exact version string is unconfirmed; the branch's newest.
            f"{newest}-{REVISION}",
            architecture="all",
            description="pins the NVIDIA driver to the 590 branch",
            files=pinning_preferences("nvidia-driver-pinning-590", names_590, "590.*"),
        )
    )
    return result


def packages(kernel_release: str, distro: str = "ubuntu2404") -> list[StubPackage]:
    """Every package of the Ubuntu stub CUDA repository.

    Args:
        kernel_release: the hosts' ``uname -r``, for the kernel stand-ins.
        distro: ``ubuntu2404`` or ``ubuntu2204`` (the keyring's list names it).
    """
    result = keyring(distro) + pinning()
    for version in DRIVER_VERSIONS:
        result += driver(version)
    result += stubs_common.cuda_libraries()
    result += [dkms_stand_in(), *kernel_stand_ins(kernel_release, KERNEL_META)]
    return result


def archive_packages(release: str = "24.04") -> list[StubPackage]:
    """Canonical's archive (restricted) as a competing repository.

    The same 550 library names at ``550.163.01-0ubuntu0.<release>.1``: higher than the
    CUDA repository's 550.90.07 pin, so an unpinned install (or a pin that names no
    revision) takes the wrong repository's package; and §2b's ``-server`` builds
    (`nvidia-driver-550-server-open`, `nvidia-utils-<br>-server`), offered next to the
    CUDA repository's (idx:56722029818 lists both).
    """
    deb = f"{ARCHIVE_VERSION}-0ubuntu0.{release}.1"  # §0 Ubuntu, Canonical archive
    br = _branch(ARCHIVE_VERSION)
    same = (
        "libnvidia-compute",
        "nvidia-utils",
        "nvidia-compute-utils",
        "nvidia-kernel-common",
        "libnvidia-gl",
    )
    result = [_plain(f"{name}-{br}", deb) for name in same]
    result += [
        # §2a / §2b: Canonical builds `nvidia-driver-550-open` too (pitfall 9's mixing trap).
        StubPackage(
            f"nvidia-driver-{br}-open",
            deb,
            depends=(
                exact(f"nvidia-dkms-{br}-open", deb),
                *(exact(f"{name}-{br}", deb) for name in same),
            ),
            description=f"NVIDIA driver {br} open (Canonical's build)",
        ),
        StubPackage(
            f"nvidia-dkms-{br}-open",
            deb,
            depends=("dkms", exact(f"nvidia-kernel-common-{br}", deb)),
            description=f"NVIDIA {br} open kernel module sources (Canonical's build)",
            files=dkms_source(ARCHIVE_VERSION),
            postinst=dkms_failure_postinst("nvidia", ARCHIVE_VERSION),
        ),
        # §2b: `nvidia-utils-<br>-server` (userspace of the -server builds).
        _plain(f"nvidia-utils-{br}-server", deb),
        # §2b "Do not mix": `nvidia-driver-550-server-open` (idx:56722029818).
        StubPackage(
            f"nvidia-driver-{br}-server-open",
            deb,
            depends=(exact(f"nvidia-utils-{br}-server", deb),),
            description=f"NVIDIA driver {br} server build, open modules (Canonical)",
        ),
    ]
    return result
