"""Find and load the host's own NCCL (``libnccl.so.2``), and call it safely.

The all-reduce uses the NCCL provisioning installed (the ``nccl`` role: ``libnccl2`` in
``/usr/lib/x86_64-linux-gnu``, ``libnccl`` in ``/usr/lib64``; or pip's
``site-packages/nvidia/nccl/lib``), never a copy of its own. As with the CUDA runtime
(:mod:`validator.node.burnin.cuda_libs`), every function is declared with its C signature
(``nccl.h``, NCCL 2.x) before it is called, and every status is checked: a non-zero one
raises :class:`NcclError` naming the function and NCCL's own words.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from typing import Any

from validator.node.burnin.backend import BackendUnavailable
from validator.node.burnin.cuda_libs import Opener, declare, load_library, search_dirs

LIBRARY = "libnccl.so.2"
NOT_FOUND = f"{LIBRARY} not found: install NCCL (gpuready provision installs it with the nccl role)"

# ncclDataType_t and ncclRedOp_t (nccl.h)
NCCL_FLOAT32 = 7  # ncclFloat
NCCL_SUM = 0
# The header's names of the constants above (tests/realnv checks each value against them).
HEADER_NAMES = {"NCCL_FLOAT32": "ncclFloat32", "NCCL_SUM": "ncclSum"}

_INT = ctypes.c_int
_SIZE = ctypes.c_size_t
_PTR = ctypes.c_void_p

# name: (restype, argtypes). ncclComm_t and cudaStream_t are pointers; ncclResult_t,
# ncclDataType_t and ncclRedOp_t are enums (int).
NCCL_FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    "ncclGetVersion": (_INT, [ctypes.POINTER(ctypes.c_int)]),
    # ncclComm_t* comms, int ndev, const int* devlist
    "ncclCommInitAll": (_INT, [ctypes.POINTER(ctypes.c_void_p), _INT, ctypes.POINTER(_INT)]),
    "ncclGroupStart": (_INT, []),
    "ncclGroupEnd": (_INT, []),
    # const void* sendbuff, void* recvbuff, size_t count, datatype, op, comm, stream
    "ncclAllReduce": (_INT, [_PTR, _PTR, _SIZE, _INT, _INT, _PTR, _PTR]),
    "ncclCommDestroy": (_INT, [_PTR]),
    "ncclGetErrorString": (ctypes.c_char_p, [_INT]),
}
# NCCL 2.13 and newer say more about the last failure of a communicator.
NCCL_OPTIONAL_FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    "ncclGetLastError": (ctypes.c_char_p, [_PTR]),
}


class NcclError(RuntimeError):
    """An NCCL call returned a status other than ncclSuccess."""

    def __init__(self, function: str, status: int, message: str) -> None:
        super().__init__(f"{function} failed: {message} (status {status})")
        self.function = function
        self.status = status


def find_nccl(dirs: Sequence[str] | None = None) -> str | None:
    """The first ``libnccl.so.2`` in ``dirs`` (default: where the CUDA libraries are searched).

    Those directories are the loader path, the toolkits, the system library
    directories and pip's ``nvidia/*/lib`` (``nvidia/nccl/lib`` among them).
    """
    for directory in search_dirs() if dirs is None else dirs:
        path = os.path.join(directory, LIBRARY)
        if os.path.exists(path):
            return path
    return None


def version_text(code: int) -> str:
    """NCCL's version code as text: 22105 -> "2.21.5" (2.9 on), 2804 -> "2.8.4" (before)."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class NcclApi:
    """The NCCL calls an in-process all-reduce makes, each status checked.

    Args:
        lib: ``libnccl.so.2`` (a ``ctypes.CDLL`` or a test's fake).
    """

    def __init__(self, lib: Any) -> None:  # noqa: ANN401 - a ctypes.CDLL or a fake
        declare(lib, NCCL_FUNCTIONS)
        declare(lib, NCCL_OPTIONAL_FUNCTIONS, optional=True)
        self.lib = lib

    def error_string(self, status: int) -> str:
        """NCCL's words for a status."""
        try:
            return _text(self.lib.ncclGetErrorString(status))
        except Exception:  # noqa: BLE001 - an error message must not raise a second error
            return f"NCCL error {status}"

    def _call(self, name: str, *args: Any, comm: int | None = None) -> None:  # noqa: ANN401
        status = int(getattr(self.lib, name)(*args))
        if status != 0:
            message = self.error_string(status)
            last = self._last_error(comm)
            raise NcclError(name, status, f"{message}: {last}" if last else message)

    def _last_error(self, comm: int | None) -> str:
        try:
            function = self.lib.ncclGetLastError
        except AttributeError:
            return ""
        try:
            return _text(function(ctypes.c_void_p(comm or 0)) or b"").strip()
        except Exception:  # noqa: BLE001 - the detail is optional
            return ""

    def version(self) -> str:
        """The library's version, "2.21.5"."""
        code = ctypes.c_int(0)
        self._call("ncclGetVersion", ctypes.byref(code))
        return version_text(code.value)

    def comm_init_all(self, devices: Sequence[int]) -> list[int]:
        """One communicator per CUDA device, all in this process; rank i is ``devices[i]``."""
        count = len(devices)
        comms = (ctypes.c_void_p * count)()
        devlist = (ctypes.c_int * count)(*devices)
        self._call("ncclCommInitAll", comms, count, devlist)
        return [int(comm or 0) for comm in comms]

    def group_start(self) -> None:
        """Begin a group: the calls up to :meth:`group_end` launch together."""
        self._call("ncclGroupStart")

    def group_end(self) -> None:
        """End a group and launch its calls."""
        self._call("ncclGroupEnd")

    def all_reduce(
        self,
        send: int,
        recv: int,
        count: int,
        comm: int,
        stream: int,
        dtype: int = NCCL_FLOAT32,
        op: int = NCCL_SUM,
    ) -> None:
        """Queue a sum of ``count`` elements across the communicator's ranks on ``stream``."""
        self._call(
            "ncclAllReduce", ctypes.c_void_p(send), ctypes.c_void_p(recv), count, dtype, op,
            ctypes.c_void_p(comm), ctypes.c_void_p(stream), comm=comm,
        )  # fmt: skip

    def comm_destroy(self, comm: int) -> None:
        """Release a communicator."""
        self._call("ncclCommDestroy", ctypes.c_void_p(comm), comm=comm)


def open_nccl(dirs: Sequence[str] | None = None, opener: Opener = load_library) -> NcclApi:
    """NCCL as provisioning installed it, declared and ready.

    Raises:
        BackendUnavailable: no ``libnccl.so.2`` (the message says how to install it), or
            the loader refused it, or a function is missing.
    """
    path = find_nccl(dirs)
    if path is None:
        raise BackendUnavailable(NOT_FOUND)
    return NcclApi(opener(path))
