"""Stub packages every NVIDIA CUDA apt repository carries alike (Debian 12, Ubuntu).

CUDA Toolkit, cuDNN 9, NCCL, DCGM 4 and the container toolkit have one name and
one version format across the deb repositories (nvidia-packages.md §0 rows marked
"(deb)", §4). Each entry names the reference row it comes from.
"""

from __future__ import annotations

from tests.provision.stubpkg import (
    FAIL_TOOLKIT_MARKER,
    LIBDIR,
    StubFile,
    StubPackage,
    exact,
    library,
    sh,
)

# §4 CUDA Toolkit: `cuda-toolkit-<M>-<m>`; §5: CUDA 12.4 Update 1 bundles 550.54.15.
CUDA_RELEASE = "12.4"
TOOLKIT_VERSION = "12.4.1"
NVCC_VERSION = "12.4.131"
# §4 component pins: `cuda-toolkit-config-common=12.2.140-1` (its own <M.m.p> line).
CONFIG_COMMON_VERSION = "12.4.127"
# §4 cuDNN runtime: `libcudnn9-cuda-12=9.5.1.17-1` (also `9.2.1.18-1`, ...).
CUDNN_VERSIONS = ("9.1.0.70", "9.2.1.18")
# §4 NCCL: `libnccl2=<x.y.z>-1+cuda<M.m>`, e.g. `2.23.4-1+cuda12.6`; rpm `+cuda12.4`.
NCCL_VERSIONS = ("2.23.4-1+cuda12.4", "2.23.4-1+cuda12.6", "2.26.5-1+cuda12.9")
# §4 DCGM: deb `1:4.4.1-1` (epoch 1); `datacenter-gpu-manager-4-cuda13_4.5.2-1_amd64.deb`.
DCGM_VERSIONS = ("1:4.4.1-1", "1:4.5.2-1")
# §4 nvidia-container-toolkit: all four `=<x.y.z>-1`, seen at 1.19.1-1 and 1.20.0-1.
CONTAINER_TOOLKIT_VERSIONS = ("1.19.1", "1.20.0")

# What ``nvcc --version`` of CUDA 12.4 Update 1 prints (its build line and date).
NVCC_VERSION_TEXT = f"""\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Mar_28_02:18:24_PDT_2024
Cuda compilation tools, release {CUDA_RELEASE}, V{NVCC_VERSION}
Build cuda_{CUDA_RELEASE}.r{CUDA_RELEASE}/compiler.34097967_0
"""


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


def toolkit() -> list[StubPackage]:
    """CUDA Toolkit 12.4: the meta, nvcc and the links package."""
    dashed = CUDA_RELEASE.replace(".", "-")
    prefix = f"/usr/local/cuda-{CUDA_RELEASE}"
    priority = CUDA_RELEASE.replace(".", "")
    major = CUDA_RELEASE.split(".", maxsplit=1)[0]
    return [
        # §4 CUDA Toolkit, component pins: `cuda-nvcc-12-2=12.2.140-1` (idx:65933029383).
        StubPackage(
            f"cuda-nvcc-{dashed}",
            f"{NVCC_VERSION}-1",
            description=f"CUDA nvcc {CUDA_RELEASE}",
            files={f"{prefix}/bin/nvcc": StubFile(_nvcc_script(), 0o755)},
        ),
        # §4 CUDA Toolkit, component pins: `cuda-toolkit-config-common=12.2.140-1`.
        StubPackage(
            "cuda-toolkit-config-common",
            f"{CONFIG_COMMON_VERSION}-1",
            architecture="all",
            description="CUDA links and library paths",
            files={
                f"/etc/ld.so.conf.d/988_cuda-{major}.conf": StubFile(
                    f"{prefix}/targets/x86_64-linux/lib\n"
                )
            },
            # /usr/local/cuda and /usr/local/cuda-12 are alternatives, as in the real packages.
            # The second deliberate failure (a role after the driver's fails), where
            # the marker exists.
            postinst=sh(
                f"""
if [ "$1" = configure ] && [ -e {FAIL_TOOLKIT_MARKER} ]; then
    echo "update-alternatives: error: cannot stat /usr/local/cuda-{CUDA_RELEASE}" >&2
    exit 1
fi
if [ "$1" = configure ]; then
    update-alternatives --install /usr/local/cuda cuda {prefix} {priority}
    update-alternatives --install /usr/local/cuda-{major} cuda-{major} {prefix} {priority}
fi
"""
            ),
            prerm=sh(
                f"""
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    update-alternatives --remove cuda {prefix}
    update-alternatives --remove cuda-{major} {prefix}
fi
"""
            ),
        ),
        # §4 CUDA Toolkit, "Meta, no driver": `cuda-toolkit-12-4`, `cuda-toolkit-12-2=12.2.2-1`.
        StubPackage(
            f"cuda-toolkit-{dashed}",
            f"{TOOLKIT_VERSION}-1",
            depends=(f"cuda-nvcc-{dashed} (>= {NVCC_VERSION})", "cuda-toolkit-config-common"),
            description=f"CUDA Toolkit {CUDA_RELEASE} (meta)",
        ),
    ]


def cudnn(version: str) -> list[StubPackage]:
    """cuDNN 9 for CUDA 12 at ``version`` (``9.1.0.70``): runtime, dev, meta."""
    deb = f"{version}-1"
    major = version.split(".", maxsplit=1)[0]
    # §4 cuDNN, header (deb): /usr/include/x86_64-linux-gnu/cudnn_version_v9.h.
    header = f"/usr/include/x86_64-linux-gnu/cudnn_version_v{major}.h"
    return [
        # §4 cuDNN runtime: `libcudnn9-cuda-12=<9.x.y.z>-1` (idx:66447973158).
        StubPackage(
            "libcudnn9-cuda-12",
            deb,
            description="cuDNN runtime libraries for CUDA 12",
            files=library("libcudnn.so", version),
        ),
        # §4 cuDNN dev: `libcudnn9-dev-cuda-12=<v>-1` (idx:16291704502).
        StubPackage(
            "libcudnn9-dev-cuda-12",
            deb,
            depends=(exact("libcudnn9-cuda-12", deb),),
            description="cuDNN development headers for CUDA 12",
            files={header: StubFile(cudnn_header(version))},
            # §4 cuDNN alternatives (deb), for v9 by inference: the header via update-alternatives.
            postinst=sh(
                f"""
if [ "$1" = configure ]; then
    update-alternatives --install /usr/include/cudnn_version.h cudnn_version_h {header} {major}00
fi
"""
            ),
            prerm=sh(
                f"""
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    update-alternatives --remove cudnn_version_h {header}
fi
"""
            ),
        ),
        # §4 cuDNN metas: `cudnn9-cuda-12=9.4.0.58-1` (idx:12565489583).
        StubPackage(
            "cudnn9-cuda-12",
            deb,
            depends=(exact("libcudnn9-cuda-12", deb), exact("libcudnn9-dev-cuda-12", deb)),
            description="cuDNN 9 for CUDA 12 (meta)",
        ),
    ]


def nccl(version: str) -> list[StubPackage]:
    """NCCL at the full deb version ``version`` (``2.23.4-1+cuda12.4``)."""
    upstream = version.split("-", 1)[0]
    return [
        # §4 NCCL deb: `libnccl2=<x.y.z>-1+cuda<M.m>` (idx:12565489583, idx:26823007645).
        StubPackage(
            "libnccl2",
            version,
            description="NVIDIA Collective Communication Library (NCCL) runtime",
            files=library("libnccl.so", upstream),
        ),
        # §4 NCCL deb: `libnccl-dev=<same>`.
        StubPackage(
            "libnccl-dev",
            version,
            depends=(exact("libnccl2", version),),
            description="NCCL development files",
            files={"/usr/include/nccl.h": StubFile(_nccl_header(upstream))},
        ),
    ]


def _nccl_header(version: str) -> str:
    major, minor, patch = version.split(".")
    return (
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
        '#define NCCL_SUFFIX ""\n'
    )


def dcgm(version: str) -> list[StubPackage]:
    """DCGM 4 at the deb version ``version`` (``1:4.4.1-1``, with the epoch)."""
    upstream = version.split(":", 1)[1].split("-", 1)[0]
    core = "datacenter-gpu-manager-4-core"
    return [
        # §4 DCGM 4 packages: `datacenter-gpu-manager-4-core` (idx:59834674932); epoch `1:`.
        StubPackage(
            core,
            version,
            description="NVIDIA Datacenter GPU Manager 4 (core)",
            files={
                "/usr/bin/nv-hostengine": StubFile(sh("exit 0"), 0o755),
                "/usr/bin/dcgmi": StubFile(sh(f'echo "Version : {upstream}"'), 0o755),
                # §4 DCGM Service: unit `nvidia-dcgm.service`, runs `nv-hostengine`.
                "/lib/systemd/system/nvidia-dcgm.service": StubFile(
                    "[Unit]\nDescription=NVIDIA DCGM service\n\n[Service]\n"
                    "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\n\n"
                    "[Install]\nWantedBy=multi-user.target\n"
                ),
            },
        ),
        # §4 DCGM 4 packages: `-cuda12`; pitfall 13 / §4 "Pin pitfall": `-cuda<N>` depends
        # on the exact `-core` version, so a partial pin fails with unmet dependencies.
        StubPackage(
            "datacenter-gpu-manager-4-cuda12",
            version,
            depends=(exact(core, version),),
            description="NVIDIA Datacenter GPU Manager 4 for CUDA 12",
            files=library("libdcgm_cublas_proxy12.so", upstream),
        ),
        # §4 DCGM 4 packages: `datacenter-gpu-manager-4-proprietary`.
        StubPackage(
            "datacenter-gpu-manager-4-proprietary",
            version,
            depends=(exact(core, version),),
            description="NVIDIA Datacenter GPU Manager 4 (proprietary modules)",
            files=library("libdcgmmoduleprofiling.so", upstream),
        ),
        # §4 DCGM 4 packages: `-proprietary-cuda<N>`.
        StubPackage(
            "datacenter-gpu-manager-4-proprietary-cuda12",
            version,
            depends=(
                exact("datacenter-gpu-manager-4-proprietary", version),
                exact("datacenter-gpu-manager-4-cuda12", version),
            ),
            description="NVIDIA Datacenter GPU Manager 4 proprietary modules for CUDA 12",
        ),
    ]


def container_toolkit(version: str) -> list[StubPackage]:
    """The container toolkit's four packages at ``version`` (``1.19.1``)."""
    deb = f"{version}-1"
    ctk = sh(
        f"""
case "$1" in
    --version|-v) echo "NVIDIA Container Toolkit CLI version {version}" ;;
    runtime) exit 0 ;;
    *) echo "nvidia-ctk: stub" >&2; exit 1 ;;
esac
"""
    )
    # §4 nvidia-container-toolkit: "Pin all four together ... each `=<x.y.z>-1`"
    # (idx:60812826458, idx:67666954195).
    return [
        StubPackage(
            "libnvidia-container1",
            deb,
            description="NVIDIA container runtime library",
            files=library("libnvidia-container.so", version),
        ),
        StubPackage(
            "libnvidia-container-tools",
            deb,
            depends=(exact("libnvidia-container1", deb),),
            description="NVIDIA container runtime library (command-line tools)",
            files={"/usr/bin/nvidia-container-cli": StubFile(sh("exit 0"), 0o755)},
        ),
        StubPackage(
            "nvidia-container-toolkit-base",
            deb,
            description="NVIDIA Container Toolkit base",
            files={"/usr/bin/nvidia-ctk": StubFile(ctk, 0o755)},
        ),
        StubPackage(
            "nvidia-container-toolkit",
            deb,
            depends=(
                exact("nvidia-container-toolkit-base", deb),
                exact("libnvidia-container-tools", deb),
            ),
            description="NVIDIA Container Toolkit",
            files={"/usr/bin/nvidia-container-runtime-hook": StubFile(sh("exit 0"), 0o755)},
        ),
    ]


def cuda_libraries() -> list[StubPackage]:
    """Toolkit, every cuDNN, NCCL, DCGM and container-toolkit version above."""
    packages = toolkit()
    for version in CUDNN_VERSIONS:
        packages += cudnn(version)
    for version in NCCL_VERSIONS:
        packages += nccl(version)
    for version in DCGM_VERSIONS:
        packages += dcgm(version)
    for version in CONTAINER_TOOLKIT_VERSIONS:
        packages += container_toolkit(version)
    return packages


__all__ = [
    "CONTAINER_TOOLKIT_VERSIONS",
    "CUDA_RELEASE",
    "CUDNN_VERSIONS",
    "DCGM_VERSIONS",
    "LIBDIR",
    "NCCL_VERSIONS",
    "NVCC_VERSION",
    "NVCC_VERSION_TEXT",
    "TOOLKIT_VERSION",
    "cuda_libraries",
    "cudnn",
    "cudnn_header",
    "dcgm",
    "nccl",
    "toolkit",
]
