"""A signed dnf repository of stub NVIDIA RPMs, and RHEL-shaped test hosts to use it.

The RHEL counterpart of :mod:`tests.provision.stubrepo`: the layout of NVIDIA's
``compute/cuda/repos/rhel9/x86_64/`` repository (RPMs, ``repodata/`` with a
``modules`` document holding the ``nvidia-driver`` module streams, and the
package signing key as ``D42D0685.pub``), with the real package names, epochs
and release strings of nvidia-packages.md and almost no payload.

Everything is built from Debian packages: ``rpmbuild`` and ``rpmsign`` (rpm),
``createrepo_c`` and ``modifyrepo_c`` (createrepo-c), ``gpg``. One spec file
is generated per (epoch, version, release), its packages as ``%package -n``
subpackages. The packages are signed with a throwaway ed25519 key
(``rpmsign --addsign``) and the repository is used with ``gpgcheck=1``, as
NVIDIA's ``cuda-rhel9.repo`` is, so that dnf's key import and signature
check run for real on the hosts.

A RHEL-shaped host (:func:`shape_rhel_host`) is a Debian test host whose
``/etc/os-release`` and release files are Rocky 9's, with Debian's rpm, dnf
and dnf-plugins-core (versionlock) in its root filesystem
(:data:`RHEL_HOST_PACKAGES`), an rpm database in ``/var/lib/rpm`` that holds
one package standing for the Debian root (:data:`BASE_PACKAGE`) and
Rocky's dnf.conf. Ansible then reads distribution Rocky, os_family RedHat and
pkg_mgr dnf, and the roles' dnf, module, versionlock and ``rpm -q`` tasks run
against the stub repository.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.provision.stubrepo import (
    CUDA_RELEASE,
    NVCC_VERSION,
    NVCC_VERSION_TEXT,
    TOOLKIT_VERSION,
    StubFile,
    cudnn_header,
    make_key,
)

if TYPE_CHECKING:
    from tests.hosts.testhosts import TestHost

# Bumped whenever the builder changes what it writes, so the cache key changes too.
BUILDER_VERSION = 2

CACHE_DIR = Path(
    os.environ.get("GPUREADY_STUBRPM_CACHE", Path(tempfile.gettempdir()) / "gpuready-stubrpm")
)

DIST = "el9"
ARCH = "x86_64"
# nvidia-packages.md §0: RHEL driver packages carry epoch 3 and <ver>-1.el<N>
# (nvidia-driver-cuda-3:570.133.20-1.el9.x86_64, idx:52166799543; idx:9899409657).
DRIVER_EPOCH = 3
DRIVER_RELEASE = f"1.{DIST}"
# Two versions in each of two branches, so pin raises and stream switches are exercised.
# 550.90.07: nvidia-packages.md §0 (idx:59604216534) and §2a (idx:37605553662);
# 550.163.01: §2a (idx:65933029383); 580.65.06 / 580.82.07: §5, CUDA 13.0 GA / Update 1
# (idx:55335308248).
DRIVER_VERSIONS: Mapping[str, tuple[str, str]] = {
    "550": ("550.90.07", "550.163.01"),
    "580": ("580.65.06", "580.82.07"),
}
# nvidia-packages.md §3 / §6 #4: the RHEL fabric manager is nvidia-fabric-manager below
# 580 and nvidia-fabricmanager from 580 on (GDC@78fa4ac, GDC@06a208c:rhel9/install.sh).
FM_RENAME_BRANCH = 580
# nvidia-packages.md §0: the RHEL fabric manager rpm has no dist tag, <ver>-1.<arch>
# (nvidia-fabric-manager-550.90.07-1.x86_64.rpm, idx:59604216534).
FM_RELEASE = "1"
# nvidia-packages.md §4 cuDNN: rpm libcudnn9-devel-cuda-12-9.5.1.17-1 (idx:4419186850);
# 9.2.1.18 is a deb version of the same table (idx:3883669189).
CUDNN_VERSIONS = ("9.2.1.18", "9.5.1.17")
CUDNN_CUDA_MAJOR = "12"
# nvidia-packages.md §4 NCCL: rpm libnccl-devel-2.23.4-1+cuda12.4 (idx:4419186850); 2.26.5
# is a deb example there (2.26.5-1+cuda12.9), its suffix set to this repository's CUDA 12.4.
NCCL_VERSIONS = ("2.23.4", "2.26.5")
NCCL_RELEASE = f"1+cuda{CUDA_RELEASE}"
# nvidia-packages.md §4 DCGM: 4.4.1 (idx:12950666611), 4.5.2 (idx:55653381380); the deb
# epoch is 1 and file names omit it. Inference: the rpm carries the same epoch 1.
DCGM_VERSIONS = ("4.4.1", "4.5.2")
DCGM_EPOCH = 1
DCGM_CUDA_MAJOR = "12"
# nvidia-packages.md §4 CUDA Toolkit: cuda-libraries-12-4-12.4.1-1 (rpm, idx:4419186850),
# cuda-cudart-devel-12-4-12.4.127-1; nvcc 12.4.131 is what 12.4 Update 1 prints.
TOOLKIT_CONFIG_VERSION = "12.4.127"
LIBDIR = "/usr/lib64"
FAIL_INSTALL_MARKER = "/etc/gpuready-fail-install"
# The role's gpgkey default (cuda_repository_rpm_gpgkey_url) is <repo>/D42D0685.pub, the
# name of NVIDIA's rpm key (nvidia-packages.md §1, cuda-repo-management#4).
GPGKEY_NAME = "D42D0685.pub"
# An empty repository named crb, for the roles' "enable CRB" step.
CRB_DIR = "crb"
# The served tree: NVIDIA's packages in cuda/ (what cuda_repository_url points at), the
# stand-ins for Rocky's BaseOS/AppStream/EPEL packages in rocky/, an empty crb/.
CUDA_DIR = "cuda"
BASE_DIR = "rocky"
MODULE = "nvidia-driver"

# Debian packages a RHEL-shaped host needs in its root filesystem (bookworm ships them):
# rpm, dnf, python3-dnf (Ansible's dnf module), dnf-plugins-core (versionlock),
# createrepo-c (as the issue lists it: a host can index a local repository), kmod and
# pciutils for the driver role's probes.
RHEL_HOST_PACKAGES: tuple[str, ...] = (
    "rpm",
    "dnf",
    "python3-dnf",
    "dnf-plugins-core",
    "createrepo-c",
    "kmod",
    "pciutils",
)

# Rocky Linux 9.4's /etc/os-release, as the issue gives it (ID, ID_LIKE, VERSION_ID,
# PLATFORM_ID); dnf reads PLATFORM_ID for module platform dependencies.
ROCKY_OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.4"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.4"
"""
ROCKY_RELEASE = "Rocky Linux release 9.4 (Blue Onyx)\n"
# Rocky's dnf.conf; Debian's differs (best=False, skip_if_unavailable=True).
ROCKY_DNF_CONF = """\
[main]
gpgcheck=1
installonly_limit=3
clean_requirements_on_remove=True
best=True
skip_if_unavailable=False
"""
# Debian's rpm keeps its database in ~/.rpmdb; a RHEL host has it in /var/lib/rpm.
RPM_DBPATH_MACRO = "%_dbpath /var/lib/rpm\n"

_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_REQUIRED_TOOLS = ("rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c", "gpg", "gpgconf")
# What .ci installs for these tools (Debian bookworm package names).
APT_PACKAGES = ("rpm", "createrepo-c", "gpg", "gpg-agent")


class StubRpmUnavailable(RuntimeError):
    """This machine lacks a tool needed to build the repository (tests skip)."""


class StubRpmError(RuntimeError):
    """Building the repository or shaping a host failed."""


@dataclass(frozen=True)
class StubRpm:
    """One binary RPM of the stub repository.

    Args:
        name: the package name, e.g. ``kmod-nvidia-open-dkms``.
        version: the RPM version, e.g. ``550.90.07``.
        release: the RPM release, e.g. ``1.el9``.
        epoch: the epoch (None: none, as the fabric manager rpm).
        arch: ``x86_64`` or ``noarch``.
        requires: ``Requires:`` entries, e.g. ``("nvidia-kmod = 3:550.90.07-1.el9",)``.
        provides: ``Provides:`` entries beyond the package itself.
        conflicts: ``Conflicts:`` entries.
        summary: one line.
        files: absolute path -> file.
        post: the %post scriptlet, if any.
        preun: the %preun scriptlet, if any.
        source: where the name and version format come from (nvidia-packages.md), or
            why a non-NVIDIA stand-in exists.
        nvidia: whether it is one of NVIDIA's packages (its name must appear in the
            reference's tables); False for stand-ins of the distribution's packages.
    """

    name: str
    version: str
    release: str
    epoch: int | None = None
    arch: str = ARCH
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    summary: str = ""
    files: Mapping[str, StubFile] = field(default_factory=dict)
    post: str | None = None
    preun: str | None = None
    source: str = ""
    nvidia: bool = True

    @property
    def evr(self) -> str:
        """``[epoch:]version-release``, as dnf and rpm print it."""
        prefix = f"{self.epoch}:" if self.epoch is not None else ""
        return f"{prefix}{self.version}-{self.release}"

    @property
    def nevra(self) -> str:
        """``name-epoch:version-release.arch``, as modules.yaml lists artifacts (epoch 0 too)."""
        return f"{self.name}-{self.epoch or 0}:{self.version}-{self.release}.{self.arch}"

    @property
    def filename(self) -> str:
        """The .rpm's file name (rpm never puts the epoch in it)."""
        return f"{self.name}-{self.version}-{self.release}.{self.arch}.rpm"

    def fingerprint(self) -> dict[str, Any]:
        """Everything that goes into the .rpm, for the cache key."""
        return {
            "nevra": self.nevra,
            "requires": self.requires,
            "provides": self.provides,
            "conflicts": self.conflicts,
            "files": {
                path: [hashlib.sha256(f.data()).hexdigest(), f.mode]
                for path, f in sorted(self.files.items())
            },
            "post": self.post,
            "preun": self.preun,
        }


@dataclass(frozen=True)
class ModuleStream:
    """One stream of the ``nvidia-driver`` module.

    Args:
        stream: e.g. ``550-open``.
        artifacts: the packages of the stream.
        profiles: profile name -> package names.
    """

    stream: str
    artifacts: tuple[StubRpm, ...]
    profiles: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class StubRpmRepo:
    """A built repository.

    Attributes:
        path: the directory to serve: ``cuda/`` (NVIDIA's packages, ``repodata/``
            with the modules, the key), ``rocky/`` (the distribution's stand-ins)
            and ``crb/`` (empty).
        keyring: the armored public key that signed the packages (``cuda/D42D0685.pub``).
        fingerprint: that key's fingerprint.
        packages: (name, evr, arch) of every package in it.
    """

    path: Path
    keyring: Path
    fingerprint: str
    packages: tuple[tuple[str, str, str], ...]

    def versions(self, name: str) -> list[str]:
        """The ``[epoch:]version-release`` strings of ``name`` the repository holds."""
        return [evr for pkg, evr, _ in self.packages if pkg == name]

    def rpm(self, name: str, evr: str | None = None) -> Path:
        """The .rpm file of ``name`` (the only or the given version)."""
        for pkg, version, arch in self.packages:
            if pkg == name and (evr is None or version == evr):
                plain = version.split(":", 1)[-1]
                for directory in (CUDA_DIR, BASE_DIR):
                    path = self.path / directory / f"{pkg}-{plain}.{arch}.rpm"
                    if path.is_file():
                        return path
        raise StubRpmError(f"{name} {evr or ''} is not in the stub rpm repository")


# ---------------------------------------------------------------- the packages


def _sh(body: str) -> str:
    return body.strip() + "\n"


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


def _exits_zero(name: str) -> StubFile:
    return StubFile(f"#!/bin/sh\n# stub {name} (gpuready tests)\nexit 0\n", 0o755)


def _dkms_failure_post(module: str, version: str) -> str:
    # As in the apt stub: a DKMS build that fails on a host carrying the marker.
    return _sh(
        f"""
if [ -e {FAIL_INSTALL_MARKER} ]; then
    echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64)" >&2
    echo "Consult /var/lib/dkms/{module}/{version}/build/make.log for more information." >&2
    exit 1
fi
"""
    )


def driver_packages(branch: str, version: str) -> list[StubRpm]:
    """The driver RPMs of one version (epoch 3, ``<ver>-1.el9``).

    Names: nvidia-packages.md §2d (compute-only set, kmod names, ``nvidia-open``),
    §0 (``nvidia-driver-3:<ver>-1.el8``, idx:9899409657).
    """
    evr = f"{DRIVER_EPOCH}:{version}-{DRIVER_RELEASE}"
    common: dict[str, Any] = {"version": version, "release": DRIVER_RELEASE, "epoch": DRIVER_EPOCH}
    src_2d = "nvidia-packages.md §2d (idx:52166799543)"
    kmods = []
    for name, flavour, other in (
        ("kmod-nvidia-open-dkms", "open", "kmod-nvidia-latest-dkms"),
        ("kmod-nvidia-latest-dkms", "proprietary", "kmod-nvidia-open-dkms"),
    ):
        module = "nvidia-open" if flavour == "open" else "nvidia"
        kmods.append(
            StubRpm(
                name,
                **common,
                # Both flavours provide the kernel module the user space needs; only one
                # can be installed.
                provides=(f"nvidia-kmod = {evr}",),
                conflicts=(other,),
                requires=("dkms",),
                summary=f"NVIDIA {flavour} kernel modules (DKMS) {version}",
                files={f"/usr/src/{module}-{version}/dkms.conf": StubFile(
                    f'PACKAGE_NAME="{module}"\nPACKAGE_VERSION="{version}"\n'
                )},
                post=_dkms_failure_post(module, version),
                source="nvidia-packages.md §2d (NVIDIA/yum-packaging-dkms-nvidia README)",
            )
        )  # fmt: skip
    return [
        StubRpm(
            "nvidia-driver",
            **common,
            requires=(f"nvidia-kmod-common = {evr}", f"nvidia-driver-cuda-libs = {evr}"),
            summary=f"NVIDIA driver {version} (user space)",
            files={f"{LIBDIR}/libnvidia-glcore.so.{version}": StubFile("stub\n")},
            source="nvidia-packages.md §0 (idx:9899409657)",
        ),
        StubRpm(
            "nvidia-driver-cuda",
            **common,
            requires=(
                f"nvidia-driver-cuda-libs = {evr}",
                f"nvidia-persistenced = {evr}",
                f"libnvidia-ml = {evr}",
            ),
            summary=f"NVIDIA driver {version} CUDA tools",
            files={f"{LIBDIR}/libnvidia-cfg.so.{version}": StubFile("stub\n")},
            source="nvidia-packages.md §0 (idx:52166799543)",
        ),
        StubRpm(
            "nvidia-driver-cuda-libs",
            **common,
            summary=f"NVIDIA driver {version} CUDA libraries",
            files={f"{LIBDIR}/libcuda.so.{version}": StubFile("stub\n")},
            source=src_2d,
        ),
        StubRpm(
            "libnvidia-ml",
            **common,
            summary=f"NVML {version}",
            files={f"{LIBDIR}/libnvidia-ml.so.{version}": StubFile("stub\n")},
            source=src_2d,
        ),
        StubRpm(
            "nvidia-persistenced",
            **common,
            summary=f"NVIDIA persistence daemon {version}",
            files={"/usr/bin/nvidia-persistenced": _exits_zero("nvidia-persistenced")},
            source=src_2d,
        ),
        StubRpm(
            "nvidia-kmod-common",
            **common,
            arch="noarch",
            requires=(f"nvidia-kmod = {evr}",),
            summary=f"NVIDIA kernel module common files {version}",
            files={"/usr/lib/modprobe.d/nvidia.conf": StubFile("# stub\n")},
            source="nvidia-packages.md §2d (nvidia-kmod-common-3:570.133.20-1.el9.noarch)",
        ),
        *kmods,
        StubRpm(
            "nvidia-open",
            **common,
            arch="noarch",
            requires=(
                f"nvidia-driver = {evr}",
                f"nvidia-driver-cuda = {evr}",
                f"kmod-nvidia-open-dkms = {evr}",
            ),
            summary=f"NVIDIA open driver {version} (meta)",
            source="nvidia-packages.md §2d (kernel-modules.html 620: dnf install nvidia-open)",
        ),
    ]


def fabric_manager_packages(branch: str, version: str) -> list[StubRpm]:
    """Fabric manager, NSCQ, NVSDM and IMEX RPMs of one driver version (``<ver>-1``).

    Names: nvidia-packages.md §3 (RHEL columns), renamed at 580.
    """
    renamed = int(branch) >= FM_RENAME_BRANCH
    src = "nvidia-packages.md §3 (GDC@78fa4ac, GDC@06a208c:rhel9/install.sh)"
    common: dict[str, Any] = {"version": version, "release": FM_RELEASE, "source": src}
    fm = StubRpm(
        "nvidia-fabricmanager" if renamed else "nvidia-fabric-manager",
        **common,
        summary=f"NVIDIA fabric manager {version}",
        files={
            "/usr/bin/nv-fabricmanager": _exits_zero("nv-fabricmanager"),
            "/usr/lib/systemd/system/nvidia-fabricmanager.service": StubFile(
                "[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\n"
                "ExecStart=/usr/bin/nv-fabricmanager -c "
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg\n\n"
                "[Install]\nWantedBy=multi-user.target\n"
            ),
            "/usr/share/nvidia/nvswitch/fabricmanager.cfg": StubFile("LOG_LEVEL=4\n"),
        },
    )
    packages = [
        fm,
        # The devel package keeps the old name at 580 (nvidia-packages.md §0 key fact 2).
        StubRpm(
            "nvidia-fabric-manager-devel",
            **common,
            summary=f"NVIDIA fabric manager headers {version}",
            files={"/usr/include/nv_fm_agent.h": StubFile("/* stub */\n")},
        ),
        StubRpm(
            "libnvidia-nscq" if renamed else f"libnvidia-nscq-{branch}",
            **common,
            summary=f"NVSwitch configuration and query library {version}",
            files={f"{LIBDIR}/libnvidia-nscq.so.{version}": StubFile("stub\n")},
        ),
        StubRpm(
            "nvidia-imex" if renamed else f"nvidia-imex-{branch}",
            **common,
            summary=f"NVIDIA IMEX {version}",
            files={"/usr/bin/nvidia-imex": _exits_zero("nvidia-imex")},
        ),
    ]
    if renamed:
        # §3: libnvsdm-<br> exists for 570 only below 580; from 580 libnvsdm-<ver>.
        packages.append(
            StubRpm(
                "libnvsdm",
                **common,
                summary=f"NVIDIA NVSwitch device monitoring library {version}",
                files={f"{LIBDIR}/libnvsdm.so.{version}": StubFile("stub\n")},
            )
        )
    return packages


def toolkit_packages() -> list[StubRpm]:
    """``cuda-toolkit-12-4`` (meta), ``cuda-nvcc-12-4`` and ``cuda-toolkit-config-common``.

    Names and formats: nvidia-packages.md §4 CUDA Toolkit and §0 (CUDA libs rpm
    ``<name>-<M.m.p>-1``, idx:4419186850).
    """
    dashed = CUDA_RELEASE.replace(".", "-")
    prefix = f"/usr/local/cuda-{CUDA_RELEASE}"
    major = CUDA_RELEASE.split(".")[0]
    priority = int(CUDA_RELEASE.replace(".", ""))
    src = "nvidia-packages.md §4 CUDA Toolkit (idx:65933029383, idx:4419186850)"
    # EL's alternatives is chkconfig's; the Debian root has update-alternatives, same CLI.
    alternatives = "$(command -v alternatives || command -v update-alternatives)"
    return [
        StubRpm(
            f"cuda-nvcc-{dashed}",
            NVCC_VERSION,
            "1",
            summary=f"CUDA nvcc {CUDA_RELEASE}",
            files={f"{prefix}/bin/nvcc": StubFile(_nvcc_script(), 0o755)},
            source=src,
        ),
        StubRpm(
            "cuda-toolkit-config-common",
            TOOLKIT_CONFIG_VERSION,
            "1",
            arch="noarch",
            summary="CUDA library path and /usr/local/cuda alternatives",
            files={f"/etc/ld.so.conf.d/988_cuda-{major}.conf": StubFile(f"{prefix}/targets/\n")},
            post=_sh(
                f"""
{alternatives} --install /usr/local/cuda cuda {prefix} {priority}
{alternatives} --install /usr/local/cuda-{major} cuda-{major} {prefix} {priority}
"""
            ),
            preun=_sh(
                f"""
if [ "$1" = 0 ]; then
    {alternatives} --remove cuda {prefix}
    {alternatives} --remove cuda-{major} {prefix}
fi
"""
            ),
            source=src,
        ),
        StubRpm(
            f"cuda-toolkit-{dashed}",
            TOOLKIT_VERSION,
            "1",
            requires=(f"cuda-nvcc-{dashed} >= {NVCC_VERSION}", "cuda-toolkit-config-common"),
            summary=f"CUDA Toolkit {CUDA_RELEASE} (meta)",
            source=src,
        ),
    ]


def cudnn_packages(version: str) -> list[StubRpm]:
    """``libcudnn9-cuda-12`` and ``libcudnn9-devel-cuda-12`` at ``<9.x.y.z>-1``.

    Names: nvidia-packages.md §4 cuDNN 9, rpm column; the rpm header path
    ``/usr/include/cudnn_version_v9.h`` (idx:38014408765).
    """
    src = "nvidia-packages.md §4 cuDNN 9 (idx:66447973158, idx:4419186850)"
    cuda = CUDNN_CUDA_MAJOR
    return [
        StubRpm(
            f"libcudnn9-cuda-{cuda}",
            version,
            "1",
            summary=f"cuDNN {version} runtime",
            files={f"{LIBDIR}/libcudnn.so.{version}": StubFile("stub\n")},
            source=src,
        ),
        StubRpm(
            f"libcudnn9-devel-cuda-{cuda}",
            version,
            "1",
            requires=(f"libcudnn9-cuda-{cuda} = {version}-1",),
            summary=f"cuDNN {version} headers",
            files={"/usr/include/cudnn_version_v9.h": StubFile(cudnn_header(version))},
            # §4: RPM scripts add the cudnn_version.h link themselves (no alternatives).
            post=_sh("ln -sf cudnn_version_v9.h /usr/include/cudnn_version.h"),
            preun=_sh('[ "$1" = 0 ] && rm -f /usr/include/cudnn_version.h; exit 0'),
            source=src,
        ),
    ]


def nccl_packages(version: str) -> list[StubRpm]:
    """``libnccl`` and ``libnccl-devel`` at ``<x.y.z>-1+cuda<M.m>`` (nvidia-packages.md §4)."""
    src = "nvidia-packages.md §4 NCCL (idx:4419186850)"
    return [
        StubRpm(
            "libnccl",
            version,
            NCCL_RELEASE,
            summary=f"NCCL {version}",
            files={f"{LIBDIR}/libnccl.so.{version}": StubFile("stub\n")},
            source=src,
        ),
        StubRpm(
            "libnccl-devel",
            version,
            NCCL_RELEASE,
            requires=(f"libnccl = {version}-{NCCL_RELEASE}",),
            summary=f"NCCL {version} headers",
            files={"/usr/include/nccl.h": StubFile(_nccl_header(version))},
            source=src,
        ),
    ]


def _nccl_header(version: str) -> str:
    major, minor, patch = version.split(".")
    return (
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
        '#define NCCL_SUFFIX ""\n'
    )


def dcgm_packages(version: str) -> list[StubRpm]:
    """DCGM 4: ``-core``, ``-cuda12``, ``-proprietary`` (nvidia-packages.md §4).

    ``-cuda12`` needs ``-core`` at exactly its version, as the real one does
    (§6 #13, idx:59834674932), so that a partial pin fails as it does there.
    """
    src = "nvidia-packages.md §4 DCGM (idx:59834674932, idx:69610611616)"
    evr = f"{DCGM_EPOCH}:{version}-1"
    common: dict[str, Any] = {"version": version, "release": "1", "epoch": DCGM_EPOCH}
    base = "datacenter-gpu-manager-4"
    return [
        StubRpm(
            f"{base}-core",
            **common,
            summary=f"DCGM {version} core",
            files={
                "/usr/bin/nv-hostengine": _exits_zero("nv-hostengine"),
                "/usr/bin/dcgmi": _exits_zero("dcgmi"),
                "/usr/lib/systemd/system/nvidia-dcgm.service": StubFile(
                    "[Unit]\nDescription=NVIDIA DCGM service\n\n[Service]\n"
                    "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\n\n"
                    "[Install]\nWantedBy=multi-user.target\n"
                ),
            },
            source=src,
        ),
        StubRpm(
            f"{base}-cuda{DCGM_CUDA_MAJOR}",
            **common,
            requires=(f"{base}-core = {evr}",),
            summary=f"DCGM {version} for CUDA {DCGM_CUDA_MAJOR}",
            files={f"{LIBDIR}/libdcgm_cublas_proxy{DCGM_CUDA_MAJOR}.so.4": StubFile("stub\n")},
            source=src,
        ),
        StubRpm(
            f"{base}-proprietary",
            **common,
            requires=(f"{base}-core = {evr}",),
            summary=f"DCGM {version} proprietary modules",
            files={f"{LIBDIR}/libdcgmmoduleprofiling.so.4": StubFile("stub\n")},
            source=src,
        ),
    ]


def _support(name: str, version: str, release: str, why: str, **extra: Any) -> StubRpm:
    return StubRpm(
        name, version, release, arch="noarch", summary=f"stand-in for {name}",
        source=why, nvidia=False, **extra,
    )  # fmt: skip


# The package that stands for the Debian root in a shaped host's rpm database: what
# the base OS provides on a real EL9 host (bash's /bin/sh for every scriptlet,
# system-release(releasever) for dnf's $releasever).
BASE_PACKAGE = "gpuready-debian-root"


def support_packages(kernel_release: str) -> list[StubRpm]:
    """Stand-ins for the EL packages the roles ask for besides NVIDIA's.

    Args:
        kernel_release: the hosts' kernel (they share this machine's), for
            ``kernel-devel`` and ``kernel-devel-matched`` at its version (an rpm
            release has no ``-``: the rest of the release after the first ``-``
            has its dashes turned into dots).
    """
    kversion, _, rest = kernel_release.partition("-")
    krelease = rest.replace("-", ".") or "1"
    return [
        _support(
            BASE_PACKAGE, "12", "1.gpuready",
            "the Debian 12 root: provides what bash and rocky-release provide on EL9",
            provides=(
                "/bin/sh", "/usr/bin/sh", "bash", "system-release = 9.4",
                "system-release(releasever) = 9",
            ),
        ),
        _support(
            "python3-dnf-plugin-versionlock", "4.3.1", "3.gpuready",
            "nvidia-packages.md §2e: versionlock needs it; Debian's dnf-plugins-core 4.3.1-3 "
            "already ships the plugin file, this registers it with rpm",
        ),
        _support(
            "dkms", "3.0.10", "8.gpuready", "EPEL's dkms (the roles install it for DKMS kmods)",
            files={"/usr/sbin/dkms": StubFile('#!/bin/sh\n[ "$1" = status ] && exit 0\nexit 0\n',
                                              0o755)},
        ),
        _support("epel-release", "9", "1.gpuready", "the roles install EPEL for dkms"),
        _support("kernel-headers", "5.14.0", "1.gpuready", "EL9 kernel headers (roles, §6 #10)"),
        _support(
            "kernel-devel-matched", kversion, krelease,
            "nvidia-packages.md §6 #10: kernel-devel-matched on EL9",
            requires=(f"kernel-devel = {kversion}-{krelease}",),
        ),
        _support(
            "kernel-devel", kversion, krelease, "the running kernel's devel files",
            # dnf reads kernel-devel-<uname -r> as name-version-release; this kernel's
            # release has dashes an EL release never has, so the literal name is
            # provided too (dnf matches provides by name).
            provides=(f"kernel-devel-{kernel_release}",),
            files={f"/usr/src/kernels/{kernel_release}/Makefile": StubFile("# stub\n")},
        ),
    ]  # fmt: skip


def stub_rpms(kernel_release: str | None = None) -> list[StubRpm]:
    """Every package of the stub dnf repository.

    Args:
        kernel_release: the test hosts' kernel (default this machine's).
    """
    packages: list[StubRpm] = []
    for branch, versions in DRIVER_VERSIONS.items():
        for version in versions:
            packages += driver_packages(branch, version)
            packages += fabric_manager_packages(branch, version)
    packages += toolkit_packages()
    for version in CUDNN_VERSIONS:
        packages += cudnn_packages(version)
    for version in NCCL_VERSIONS:
        packages += nccl_packages(version)
    for version in DCGM_VERSIONS:
        packages += dcgm_packages(version)
    packages += support_packages(kernel_release or os.uname().release)
    return packages


# ---------------------------------------------------------------- the module streams


# Profile names: NVIDIA's RHEL streams offer default, ks (kickstart, no desktop bits),
# fm (with fabric manager) and src; nvidia-packages.md does not list them (UNCONFIRMED).
# The stream names are §2d's: <br>-open, <br>-dkms, open-dkms and latest-dkms.
def module_streams(packages: Sequence[StubRpm]) -> list[ModuleStream]:
    """The ``nvidia-driver`` streams over ``packages`` (their driver and FM RPMs)."""
    by_version: dict[str, list[StubRpm]] = {}
    for package in packages:
        if package.epoch == DRIVER_EPOCH or package.source.startswith("nvidia-packages.md §3"):
            by_version.setdefault(package.version, []).append(package)
    streams: list[ModuleStream] = []

    def stream(name: str, versions: Sequence[str], flavour: str) -> ModuleStream:
        skip = "kmod-nvidia-latest-dkms" if flavour == "open" else "kmod-nvidia-open-dkms"
        artifacts = tuple(
            p for v in versions for p in by_version.get(v, []) if p.name not in (skip, "")
        )
        kmod = "kmod-nvidia-open-dkms" if flavour == "open" else "kmod-nvidia-latest-dkms"
        default = ("nvidia-driver", "nvidia-driver-cuda", kmod)
        fm = tuple(
            sorted({p.name for p in artifacts if "fabric" in p.name and "devel" not in p.name}
                   | {p.name for p in artifacts if p.name.startswith("libnvidia-nscq")})
        )  # fmt: skip
        return ModuleStream(
            name,
            artifacts,
            {"default": default, "ks": default, "fm": default + fm, "src": ()},
        )

    every: list[str] = []
    for branch, versions in DRIVER_VERSIONS.items():
        streams.append(stream(f"{branch}-open", versions, "open"))
        streams.append(stream(f"{branch}-dkms", versions, "proprietary"))
        every += versions
    # Latest streams follow the newest branch only: an older branch's FM names would
    # collide in one stream otherwise.
    newest = list(DRIVER_VERSIONS.values())[-1]
    streams.append(stream("open-dkms", newest, "open"))
    streams.append(stream("latest-dkms", newest, "proprietary"))
    return streams


def _yaml_list(items: Sequence[str], indent: int) -> str:
    pad = " " * indent
    if not items:
        return " []\n"
    return "\n" + "".join(f"{pad}- {json.dumps(item)}\n" for item in items)


def modules_yaml(streams: Sequence[ModuleStream]) -> str:
    """modulemd v2 documents for ``streams`` and a modulemd-defaults document."""
    docs = []
    for index, s in enumerate(streams):
        profiles = "".join(
            f"      {name}:\n        description: {name} profile\n        rpms:"
            + _yaml_list(rpms, 10)
            for name, rpms in s.profiles.items()
        )
        docs.append(
            "---\n"
            "document: modulemd\n"
            "version: 2\n"
            "data:\n"
            f"  name: {MODULE}\n"
            f"  stream: {json.dumps(s.stream)}\n"
            f"  version: {20240101000000 + index}\n"
            "  context: 00000000\n"
            f"  arch: {ARCH}\n"
            f"  summary: Nvidia driver for {s.stream} branch\n"
            "  description: >-\n"
            f"    NVIDIA driver packages of the {s.stream} stream (gpuready test stub).\n"
            "  license:\n"
            "    module:\n"
            "      - MIT\n"
            "  dependencies:\n"
            "    - buildrequires:\n"
            f"        platform: [{DIST}]\n"
            "      requires:\n"
            f"        platform: [{DIST}]\n"
            "  profiles:\n"
            + profiles
            + "  artifacts:\n    rpms:"
            + _yaml_list([p.nevra for p in s.artifacts], 6)
            + "...\n"
        )
    # latest-dkms as the default stream: UNCONFIRMED (not in nvidia-packages.md).
    docs.append(
        "---\n"
        "document: modulemd-defaults\n"
        "version: 1\n"
        "data:\n"
        f"  module: {MODULE}\n"
        "  stream: latest-dkms\n"
        "  profiles:\n" + "".join(f"    {s.stream}: [default]\n" for s in streams) + "...\n"
    )
    return "".join(docs)


# ---------------------------------------------------------------- building


def check_tools() -> None:
    """Raise :class:`StubRpmUnavailable` naming the missing build tools."""
    missing = [t for t in _REQUIRED_TOOLS if shutil.which(t, path=_ENV["PATH"]) is None]
    if missing:
        raise StubRpmUnavailable(
            f"the stub dnf repository needs {', '.join(missing)} "
            f"(apt-get install {' '.join(APT_PACKAGES)})"
        )


def repo_key(packages: Sequence[StubRpm]) -> str:
    """The cache key of a repository: a hash of every package and the builder."""
    text = json.dumps(
        [
            BUILDER_VERSION,
            [p.fingerprint() for p in packages],
            modules_yaml(module_streams(packages)),
        ],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> str:
    proc = subprocess.run(
        list(argv), cwd=cwd, env={**_ENV, **(env or {})}, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise StubRpmError(f"{' '.join(argv[:3])} ... failed ({proc.returncode}): {tail}")
    return proc.stdout


def _spec(group: Sequence[StubRpm], payload: Path) -> str:
    """One spec file: the first package is the main one, the others ``%package -n``."""
    main = group[0]
    lines = [
        f"Name: {main.name}",
        f"Version: {main.version}",
        f"Release: {main.release}",
        *([f"Epoch: {main.epoch}"] if main.epoch is not None else []),
        "License: stub",
        f"Summary: {main.summary or main.name}",
        # No automatic dependencies: the Debian root's files are not in the rpm database.
        "AutoReqProv: no",
    ]
    body: list[str] = []
    for index, package in enumerate(group):
        tag = "" if index == 0 else f" -n {package.name}"
        header = (
            [] if index == 0 else [f"%package{tag}", f"Summary: {package.summary or package.name}"]
        )
        header += [f"BuildArch: {package.arch}"] if package.arch == "noarch" else []
        header += [f"Requires: {r}" for r in package.requires]
        header += [f"Provides: {p}" for p in package.provides]
        header += [f"Conflicts: {c}" for c in package.conflicts]
        if index == 0:
            lines += header
        else:
            body += ["", *header]
        body += [
            "",
            f"%description{tag}",
            f"{package.summary or package.name} (gpuready test stub)",
        ]
    install = ["", "%install", f"cp -a {payload}/. %{{buildroot}}/"]
    files: list[str] = []
    for index, package in enumerate(group):
        tag = "" if index == 0 else f" -n {package.name}"
        files += ["", f"%files{tag}"]
        files += [
            f"%attr({f.mode:o},root,root) {path}" for path, f in sorted(package.files.items())
        ]
        for script, text in (("post", package.post), ("preun", package.preun)):
            if text is not None:
                files += ["", f"%{script}{tag}", text.rstrip()]
    return "\n".join(lines + body + install + files) + "\n"


def _groups(packages: Sequence[StubRpm]) -> list[list[StubRpm]]:
    # One spec per (epoch, version, release); an arch package leads when there is one,
    # since a noarch main package cannot have arch subpackages.
    groups: dict[tuple[object, ...], list[StubRpm]] = {}
    for package in packages:
        groups.setdefault((package.epoch, package.version, package.release), []).append(package)
    return [sorted(g, key=lambda p: p.arch == "noarch") for g in groups.values()]


def _build_into(target: Path, packages: Sequence[StubRpm]) -> StubRpmRepo:
    www = target / "www"
    repo = www / CUDA_DIR
    repo.mkdir(parents=True)
    (www / BASE_DIR).mkdir()
    work = target / "work"
    # A short path: gpg-agent's socket lives in GNUPGHOME and paths over 107 bytes fail.
    gnupg = Path(tempfile.mkdtemp(prefix="grt-rpmgpg-"))
    try:
        gnupg.chmod(0o700)
        fingerprint = make_key(gnupg, "gpuready stub CUDA rpm repository")
        keyring = repo / GPGKEY_NAME
        keyring.write_text(
            _run(
                ["gpg", "--batch", "--armor", "--export", fingerprint],
                env={"GNUPGHOME": str(gnupg)},
            )
        )
        for number, group in enumerate(_groups(packages)):
            payload = work / f"payload-{number}"
            payload.mkdir(parents=True)
            for package in group:
                for path, stub in package.files.items():
                    dest = payload / path.lstrip("/")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(stub.data())
                    dest.chmod(stub.mode)
            spec = work / f"stub-{number}.spec"
            spec.write_text(_spec(group, payload), encoding="utf-8")
            _run(
                [
                    "rpmbuild", "-bb", "--target", ARCH,
                    "--define", f"_topdir {work / 'top'}",
                    "--define", f"_rpmdir {work / 'rpms'}",
                    # Debian's rpm has no EL brp scripts; nothing here needs stripping.
                    "--define", "__os_install_post %{nil}",
                    "--define", "debug_package %{nil}",
                    "--define", "_build_id_links none",
                    "--define", "_binary_payload w9.gzdio",
                    str(spec),
                ]
            )  # fmt: skip
        built = sorted((work / "rpms").rglob("*.rpm"))
        base = {p.filename for p in packages if not p.nvidia}
        placed = []
        for rpm in built:
            placed.append(www / (BASE_DIR if rpm.name in base else CUDA_DIR) / rpm.name)
            shutil.move(str(rpm), placed[-1])
        _run(
            [
                "rpmsign", "--addsign",
                "--define", f"_gpg_name {fingerprint}",
                "--define", f"_gpg_path {gnupg}",
                # Debian's rpm looks for gpg2; Debian ships gpg.
                "--define", f"__gpg {shutil.which('gpg', path=_ENV['PATH']) or 'gpg'}",
                *(str(path) for path in placed),
            ]
        )  # fmt: skip
    finally:
        subprocess.run(
            ["gpgconf", "--kill", "all"], env={**_ENV, "GNUPGHOME": str(gnupg)},
            capture_output=True, check=False,
        )  # fmt: skip
        shutil.rmtree(gnupg, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    expected = {p.filename for p in packages}
    present = {p.name for p in www.glob("*/*.rpm")}
    if expected != present:
        raise StubRpmError(f"rpmbuild made {sorted(present ^ expected)} unexpectedly")
    _run(["createrepo_c", "--quiet", "--no-database", str(repo)])
    modules = target / "modules.yaml"
    modules.write_text(modules_yaml(module_streams(packages)), encoding="utf-8")
    _run(["modifyrepo_c", "--mdtype=modules", str(modules), str(repo / "repodata")])
    for directory in (BASE_DIR, CRB_DIR):
        (www / directory).mkdir(exist_ok=True)
        _run(["createrepo_c", "--quiet", "--no-database", str(www / directory)])
    listing = [(p.name, p.evr, p.arch) for p in packages]
    (target / "manifest.json").write_text(
        json.dumps({"fingerprint": fingerprint, "packages": listing}, indent=1), encoding="utf-8"
    )
    return StubRpmRepo(www, keyring, fingerprint, tuple(listing))


def _load(target: Path) -> StubRpmRepo | None:
    try:
        manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return StubRpmRepo(
        target / "www",
        target / "www" / CUDA_DIR / GPGKEY_NAME,
        str(manifest["fingerprint"]),
        tuple((str(n), str(e), str(a)) for n, e, a in manifest["packages"]),
    )


def build_rpm_repo(
    cache_dir: Path | None = None, packages: Sequence[StubRpm] | None = None
) -> StubRpmRepo:
    """The stub dnf repository, built on first use and cached by :func:`repo_key`.

    Args:
        cache_dir: where repositories are cached (default :data:`CACHE_DIR`).
        packages: the packages (default :func:`stub_rpms` for this machine's kernel).

    Raises:
        StubRpmUnavailable: a build tool is missing.
        StubRpmError: a build step failed.
    """
    cache = cache_dir or CACHE_DIR
    chosen = list(packages) if packages is not None else stub_rpms()
    final = cache / f"rpmrepo-{repo_key(chosen)}"
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
        raise StubRpmError(f"{final} has no manifest after the build")
    # The served tree must be readable by whoever serves it, whatever the umask.
    for path in [final, *final.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return built


# ---------------------------------------------------------------- RHEL-shaped hosts


def repo_file(url: str, name: str = "gpuready-stub-cuda", enabled: bool = True) -> str:
    """A .repo file for the stub repository at ``url``, as NVIDIA's cuda-rhel9.repo is."""
    return (
        f"[{name}]\nname=stub CUDA rhel9 x86_64\nbaseurl={url}\n"
        f"enabled={int(enabled)}\ngpgcheck=1\ngpgkey={url}/{GPGKEY_NAME}\n"
    )


def shape_rhel_host(host: TestHost, repo: StubRpmRepo, url: str) -> None:
    """Make a started Debian test host look like Rocky 9 to Ansible, rpm and dnf.

    Writes into the host's own overlay: Rocky's os-release and release files,
    Rocky's dnf.conf, an rpm database in /var/lib/rpm holding
    :data:`BASE_PACKAGE`, a ``baseos`` repository of the distribution's
    stand-ins and a disabled, empty ``crb``, both served from ``url``. The
    stub CUDA repository itself is not configured: that is the roles' work.

    Args:
        host: a started host whose root has :data:`RHEL_HOST_PACKAGES`.
        repo: the stub repository (for the base package).
        url: where the hosts reach the served tree (no trailing slash); the CUDA
            repository is ``url/cuda``.

    Raises:
        StubRpmError: a command on the host failed.
    """
    root = host.root
    for relative in (
        "etc/os-release",
        "usr/lib/os-release",
        "etc/debian_version",
        "etc/lsb-release",
        "etc/dnf/dnf.conf",
    ):
        path = root / relative
        if path.is_symlink() or path.exists():
            path.unlink()  # os-release is a link into /usr/lib on Debian
    (root / "usr/lib/os-release").write_text(ROCKY_OS_RELEASE)
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    (root / "etc/rocky-release").write_text(ROCKY_RELEASE)
    (root / "etc/redhat-release").symlink_to("rocky-release")
    (root / "etc/system-release").symlink_to("rocky-release")
    (root / "etc/dnf").mkdir(parents=True, exist_ok=True)
    (root / "etc/dnf/dnf.conf").write_text(ROCKY_DNF_CONF)
    # Debian's dnf-plugins-core enables the "local" plugin, whose repository EL lacks.
    (root / "etc/dnf/plugins").mkdir(parents=True, exist_ok=True)
    (root / "etc/dnf/plugins/local.conf").write_text("[main]\nenabled=0\n")
    (root / "etc/rpm").mkdir(parents=True, exist_ok=True)
    (root / "etc/rpm/macros.dbpath").write_text(RPM_DBPATH_MACRO)
    repos = root / "etc/yum.repos.d"
    repos.mkdir(parents=True, exist_ok=True)
    # The distribution's own repositories, as a Rocky host has them configured: the
    # stand-ins (epel-release, dkms, kernel-devel-matched, the versionlock plugin) and
    # an empty CRB, disabled as on a fresh Rocky install.
    (repos / "rocky.repo").write_text(
        f"[baseos]\nname=Rocky Linux 9 - BaseOS (stub)\nbaseurl={url}/{BASE_DIR}\n"
        f"enabled=1\ngpgcheck=1\ngpgkey={url}/{CUDA_DIR}/{GPGKEY_NAME}\n\n"
        f"[crb]\nname=Rocky Linux 9 - CRB (stub, empty)\nbaseurl={url}/{CRB_DIR}\n"
        "enabled=0\ngpgcheck=0\n"
    )
    base = repo.rpm(BASE_PACKAGE)
    shutil.copy(base, root / "tmp" / base.name)
    # --justdb: the Debian root already has the files; --nosignature: the key is the
    # repository's to import, as dnf does on first install.
    for command in (
        "rpm --initdb",
        f"rpm -i --justdb --nosignature --nodeps /tmp/{base.name} && rm -f /tmp/{base.name}",
    ):
        rc, out, err = host.run(command)
        if rc != 0:
            raise StubRpmError(f"{host.name}: {command}: {err.strip() or out.strip()}")
