"""What a stub package is, and the few payloads the stubs share.

The package sets themselves are data, one module per repository shape
(:mod:`tests.provision.stubs_debian12`, :mod:`tests.provision.stubs_ubuntu`,
:mod:`tests.provision.stubs_common` for the families every CUDA repository carries
alike); :mod:`tests.provision.stubrepo` builds, signs and serves them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

FAIL_INSTALL_MARKER = "/etc/gpuready-fail-install"
# A failure in a role after the driver's: the CUDA Toolkit's links package fails.
FAIL_TOOLKIT_MARKER = "/etc/gpuready-fail-toolkit"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
NVIDIA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos"

# Stands for the generated public keyring until the key exists (the cache key
# must not depend on a key that is made fresh for every build).
KEYRING_PLACEHOLDER = b"@GPUREADY-STUB-KEYRING@"


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
    """One binary package of a stub repository.

    Files under ``/etc`` are declared conffiles, as dpkg-deb expects.

    Args:
        name: the package name, e.g. ``nvidia-driver-550-open``.
        version: the Debian version, e.g. ``550.90.07-0ubuntu1`` or ``1:4.4.1-1``.
        architecture: ``amd64`` or ``all``.
        depends: the ``Depends`` entries, e.g. ``("libcudnn9-cuda-12 (= 9.1.0.70-1)",)``.
        description: one line for the control file.
        files: absolute path -> file.
        postinst: the postinst script, if any.
        prerm: the prerm script, if any.
        helper: not an NVIDIA package but a stand-in for one of the distribution's
            (dkms, kernel headers): exempt from the reference-document check, the
            reason in ``description``.
    """

    name: str
    version: str
    architecture: str = "amd64"
    depends: tuple[str, ...] = ()
    description: str = ""
    files: Mapping[str, StubFile] = field(default_factory=dict)
    postinst: str | None = None
    prerm: str | None = None
    helper: bool = False

    @property
    def filename(self) -> str:
        """The .deb's file name (``name_version_arch.deb``; as dpkg names it, no epoch)."""
        upstream = self.version.split(":", 1)[-1]
        return f"{self.name}_{upstream}_{self.architecture}.deb"

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


def sh(body: str) -> str:
    """A ``/bin/sh`` maintainer script (``set -e``) with ``body``."""
    return "#!/bin/sh\nset -e\n" + body.strip() + "\n"


def exact(name: str, version: str) -> str:
    """A ``Depends`` entry on exactly ``version`` (``name (= version)``)."""
    return f"{name} (= {version})"


def dkms_failure_postinst(module: str, version: str) -> str:
    """The one deliberate failure: a DKMS build that fails where the marker exists."""
    return sh(
        f"""
if [ "$1" = configure ] && [ -e {FAIL_INSTALL_MARKER} ]; then
    echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64)" >&2
    echo "Consult /var/lib/dkms/{module}/{version}/build/make.log for more information." >&2
    exit 1
fi
"""
    )


def dkms_source(version: str) -> dict[str, StubFile]:
    """The ``dkms.conf`` a DKMS source package ships for ``version``."""
    return {
        f"/usr/src/nvidia-{version}/dkms.conf": StubFile(
            f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\n'
        )
    }


def nvidia_smi(version: str) -> dict[str, StubFile]:
    """An ``nvidia-smi`` that fails as it does on a host without the module loaded."""
    del version
    return {
        "/usr/bin/nvidia-smi": StubFile(
            sh(
                "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and "
                'running."\nexit 9'
            ),
            0o755,
        )
    }


def library(soname: str, version: str) -> dict[str, StubFile]:
    """A placeholder ``<soname>.<version>`` in the multiarch library directory."""
    return {f"{LIBDIR}/{soname}.{version}": StubFile(f"stub {soname} {version}\n")}


def persistenced() -> dict[str, StubFile]:
    """``/usr/bin/nvidia-persistenced`` (exits 0)."""
    return {"/usr/bin/nvidia-persistenced": StubFile(sh("exit 0"), 0o755)}


def fabricmanager(version: str) -> dict[str, StubFile]:
    """``nv-fabricmanager`` and its unit file."""
    return {
        "/usr/bin/nv-fabricmanager": StubFile(
            sh(f'echo "Fabric Manager version is : {version}"'), 0o755
        ),
        "/lib/systemd/system/nvidia-fabricmanager.service": StubFile(
            "[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\n"
            "ExecStart=/usr/bin/nv-fabricmanager\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
    }


def pinning_preferences(name: str, packages: Iterable[str], pin: str) -> dict[str, StubFile]:
    """The apt preferences file an ``nvidia-driver-pinning-*`` package ships.

    nvidia-packages.md §2a/§2c: installing ``nvidia-driver-pinning-<branch>`` or
    ``-<version>`` before the driver is what locks the branch or the exact version
    (idx:66634192732, idx:67666954195). The file's text is not in the reference;
    its priority is 1000, the value issue 11 found the roles' own pin tying with.

    Args:
        name: the pinning package's name (the file is named after it).
        packages: the driver packages it pins.
        pin: the apt version pattern, ``590.*`` (branch) or ``590.48.01-*`` (exact).
    """
    # apt ignores files in preferences.d whose "extension" is not .pref, and a
    # version-named file (`...-590.48.01`) has one: the .pref keeps it read.
    return {
        f"/etc/apt/preferences.d/{name}.pref": StubFile(
            f"Package: {' '.join(sorted(set(packages)))}\nPin: version {pin}\nPin-Priority: 1000\n"
        )
    }


def keyring(distro: str) -> list[StubPackage]:
    """``cuda-keyring`` for ``distro`` (``debian12``, ``ubuntu2404``).

    nvidia-packages.md §1: ``cuda-keyring_1.1-1_all.deb`` installs
    ``/usr/share/keyrings/cuda-archive-keyring.gpg`` and writes
    ``/etc/apt/sources.list.d/cuda-<distro>-<arch>.list`` pointing at NVIDIA's URL
    (idx:40847410975, idx:52562693151); the repository role must remove that list.
    """
    url = f"{NVIDIA_REPOS}/{distro}/x86_64/"
    return [
        StubPackage(
            "cuda-keyring",
            "1.1-1",
            architecture="all",
            description="GPG keyring for the CUDA repository",
            files={
                KEYRING_PATH: StubFile(KEYRING_PLACEHOLDER),
                nvidia_list_path(distro): StubFile(f"deb [signed-by={KEYRING_PATH}] {url} /\n"),
            },
        )
    ]


def nvidia_list_path(distro: str) -> str:
    """Where the real keyring package writes NVIDIA's list for ``distro``."""
    return f"/etc/apt/sources.list.d/cuda-{distro}-x86_64.list"


def nvidia_url(distro: str) -> str:
    """NVIDIA's CUDA repository URL for ``distro`` (with the trailing slash)."""
    return f"{NVIDIA_REPOS}/{distro}/x86_64/"


def kernel_stand_ins(kernel_release: str, meta: str) -> list[StubPackage]:
    """The kernel packages a real host has, for this machine's kernel (hosts share it).

    Not NVIDIA's (Debian's or Canonical's archive): the test hosts reach no
    distribution mirror. ``linux-headers-<meta>`` depends on the running kernel's
    headers as the real meta does; ``linux-image-*`` exist so a kernel hold has
    something to hold.

    Args:
        kernel_release: ``uname -r`` of the hosts.
        meta: the flavour meta name: ``amd64`` (Debian) or ``generic`` (Ubuntu).
    """
    why = "stand-in for the distribution's kernel package (hosts share this machine's kernel)"
    return [
        StubPackage(
            f"linux-headers-{kernel_release}",
            "1.0-1",
            description=f"kernel headers for {kernel_release}: {why}",
            files={f"/usr/src/linux-headers-{kernel_release}/Makefile": StubFile("# stub\n")},
            helper=True,
        ),
        StubPackage(
            f"linux-headers-{meta}",
            "1.0-1",
            depends=(f"linux-headers-{kernel_release}",),
            description=f"kernel headers meta package: {why}",
            helper=True,
        ),
        StubPackage(
            f"linux-image-{kernel_release}",
            "1.0-1",
            description=f"kernel image {kernel_release}: {why}",
            files={f"/boot/config-{kernel_release}": StubFile("# stub\n")},
            helper=True,
        ),
        StubPackage(
            f"linux-image-{meta}",
            "1.0-1",
            depends=(f"linux-image-{kernel_release}",),
            description=f"kernel image meta package: {why}",
            helper=True,
        ),
    ]


def dkms_stand_in() -> StubPackage:
    """Debian's/Ubuntu's ``dkms``: the hosts reach no distribution mirror."""
    return StubPackage(
        "dkms",
        "3.0.10-8+gpuready1",
        architecture="all",
        description="Dynamic Kernel Module System: stand-in for the distribution's package",
        files={"/usr/sbin/dkms": StubFile(sh('[ "$1" = status ] && exit 0; exit 0'), 0o755)},
        helper=True,
    )
