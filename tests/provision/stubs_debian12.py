"""Stub packages of NVIDIA's CUDA repository for Debian 12 (``repos/debian12/x86_64/``).

Names and versions from nvidia-packages.md, never from the roles: §0 "Debian 12/13,
CUDA repo: `<ver>-1`"; §2c for the driver (Debian has never used branch-suffixed
driver names, key fact 3); §3 for Fabric Manager and NSCQ (branch in the name below
580, none from 580, key fact 2); §4 via :mod:`tests.provision.stubs_common`.

Branches: 550 twice (a pin raise upgrades), 580 and 590 once each, so that
``cuda-drivers-580``'s ``>=`` dependencies can pull 590 components (pitfall 1)
unless ``nvidia-driver-pinning-580`` is installed first.
"""

from __future__ import annotations

from tests.provision import stubs_common
from tests.provision.stubpkg import (
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

DISTRO = "debian12"
# §0 Debian CUDA repo `<ver>-1`. 550.90.07: `cuda-drivers-550=550.90.07-1` (idx:37605553662);
# 580.105.08: pitfall 1's `cuda-drivers-580` 580.105.08-1; 590.48.01: §5 (CUDA 13.1 U1).
DRIVER_VERSIONS = ("550.90.07", "550.127.05", "580.105.08", "590.48.01")
REVISION = "1"
# Headers meta of Debian's kernel flavour (nvidia-packages.md pitfall 10 asks for headers).
KERNEL_META = "amd64"


def _branch(version: str) -> str:
    return version.split(".", maxsplit=1)[0]


def driver(version: str) -> list[StubPackage]:
    """Every driver package of one Debian driver version."""
    deb = f"{version}-{REVISION}"
    branch = _branch(version)
    packages = [
        # §2c open, full: `nvidia-open` (idx:53127279801); the meta pins the driver at `=`.
        StubPackage(
            "nvidia-open",
            deb,
            depends=(exact("nvidia-driver", deb), exact("nvidia-kernel-open-dkms", deb)),
            description="NVIDIA driver, open kernel modules (meta)",
        ),
        # §2c proprietary, full: `cuda-drivers` (or `cuda-drivers-<br>`).
        StubPackage(
            "cuda-drivers",
            deb,
            depends=(exact(f"cuda-drivers-{branch}", deb),),
            description="NVIDIA driver, proprietary kernel modules (meta)",
        ),
        # §2c `cuda-drivers-<br>` (idx:32168861720, idx:25172519571); pitfall 1: only `>=`
        # dependencies (`nvidia-driver (>= 580.65.06)`), so it pulls a newer branch.
        StubPackage(
            f"cuda-drivers-{branch}",
            deb,
            depends=(f"nvidia-driver (>= {version})", f"nvidia-kernel-dkms (>= {version})"),
            description=f"NVIDIA driver {branch} branch, proprietary kernel modules (meta)",
        ),
        # §0 key fact 3: `nvidia-driver` is a Debian CUDA-repo name.
        StubPackage(
            "nvidia-driver",
            deb,
            depends=(exact("nvidia-driver-cuda", deb), exact("nvidia-alternative", deb)),
            description="NVIDIA driver user space (full)",
        ),
        # §2c compute-only, open: `nvidia-driver-cuda nvidia-kernel-open-dkms` (+`libcuda1`),
        # all `=595.91.07-1` (idx:61202362552).
        StubPackage(
            "nvidia-driver-cuda",
            deb,
            depends=(
                exact("libcuda1", deb),
                exact("nvidia-smi", deb),
                exact("libnvidia-ml1", deb),
                exact("nvidia-modprobe", deb),
            ),
            description="NVIDIA driver CUDA user space (compute only)",
            files=persistenced(),
        ),
        # §2c compute-only, open: `libcuda1` (idx:61202362552).
        StubPackage(
            "libcuda1",
            deb,
            description="NVIDIA CUDA driver library",
            files=library("libcuda.so", version),
        ),
        # §2c GoogleCloudDataproc pin list (idx:8041550309): `nvidia-smi`, `=${DRIVER_VERSION}-1`.
        StubPackage(
            "nvidia-smi",
            deb,
            depends=(exact("libnvidia-ml1", deb),),
            description="NVIDIA System Management Interface",
            files=nvidia_smi(version),
        ),
        # §2c GoogleCloudDataproc pin list: `libnvidia-ml1`.
        StubPackage(
            "libnvidia-ml1",
            deb,
            description="NVIDIA Management Library (NVML)",
            files=library("libnvidia-ml.so", version),
        ),
        # §2c GoogleCloudDataproc pin list: `nvidia-alternative`.
        StubPackage("nvidia-alternative", deb, description="NVIDIA driver alternatives"),
        # §2c GoogleCloudDataproc pin list: `nvidia-kernel-support`.
        StubPackage("nvidia-kernel-support", deb, description="NVIDIA kernel module support"),
        # §2c GoogleCloudDataproc pin list: `nvidia-modprobe`.
        StubPackage("nvidia-modprobe", deb, description="NVIDIA kernel module loader"),
        # §2c GoogleCloudDataproc pin list: `firmware-nvidia-gsp`.
        StubPackage("firmware-nvidia-gsp", deb, description="NVIDIA GSP firmware"),
        # §2c compute-only, open: `nvidia-kernel-open-dkms` (CUDA repo's name, pitfall 9).
        StubPackage(
            "nvidia-kernel-open-dkms",
            deb,
            depends=(
                "dkms",
                exact("nvidia-kernel-support", deb),
                exact("firmware-nvidia-gsp", deb),
            ),
            description="NVIDIA open kernel module sources (DKMS)",
            files=dkms_source(version),
            postinst=dkms_failure_postinst("nvidia", version),
        ),
        # §2c proprietary DKMS: `nvidia-kernel-dkms` (idx:11630495126).
        StubPackage(
            "nvidia-kernel-dkms",
            deb,
            depends=("dkms", exact("nvidia-kernel-support", deb)),
            description="NVIDIA proprietary kernel module sources (DKMS)",
            files=dkms_source(version),
            postinst=dkms_failure_postinst("nvidia", version),
        ),
    ]
    packages += fabric(version)
    return packages


def fabric(version: str) -> list[StubPackage]:
    """Fabric Manager and NSCQ for one driver version (§3; the name changes at 580)."""
    deb = f"{version}-{REVISION}"
    # §3 Fabric Manager / NSCQ, Ubuntu / Debian: branch < 580 `nvidia-fabricmanager-<br>=<ver>-1`,
    # `libnvidia-nscq-<br>=<ver>-1`; branch >= 580 `nvidia-fabricmanager=<ver>*`, `libnvidia-nscq`.
    suffix = f"-{_branch(version)}" if int(_branch(version)) < 580 else ""
    return [
        StubPackage(
            f"nvidia-fabricmanager{suffix}",
            deb,
            description="NVIDIA Fabric Manager",
            files=fabricmanager(version),
        ),
        StubPackage(
            f"nvidia-fabricmanager-dev{suffix}",
            deb,
            depends=(exact(f"nvidia-fabricmanager{suffix}", deb),),
            description="NVIDIA Fabric Manager development files",
        ),
        StubPackage(
            f"libnvidia-nscq{suffix}",
            deb,
            description="NVIDIA NVSwitch configuration and query library",
            files=library("libnvidia-nscq.so", version),
        ),
    ]


def pinned_names(version: str) -> list[str]:
    """The driver packages an ``nvidia-driver-pinning-*`` file of this version pins."""
    return [p.name for p in driver(version)]


def pinning() -> list[StubPackage]:
    """``nvidia-driver-pinning-<br>`` (newest of the branch) and ``-<ver>`` for each version.

    §2c branch lock: `nvidia-driver-pinning-<br>` (`-580`, `-595`, `-615` seen;
    idx:25172519571, idx:61202362552); the exact-version form `-<ver>` is §0's
    Ubuntu row carried over (§7: the exact strings are unconfirmed).
    """
    packages: list[StubPackage] = []
    newest: dict[str, str] = {}
    for version in DRIVER_VERSIONS:
        newest[_branch(version)] = version
        name = f"nvidia-driver-pinning-{version}"
        packages.append(
            StubPackage(
                name,
                f"{version}-{REVISION}",
                architecture="all",
                description=f"pins the NVIDIA driver to {version}",
                files=pinning_preferences(name, pinned_names(version), f"{version}-*"),
            )
        )
    for branch, version in newest.items():
        name = f"nvidia-driver-pinning-{branch}"
        names = [n for v in DRIVER_VERSIONS if _branch(v) == branch for n in pinned_names(v)]
        packages.append(
            StubPackage(
                name,
                f"{version}-{REVISION}",
                architecture="all",
                description=f"pins the NVIDIA driver to the {branch} branch",
                files=pinning_preferences(name, names, f"{branch}.*"),
            )
        )
    return packages


def packages(kernel_release: str) -> list[StubPackage]:
    """Every package of the Debian 12 stub CUDA repository.

    Args:
        kernel_release: the hosts' ``uname -r``, for the kernel stand-ins.
    """
    result = keyring(DISTRO) + pinning()
    for version in DRIVER_VERSIONS:
        result += driver(version)
    result += stubs_common.cuda_libraries()
    result += [dkms_stand_in(), *kernel_stand_ins(kernel_release, KERNEL_META)]
    return result
