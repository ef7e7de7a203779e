"""Find and load the host's own CUDA runtime and cuBLAS libraries, and call them safely.

The burn-in uses the libraries provisioning installed (the CUDA toolkit, or the
pip wheels under ``site-packages/nvidia/*/lib``), never a copy of its own. Every
function is declared with its C signature before the first call, and every
status is checked: a non-zero one raises :class:`CudaError` naming the function
and the library's own error string. All calls go through :class:`CudaApi`, so
tests substitute fake library objects and read what was passed.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import re
import site
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from validator.node.burnin.backend import BackendUnavailable

# Newest first: a host with several toolkits uses the newest one its driver accepts.
CUDA_MAJORS = (13, 12, 11)
PROVISION_HINT = "install the CUDA toolkit (gpuready provision)"

# cudaMemcpyKind
MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
# cudaStreamCreateWithFlags: work on the stream does not wait for, nor hold up, stream 0
STREAM_NON_BLOCKING = 1
HOST_ALLOC_DEFAULT = 0  # cudaHostAlloc: page-locked, visible to the current context
# cudaError_t values that mean "already so" for peer access, not a failure.
ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
ERROR_PEER_ACCESS_NOT_ENABLED = 705

# The header's names of the constants above (tests/realnv checks each value against them).
HEADER_NAMES = {
    "MEMCPY_HOST_TO_DEVICE": "cudaMemcpyHostToDevice",
    "MEMCPY_DEVICE_TO_HOST": "cudaMemcpyDeviceToHost",
    "MEMCPY_DEVICE_TO_DEVICE": "cudaMemcpyDeviceToDevice",
    "STREAM_NON_BLOCKING": "cudaStreamNonBlocking",
    "HOST_ALLOC_DEFAULT": "cudaHostAllocDefault",
    "ERROR_PEER_ACCESS_ALREADY_ENABLED": "cudaErrorPeerAccessAlreadyEnabled",
    "ERROR_PEER_ACCESS_NOT_ENABLED": "cudaErrorPeerAccessNotEnabled",
}

# cuBLAS status names, for libraries older than cublasGetStatusString (cuBLAS 11.4).
CUBLAS_STATUS_NAMES = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}

_INT = ctypes.c_int
_UINT = ctypes.c_uint
_SIZE = ctypes.c_size_t
_PTR = ctypes.c_void_p
_INT_P = ctypes.POINTER(ctypes.c_int)
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_PTR_P = ctypes.POINTER(ctypes.c_void_p)
_FLOAT_P = ctypes.POINTER(ctypes.c_float)
_MATRIX = (_PTR, _INT, _INT)  # a matrix argument of GemmEx: pointer, cudaDataType_t, leading dim

# name: (restype, argtypes), as cuda_runtime_api.h declares them (CUDA 11 to 13). Handles,
# streams, events and device pointers are void*; enums (cudaMemcpyKind) are int.
CUDART_FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    "cudaGetDeviceCount": (_INT, [_INT_P]),
    "cudaSetDevice": (_INT, [_INT]),
    # char* pciBusId, int len, int device
    "cudaDeviceGetPCIBusId": (_INT, [ctypes.c_char_p, _INT, _INT]),
    "cudaMemGetInfo": (_INT, [_SIZE_P, _SIZE_P]),
    "cudaMalloc": (_INT, [_PTR_P, _SIZE]),
    "cudaFree": (_INT, [_PTR]),
    "cudaMemcpy": (_INT, [_PTR, _PTR, _SIZE, _INT]),
    # dst, src, count, kind, stream
    "cudaMemcpyAsync": (_INT, [_PTR, _PTR, _SIZE, _INT, _PTR]),
    "cudaMemset": (_INT, [_PTR, _INT, _SIZE]),
    "cudaHostAlloc": (_INT, [_PTR_P, _SIZE, _UINT]),
    "cudaFreeHost": (_INT, [_PTR]),
    "cudaDeviceSynchronize": (_INT, []),
    "cudaStreamCreateWithFlags": (_INT, [_PTR_P, _UINT]),
    "cudaStreamDestroy": (_INT, [_PTR]),
    "cudaStreamSynchronize": (_INT, [_PTR]),
    "cudaStreamWaitEvent": (_INT, [_PTR, _PTR, _UINT]),
    "cudaEventCreate": (_INT, [_PTR_P]),
    "cudaEventRecord": (_INT, [_PTR, _PTR]),
    "cudaEventSynchronize": (_INT, [_PTR]),
    "cudaEventElapsedTime": (_INT, [_FLOAT_P, _PTR, _PTR]),
    "cudaEventDestroy": (_INT, [_PTR]),
    "cudaGetErrorString": (ctypes.c_char_p, [_INT]),
}

# The interconnect measurement's calls beyond the burn's. Declared when the library has
# them and required only by the measurement (validator.node.bandwidth), so a runtime or a
# test fake the burn runs on is not refused for lacking them.
CUDART_PEER_FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    # int* canAccessPeer, int device, int peerDevice
    "cudaDeviceCanAccessPeer": (_INT, [_INT_P, _INT, _INT]),
    # int peerDevice, unsigned int flags (must be 0)
    "cudaDeviceEnablePeerAccess": (_INT, [_INT, _UINT]),
    "cudaDeviceDisablePeerAccess": (_INT, [_INT]),
    # void* dst, int dstDevice, const void* src, int srcDevice, size_t count, cudaStream_t
    "cudaMemcpyPeerAsync": (_INT, [_PTR, _INT, _PTR, _INT, _SIZE, _PTR]),
    # returns and clears the last error (peer access calls leave 704 behind)
    "cudaGetLastError": (_INT, []),
}

CUBLAS_FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    "cublasCreate_v2": (_INT, [_PTR_P]),
    "cublasDestroy_v2": (_INT, [_PTR]),
    "cublasSetMathMode": (_INT, [_PTR, _INT]),
    "cublasSetStream_v2": (_INT, [_PTR, _PTR]),
    # handle, transa, transb, m, n, k, alpha, (A, Atype, lda), (B, Btype, ldb), beta,
    # (C, Ctype, ldc), computeType, algo
    "cublasGemmEx": (
        _INT,
        [_PTR, _INT, _INT, _INT, _INT, _INT, _PTR, *_MATRIX, *_MATRIX, _PTR, *_MATRIX, _INT, _INT],
    ),
}
CUBLAS_OPTIONAL_FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    "cublasGetStatusString": (ctypes.c_char_p, [_INT]),
}


class CudaError(RuntimeError):
    """A CUDA runtime or cuBLAS call returned a non-zero status."""

    def __init__(self, function: str, status: int, message: str) -> None:
        super().__init__(f"{function} failed: {message} (status {status})")
        self.function = function
        self.status = status


@dataclass(frozen=True)
class CudaLibraries:
    """The files picked for one CUDA major version (a path, or a bare name the loader resolves)."""

    major: int
    cudart: str
    cublas: str
    cublaslt: str | None = None

    def describe(self) -> str:
        """The picked files, for messages."""
        files = [self.cudart, *([self.cublaslt] if self.cublaslt else []), self.cublas]
        return ", ".join(files)


@dataclass(frozen=True)
class CudaRuntime:
    """The CUDA runtime alone, for what needs no cuBLAS (the copy measurements)."""

    major: int
    cudart: str  # a path, or a bare name the loader resolves


def _version_key(path: str) -> tuple[int, ...]:
    match = re.search(r"cuda-(\d+)(?:\.(\d+))?", path)
    if not match:
        return (0,)
    return tuple(int(part) for part in match.groups() if part is not None)


def site_package_dirs() -> list[str]:
    """Where pip puts packages for this interpreter (system, user, and ``sys.path``)."""
    dirs: list[str] = []
    # virtualenvs of old pythons lack getsitepackages
    with contextlib.suppress(AttributeError):
        dirs.extend(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        dirs.append(user)
    dirs.extend(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return dirs


def search_dirs(
    environ: dict[str, str] | None = None,
    root: str = "/",
    site_dirs: Sequence[str] | None = None,
) -> list[str]:
    """Directories that may hold the CUDA libraries, in the order they are searched.

    Args:
        environ: the environment (``LD_LIBRARY_PATH``, ``CUDA_HOME``); the process's by default.
        root: prefix of the system paths (tests point it at a fake tree).
        site_dirs: Python package directories whose ``nvidia/*/lib`` pip wheels are searched.

    Returns:
        Existing directories, each once, loader path first.
    """
    env = dict(os.environ) if environ is None else environ
    candidates = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if home:
            candidates += [os.path.join(home, "lib64"), os.path.join(home, "lib")]

    def under(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    candidates.append(under("/usr/local/cuda/lib64"))
    candidates += sorted(
        glob.glob(under("/usr/local/cuda-*/lib64")), key=_version_key, reverse=True
    )
    candidates += sorted(
        glob.glob(under("/usr/local/cuda-*/targets/*/lib")), key=_version_key, reverse=True
    )
    candidates += [
        under(p)
        for p in (
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
        )
    ]
    for base in site_package_dirs() if site_dirs is None else site_dirs:
        candidates += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
    seen: set[str] = set()
    found = []
    for directory in candidates:
        real = os.path.realpath(directory)
        if real in seen or not os.path.isdir(directory):
            continue
        seen.add(real)
        found.append(directory)
    return found


def _first(dirs: Sequence[str], names: Sequence[str]) -> str | None:
    for directory in dirs:
        for name in names:
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
    return None


def _unversioned_major(dirs: Sequence[str], name: str) -> dict[int, str]:
    """``libX.so`` links found, by the major version of the file they point at."""
    majors: dict[int, str] = {}
    for directory in dirs:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        match = re.search(re.escape(name) + r"\.(\d+)", os.path.basename(os.path.realpath(path)))
        if match:
            majors.setdefault(int(match.group(1)), path)
    return majors


def find_cuda_libraries(dirs: Sequence[str]) -> list[CudaLibraries]:
    """Every CUDA major version with both a runtime and cuBLAS in ``dirs``, newest first.

    Raises:
        BackendUnavailable: no major version has both; the message names what is missing.
    """
    found = []
    missing = []
    loose_cudart = _unversioned_major(dirs, "libcudart.so")
    loose_cublas = _unversioned_major(dirs, "libcublas.so")
    for major in CUDA_MAJORS:
        cudart = _first(dirs, [f"libcudart.so.{major}", f"libcudart.so.{major}.0"]) or (
            loose_cudart.get(major)
        )
        cublas = _first(dirs, [f"libcublas.so.{major}"]) or loose_cublas.get(major)
        if cudart and cublas:
            # cuBLAS loads its Lt half by name: the one beside it first.
            lt_dirs = [os.path.dirname(cublas), *dirs]
            lt = _first(lt_dirs, [f"libcublasLt.so.{major}"])
            found.append(CudaLibraries(major=major, cudart=cudart, cublas=cublas, cublaslt=lt))
        elif cudart:
            missing.append(f"libcublas.so.{major}")
    if found:
        return found
    where = ", ".join(dirs) if dirs else "no existing library directory"
    if not missing:
        names = "/".join(f"libcudart.so.{major}" for major in CUDA_MAJORS)
        missing.append(names)
    raise BackendUnavailable(f"{' and '.join(missing)} not found in {where}: {PROVISION_HINT}")


def find_cuda_runtimes(dirs: Sequence[str]) -> list[CudaRuntime]:
    """Every CUDA major version with a runtime (libcudart) in ``dirs``, newest first.

    Raises:
        BackendUnavailable: no runtime at all; the message names the files, the dirs and the fix.
    """
    loose = _unversioned_major(dirs, "libcudart.so")
    found = []
    for major in CUDA_MAJORS:
        files = [f"libcudart.so.{major}", f"libcudart.so.{major}.0"]
        path = _first(dirs, files) or loose.get(major)
        if path:
            found.append(CudaRuntime(major=major, cudart=path))
    if found:
        return found
    where = ", ".join(dirs) if dirs else "no existing library directory"
    names = "/".join(f"libcudart.so.{major}" for major in CUDA_MAJORS)
    raise BackendUnavailable(f"{names} not found in {where}: {PROVISION_HINT}")


def load_library(path: str) -> Any:  # noqa: ANN401 - a ctypes.CDLL
    """Open a shared library so later ones resolve their dependencies against it.

    Raises:
        BackendUnavailable: the loader refused the file (wrong architecture, missing dependency).
    """
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise BackendUnavailable(f"cannot load {path}: {exc}") from None


def declare(lib: Any, table: dict[str, tuple[Any, list[Any]]], *, optional: bool = False) -> None:  # noqa: ANN401
    """Give each function in ``table`` its C signature before it is ever called.

    Raises:
        BackendUnavailable: a required function is missing from the library.
    """
    for name, (restype, argtypes) in table.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            if optional:
                continue
            raise BackendUnavailable(f"{name} is missing from {lib!r}") from None
        function.restype = restype
        function.argtypes = argtypes


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class CudaApi:
    """The CUDA runtime and cuBLAS calls the burn-in makes, each status checked.

    Args:
        cudart: the runtime library (a ``ctypes.CDLL`` or a test's fake).
        cublas: the cuBLAS library (likewise); None for the runtime alone (no cuBLAS call).
    """

    def __init__(self, cudart: Any, cublas: Any = None) -> None:  # noqa: ANN401
        declare(cudart, CUDART_FUNCTIONS)
        declare(cudart, CUDART_PEER_FUNCTIONS, optional=True)
        if cublas is not None:
            declare(cublas, CUBLAS_FUNCTIONS)
            declare(cublas, CUBLAS_OPTIONAL_FUNCTIONS, optional=True)
        self.cudart = cudart
        self.cublas = cublas

    def require_peer_functions(self) -> None:
        """Refuse a runtime without the peer-copy calls (each declared with its signature).

        Raises:
            BackendUnavailable: one is missing; the message names it.
        """
        declare(self.cudart, CUDART_PEER_FUNCTIONS)

    def cuda_error_string(self, status: int) -> str:
        """The runtime's words for a status."""
        try:
            return _text(self.cudart.cudaGetErrorString(status))
        except Exception:  # noqa: BLE001 - an error message must not raise a second error
            return f"CUDA error {status}"

    def cublas_error_string(self, status: int) -> str:
        """cuBLAS's words for a status."""
        try:
            function = self.cublas.cublasGetStatusString
        except AttributeError:
            return CUBLAS_STATUS_NAMES.get(status, f"cuBLAS status {status}")
        return _text(function(status))

    def _rt(self, name: str, *args: Any) -> None:  # noqa: ANN401
        status = int(getattr(self.cudart, name)(*args))
        if status != 0:
            raise CudaError(name, status, self.cuda_error_string(status))

    def _blas(self, name: str, *args: Any) -> None:  # noqa: ANN401
        status = int(getattr(self.cublas, name)(*args))
        if status != 0:
            raise CudaError(name, status, self.cublas_error_string(status))

    # --- runtime ---------------------------------------------------------------------------

    def device_count(self) -> int:
        """How many devices the runtime sees."""
        count = ctypes.c_int(0)
        self._rt("cudaGetDeviceCount", ctypes.byref(count))
        return count.value

    def set_device(self, device: int) -> None:
        """Make ``device`` current for the calling thread."""
        self._rt("cudaSetDevice", device)

    def device_pci_bus_id(self, device: int) -> str:
        """The PCI bus id of CUDA ordinal ``device`` as the runtime writes it ("0000:19:00.0")."""
        text = ctypes.create_string_buffer(64)
        self._rt("cudaDeviceGetPCIBusId", text, len(text), device)
        return text.value.decode("ascii", "replace")

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._rt("cudaMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def malloc(self, size: int) -> int:
        """A device allocation of ``size`` bytes; its address."""
        pointer = ctypes.c_void_p(0)
        self._rt("cudaMalloc", ctypes.byref(pointer), size)
        return int(pointer.value or 0)

    def free(self, pointer: int) -> None:
        """Release a device allocation."""
        self._rt("cudaFree", ctypes.c_void_p(pointer))

    def memcpy(self, dst: int, src: int, size: int, kind: int) -> None:
        """Copy ``size`` bytes (addresses are device or host per ``kind``); blocks."""
        self._rt("cudaMemcpy", ctypes.c_void_p(dst), ctypes.c_void_p(src), size, kind)

    def memcpy_async(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        """Queue a copy of ``size`` bytes on ``stream``; host memory must be page-locked."""
        self._rt(
            "cudaMemcpyAsync", ctypes.c_void_p(dst), ctypes.c_void_p(src), size, kind,
            ctypes.c_void_p(stream),
        )  # fmt: skip

    def host_alloc(self, size: int, flags: int = HOST_ALLOC_DEFAULT) -> int:
        """Page-locked host memory of ``size`` bytes (a copy engine reaches it directly)."""
        pointer = ctypes.c_void_p(0)
        self._rt("cudaHostAlloc", ctypes.byref(pointer), size, flags)
        return int(pointer.value or 0)

    def free_host(self, pointer: int) -> None:
        """Release page-locked host memory."""
        self._rt("cudaFreeHost", ctypes.c_void_p(pointer))

    def memset(self, pointer: int, value: int, size: int) -> None:
        """Fill ``size`` device bytes with ``value``."""
        self._rt("cudaMemset", ctypes.c_void_p(pointer), value, size)

    def synchronize(self) -> None:
        """Wait for everything queued on the current device."""
        self._rt("cudaDeviceSynchronize")

    def stream_create(self, flags: int = STREAM_NON_BLOCKING) -> int:
        """A new stream on the current device (by default one that ignores stream 0)."""
        stream = ctypes.c_void_p(0)
        self._rt("cudaStreamCreateWithFlags", ctypes.byref(stream), flags)
        return int(stream.value or 0)

    def stream_destroy(self, stream: int) -> None:
        """Release a stream (its queued work still completes)."""
        self._rt("cudaStreamDestroy", ctypes.c_void_p(stream))

    def stream_synchronize(self, stream: int) -> None:
        """Block until everything queued on ``stream`` is done."""
        self._rt("cudaStreamSynchronize", ctypes.c_void_p(stream))

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Make later work on ``stream`` wait for the last recording of ``event``."""
        self._rt("cudaStreamWaitEvent", ctypes.c_void_p(stream), ctypes.c_void_p(event), 0)

    def event_create(self) -> int:
        """A new event on the current device."""
        event = ctypes.c_void_p(0)
        self._rt("cudaEventCreate", ctypes.byref(event))
        return int(event.value or 0)

    def event_record(self, event: int, stream: int = 0) -> None:
        """Record ``event`` on ``stream`` (0: the default stream)."""
        self._rt("cudaEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(stream))

    def event_synchronize(self, event: int) -> None:
        """Block until ``event`` has happened."""
        self._rt("cudaEventSynchronize", ctypes.c_void_p(event))

    def event_elapsed_ms(self, start: int, end: int) -> float:
        """Milliseconds between two recorded events."""
        ms = ctypes.c_float(0.0)
        self._rt(
            "cudaEventElapsedTime", ctypes.byref(ms), ctypes.c_void_p(start), ctypes.c_void_p(end)
        )
        return float(ms.value)

    def event_destroy(self, event: int) -> None:
        """Release an event."""
        self._rt("cudaEventDestroy", ctypes.c_void_p(event))

    # --- peers (CUDART_PEER_FUNCTIONS; see require_peer_functions) -------------------------

    def can_access_peer(self, device: int, peer: int) -> bool:
        """Whether ``device`` can reach ``peer``'s memory directly (NVLink or PCIe P2P)."""
        can = ctypes.c_int(0)
        self._rt("cudaDeviceCanAccessPeer", ctypes.byref(can), device, peer)
        return bool(can.value)

    def enable_peer_access(self, peer: int) -> bool:
        """Let the current device reach ``peer``'s memory.

        Returns:
            True when this call enabled it; False when it was enabled already (the
            runtime's 704, cleared from the thread's last error so no later call sees it).
        """
        status = int(self.cudart.cudaDeviceEnablePeerAccess(peer, 0))
        if status == ERROR_PEER_ACCESS_ALREADY_ENABLED:
            self.cudart.cudaGetLastError()
            return False
        if status != 0:
            raise CudaError("cudaDeviceEnablePeerAccess", status, self.cuda_error_string(status))
        return True

    def disable_peer_access(self, peer: int) -> None:
        """Stop the current device reaching ``peer``'s memory (not enabled: nothing to do)."""
        status = int(self.cudart.cudaDeviceDisablePeerAccess(peer))
        if status == ERROR_PEER_ACCESS_NOT_ENABLED:
            self.cudart.cudaGetLastError()
            return
        if status != 0:
            raise CudaError("cudaDeviceDisablePeerAccess", status, self.cuda_error_string(status))

    def memcpy_peer_async(
        self, dst: int, dst_device: int, src: int, src_device: int, size: int, stream: int
    ) -> None:
        """Queue a copy of ``size`` bytes from ``src_device`` to ``dst_device`` on ``stream``.

        Without peer access the driver stages it through host memory: slower, still a copy.
        """
        self._rt(
            "cudaMemcpyPeerAsync", ctypes.c_void_p(dst), dst_device, ctypes.c_void_p(src),
            src_device, size, ctypes.c_void_p(stream),
        )  # fmt: skip

    # --- cuBLAS ----------------------------------------------------------------------------

    def blas_create(self) -> int:
        """A cuBLAS handle on the current device."""
        handle = ctypes.c_void_p(0)
        self._blas("cublasCreate_v2", ctypes.byref(handle))
        return int(handle.value or 0)

    def blas_destroy(self, handle: int) -> None:
        """Release a cuBLAS handle."""
        self._blas("cublasDestroy_v2", ctypes.c_void_p(handle))

    def blas_set_math_mode(self, handle: int, mode: int) -> None:
        """Allow (or forbid) reduced-precision tensor-core math on this handle."""
        self._blas("cublasSetMathMode", ctypes.c_void_p(handle), mode)

    def blas_set_stream(self, handle: int, stream: int) -> None:
        """Queue this handle's later calls on ``stream``."""
        self._blas("cublasSetStream_v2", ctypes.c_void_p(handle), ctypes.c_void_p(stream))

    def gemm_ex(
        self,
        handle: int,
        transa: int,
        transb: int,
        m: int,
        n: int,
        k: int,
        alpha: Any,  # noqa: ANN401 - a ctypes scalar of the compute type's scale type
        a: int,
        a_type: int,
        lda: int,
        b: int,
        b_type: int,
        ldb: int,
        beta: Any,  # noqa: ANN401
        c: int,
        c_type: int,
        ldc: int,
        compute_type: int,
        algo: int,
    ) -> None:
        """``C = alpha * op(A) op(B) + beta * C`` (column-major), queued on the handle's stream."""
        self._blas(
            "cublasGemmEx",
            ctypes.c_void_p(handle),
            transa,
            transb,
            m,
            n,
            k,
            ctypes.byref(alpha),
            ctypes.c_void_p(a),
            a_type,
            lda,
            ctypes.c_void_p(b),
            b_type,
            ldb,
            ctypes.byref(beta),
            ctypes.c_void_p(c),
            c_type,
            ldc,
            compute_type,
            algo,
        )


Opener = Callable[[str], Any]


def open_api(
    candidates: Sequence[CudaLibraries], opener: Opener = load_library
) -> tuple[CudaApi, CudaLibraries, int]:
    """The first library set whose runtime sees at least one device.

    Returns:
        The API, the libraries it uses, and the device count.

    Raises:
        BackendUnavailable: no set loads, or none sees a device; the message says why for each.
    """
    reasons = []
    for libs in candidates:
        try:
            if libs.cublaslt:
                opener(libs.cublaslt)
            api = CudaApi(opener(libs.cudart), opener(libs.cublas))
            count = api.device_count()
        except (BackendUnavailable, CudaError) as exc:
            reasons.append(f"CUDA {libs.major} ({libs.describe()}): {exc}")
            continue
        if count > 0:
            return api, libs, count
        reasons.append(f"CUDA {libs.major} ({libs.describe()}): no CUDA device")
    raise BackendUnavailable("; ".join(reasons) or "no CUDA libraries to try")


def open_runtime(
    candidates: Sequence[CudaRuntime], opener: Opener = load_library
) -> tuple[CudaApi, CudaRuntime, int]:
    """The first runtime that loads and sees at least one device (no cuBLAS opened).

    Returns:
        The API (runtime calls only), the runtime it uses, and the device count.

    Raises:
        BackendUnavailable: no runtime loads, or none sees a device; the message says why for each.
    """
    reasons = []
    for runtime in candidates:
        try:
            api = CudaApi(opener(runtime.cudart))
            count = api.device_count()
        except (BackendUnavailable, CudaError) as exc:
            reasons.append(f"CUDA {runtime.major} ({runtime.cudart}): {exc}")
            continue
        if count > 0:
            return api, runtime, count
        reasons.append(f"CUDA {runtime.major} ({runtime.cudart}): no CUDA device")
    raise BackendUnavailable("; ".join(reasons) or "no CUDA runtime to try")
