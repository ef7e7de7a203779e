"""The cuBLAS burn-in backend: library discovery, ctypes marshalling, numbers as bytes, checks.

Without a GPU the worker runs against a fake CUDA device: fake cudart/cuBLAS library
objects whose memory is Python bytearrays and whose GemmEx follows cuBLAS's
column-major definition, so layouts, transposes and types are exercised for real.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import struct
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from validator.node.burnin import cublas
from validator.node.burnin.backend import BackendUnavailable
from validator.node.burnin.burn_config import BurnConfig
from validator.node.burnin.cuda_libs import (
    CUBLAS_FUNCTIONS,
    CUDART_FUNCTIONS,
    CudaApi,
    CudaError,
    CudaLibraries,
    declare,
    find_cuda_libraries,
    open_api,
    search_dirs,
)

# --- fakes -----------------------------------------------------------------------------------

_FORMATS = {cublas.CUDA_R_16BF: "bf16", cublas.CUDA_R_16F: "fp16", cublas.CUDA_R_32F: "fp32"}


def _value(arg: Any) -> Any:
    return arg.value if isinstance(arg, ctypes.c_void_p) else arg


class FakeFunction:
    """Stands in for a ctypes function pointer: takes argtypes/restype, records calls."""

    def __init__(self, name: str, impl: Any, calls: list[tuple[str, tuple[Any, ...]]]) -> None:
        self.name = name
        self.impl = impl
        self.calls = calls
        self.argtypes: Any = None
        self.restype: Any = None

    def __call__(self, *args: Any) -> Any:
        self.calls.append((self.name, args))
        return self.impl(*args)


class FakeLib:
    """A library object: attribute access like ctypes.CDLL, functions from ``impl``."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl
        self._functions: dict[str, FakeFunction] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> FakeFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._functions:
            self._functions[name] = FakeFunction(name, getattr(self._impl, name), self.calls)
        return self._functions[name]


class Op:
    """One piece of work queued on a stream; it runs when something waits for it."""

    def __init__(self, stream: int, run: Callable[[], None], *, product: int = 0) -> None:
        self.stream = stream
        self.run = run
        self.product = product  # the output address of a product GEMM (0: not one)
        self.done = False
        self.time_ms = 0.0  # device clock when it ran (events)
        self.host_range: tuple[int, int] | None = None  # page-locked (address, size) it writes


class FakeGpu:
    """A CUDA device in Python: the runtime and cuBLAS calls the backend makes.

    Work is queued per stream and runs in order, lazily: only when the host waits
    for it (stream, event or device synchronize, a blocking copy) or when another
    stream's cudaStreamWaitEvent needs it. So work nobody waited for has not run,
    as on a busy GPU. Stream 0 is the legacy default stream: a blocking cudaMemcpy
    runs what stream 0 holds, then itself, but the non-blocking streams neither
    wait for it nor hold it up. A pageable host-to-device copy returns before its
    data lands (it is queued on stream 0), and a device-to-device cudaMemcpy or
    a cudaMemset is only queued. Page-locked host memory (cudaHostAlloc) is real
    ctypes memory, undefined (0xFF) from the moment a copy into it is queued until
    that copy runs: a host that reads it without waiting sees garbage.
    """

    def __init__(
        self, free: int = 1 << 20, devices: int = 1, bus_ids: dict[int, str] | None = None
    ) -> None:
        self.free_bytes = free
        self.devices = devices
        self.bus_ids = bus_ids or {}
        self.memory: dict[int, bytearray] = {}
        self.pinned: dict[int, Any] = {}  # address -> its ctypes buffer
        self.next_address = 0x7F0000000000
        self.failures: dict[str, int] = {}  # name -> status of every call
        self.fail_on: dict[str, tuple[int, int]] = {}  # name -> (failing call number, status)
        self.call_counts: dict[str, int] = {}
        self.math_mode: int | None = None
        self.current: int | None = None
        self.gemms = 0  # GEMMs that ran
        self.clock_ms = 0.0  # each GEMM that runs takes 0.5 ms
        self.queues: dict[int, list[Op]] = {0: []}
        self.stream_flags: dict[int, int] = {}
        self.next_stream = 0x5000
        self.events: dict[int, Op | None] = {}  # event -> its last recording
        self.next_event = 1
        self.handles: dict[int, int] = {}  # cuBLAS handle -> its stream
        # output address -> spoilers applied (to the block and offset) after the next GEMM
        # writing there runs: a wrong product, as a faulty GPU computes it
        self.faults: dict[int, list[Callable[[bytearray, int], None]]] = {}
        # product GEMMs still queued each time data from the device reached the host
        self.deliveries: list[int] = []
        self.pageable_d2h = 0
        self.d2h_bytes = 0
        self.h2d_bytes = 0
        self._delivered = False

    def _fail(self, name: str) -> int:
        self.call_counts[name] = self.call_counts.get(name, 0) + 1
        if name in self.fail_on and self.fail_on[name][0] == self.call_counts[name]:
            return self.fail_on[name][1]
        return self.failures.get(name, 0)

    def locate(self, address: int, size: int) -> tuple[bytearray, int]:
        for base, block in self.memory.items():
            if base <= address and address + size <= base + len(block):
                return block, address - base
        raise AssertionError(f"device access out of bounds: {address:#x}+{size}")

    def is_pinned(self, address: int, size: int) -> bool:
        return any(
            base <= address and address + size <= base + len(buffer)
            for base, buffer in self.pinned.items()
        )

    def live(self) -> dict[str, int]:
        """What is allocated or created and not yet released."""
        return {
            "device memory": len(self.memory),
            "pinned memory": len(self.pinned),
            "streams": len(self.queues) - 1,
            "events": len(self.events),
            "handles": len(self.handles),
        }

    # queues
    def _queue(self, stream: Any, run: Callable[[], None], *, product: int = 0) -> Op:
        key = _value(stream) or 0
        assert key in self.queues, f"unknown stream {key:#x}"
        op = Op(key, run, product=product)
        self.queues[key].append(op)
        return op

    def _run(self, stream: int, until: Op | None = None) -> None:
        """Run the stream's queue in order, up to and including ``until`` (all if None)."""
        queue = self.queues[stream]
        while queue and not (until is not None and until.done):
            op = queue.pop(0)
            op.run()
            op.time_ms = self.clock_ms
            op.done = True

    def _run_all(self) -> None:
        while any(self.queues.values()):
            for stream in list(self.queues):
                self._run(stream)

    def pending_products(self) -> list[int]:
        """Output addresses of the product GEMMs queued and not yet run, in queue order."""
        return [op.product for queue in self.queues.values() for op in queue if op.product]

    def pending_copies_into(self, address: int, size: int) -> list[Op]:
        return [
            op
            for queue in self.queues.values()
            for op in queue
            if op.host_range is not None
            and op.host_range[0] < address + size
            and address < op.host_range[0] + op.host_range[1]
        ]

    def _host_waits(self, work: Callable[[], None]) -> None:
        self._delivered = False
        work()
        if self._delivered:
            self.deliveries.append(len(self.pending_products()))

    def _copy_op(
        self, dst: int, src: int, size: int, kind: int, data: bytes | None
    ) -> Callable[[], None]:
        """What a copy does when it runs; ``data``: the source bytes, taken when it was queued."""

        def run() -> None:
            if kind == 1:
                payload = data if data is not None else ctypes.string_at(src, size)
                block, offset = self.locate(dst, size)
                block[offset : offset + size] = payload
                self.h2d_bytes += size
            elif kind == 2:
                block, offset = self.locate(src, size)
                ctypes.memmove(dst, bytes(block[offset : offset + size]), size)
                self.d2h_bytes += size
                self._delivered = True
            elif kind == 3:
                source, s_off = self.locate(src, size)
                payload = bytes(source[s_off : s_off + size])
                block, offset = self.locate(dst, size)
                block[offset : offset + size] = payload
            else:
                raise AssertionError(f"memcpy kind {kind}")

        return run

    # runtime
    def cudaGetDeviceCount(self, count: Any) -> int:
        count._obj.value = self.devices
        return self._fail("cudaGetDeviceCount")

    def cudaSetDevice(self, device: int) -> int:
        self.current = device
        return self._fail("cudaSetDevice")

    def cudaDeviceGetPCIBusId(self, text: Any, length: int, device: int) -> int:
        status = self._fail("cudaDeviceGetPCIBusId")
        if status:
            return status
        if not 0 <= device < self.devices:
            return 101  # cudaErrorInvalidDevice
        bus_id = self.bus_ids.get(device, f"0000:{0x18 + device:02x}:00.0")
        text.value = bus_id.encode()[: length - 1]
        return 0

    def cudaMemGetInfo(self, free: Any, total: Any) -> int:
        free._obj.value = self.free_bytes
        total._obj.value = self.free_bytes * 2
        return 0

    def cudaMalloc(self, pointer: Any, size: int) -> int:
        status = self._fail("cudaMalloc")
        if status:
            return status
        address = self.next_address
        self.next_address += size + 4096
        self.memory[address] = bytearray(size)
        pointer._obj.value = address
        return 0

    def cudaFree(self, pointer: Any) -> int:
        del self.memory[_value(pointer)]
        return 0

    def cudaHostAlloc(self, pointer: Any, size: int, flags: int) -> int:
        status = self._fail("cudaHostAlloc")
        if status:
            return status
        assert flags == 0
        buffer = ctypes.create_string_buffer(b"\xff" * size, size)  # undefined contents
        address = ctypes.addressof(buffer)
        self.pinned[address] = buffer
        pointer._obj.value = address
        return 0

    def cudaFreeHost(self, pointer: Any) -> int:
        if _value(pointer) not in self.pinned:
            return 1  # cudaErrorInvalidValue
        del self.pinned[_value(pointer)]
        return 0

    def cudaMemcpy(self, dst: Any, src: Any, size: int, kind: int) -> int:
        dst, src = _value(dst), _value(src)
        self._run(0)
        if kind == 1 and not self.is_pinned(src, size):
            # staged and returned: the DMA lands when stream 0 runs on
            self._queue(0, self._copy_op(dst, src, size, kind, ctypes.string_at(src, size)))
        elif kind == 3:
            self._queue(0, self._copy_op(dst, src, size, kind, None))
        else:
            if kind == 2 and not self.is_pinned(dst, size):
                self.pageable_d2h += 1
            self._host_waits(self._copy_op(dst, src, size, kind, None))
        return 0

    def cudaMemcpyAsync(self, dst: Any, src: Any, size: int, kind: int, stream: Any) -> int:
        status = self._fail("cudaMemcpyAsync")
        if status:
            return status
        dst, src = _value(dst), _value(src)
        pinned = self.is_pinned(dst if kind == 2 else src, size)
        data = ctypes.string_at(src, size) if kind == 1 and not pinned else None
        op = self._queue(stream, self._copy_op(dst, src, size, kind, data))
        if kind == 2 and pinned:
            ctypes.memset(dst, 0xFF, size)  # undefined until the copy runs
            op.host_range = (dst, size)
        elif kind == 2:  # into pageable memory: returns once the copy is done
            self.pageable_d2h += 1
            self._host_waits(lambda: self._run(op.stream, op))
        return 0

    def cudaMemset(self, pointer: Any, value: int, size: int) -> int:
        def run() -> None:
            block, offset = self.locate(_value(pointer), size)
            block[offset : offset + size] = bytes([value]) * size

        self._queue(0, run)
        return 0

    def cudaDeviceSynchronize(self) -> int:
        self._host_waits(self._run_all)
        return self._fail("cudaDeviceSynchronize")

    def cudaStreamCreateWithFlags(self, stream: Any, flags: int) -> int:
        status = self._fail("cudaStreamCreateWithFlags")
        if status:
            return status
        key = self.next_stream
        self.next_stream += 0x10
        self.queues[key] = []
        self.stream_flags[key] = flags
        stream._obj.value = key
        return 0

    def cudaStreamDestroy(self, stream: Any) -> int:
        key = _value(stream) or 0
        if key == 0 or key not in self.queues:
            return 400  # cudaErrorInvalidResourceHandle
        self._run(key)  # queued work still completes
        del self.queues[key]
        return 0

    def cudaStreamSynchronize(self, stream: Any) -> int:
        self._host_waits(lambda: self._run(_value(stream) or 0))
        return 0

    def cudaStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> int:
        assert flags == 0
        recording = self.events[_value(event)]  # its last recording at the time of the call

        def run() -> None:
            if recording is not None:
                self._run(recording.stream, recording)

        self._queue(stream, run)
        return 0

    def cudaEventCreate(self, event: Any) -> int:
        status = self._fail("cudaEventCreate")
        if status:
            return status
        event._obj.value = self.next_event
        self.events[self.next_event] = None
        self.next_event += 1
        return 0

    def cudaEventRecord(self, event: Any, stream: Any) -> int:
        key = _value(event)
        assert key in self.events
        self.events[key] = self._queue(stream, lambda: None)
        return 0

    def cudaEventSynchronize(self, event: Any) -> int:
        recording = self.events[_value(event)]
        if recording is not None:
            self._host_waits(lambda: self._run(recording.stream, recording))
        return 0

    def cudaEventElapsedTime(self, ms: Any, start: Any, end: Any) -> int:
        first, last = self.events[_value(start)], self.events[_value(end)]
        if first is None or last is None:
            return 400  # cudaErrorInvalidResourceHandle: never recorded
        if not (first.done and last.done):
            return 600  # cudaErrorNotReady
        ms._obj.value = last.time_ms - first.time_ms
        return 0

    def cudaEventDestroy(self, event: Any) -> int:
        if _value(event) not in self.events:
            return 400
        del self.events[_value(event)]
        return 0

    def cudaGetErrorString(self, status: int) -> bytes:
        return f"fake error {status}".encode()

    # cuBLAS
    def cublasCreate_v2(self, handle: Any) -> int:
        status = self._fail("cublasCreate_v2")
        if status:
            return status
        handle._obj.value = 0xB1A5
        self.handles[0xB1A5] = 0
        return 0

    def cublasDestroy_v2(self, handle: Any) -> int:
        if self.handles.pop(_value(handle), None) is None:
            return 1  # CUBLAS_STATUS_NOT_INITIALIZED
        return 0

    def cublasSetMathMode(self, handle: Any, mode: int) -> int:
        self.math_mode = mode
        return 0

    def cublasSetStream_v2(self, handle: Any, stream: Any) -> int:
        status = self._fail("cublasSetStream_v2")
        if status:
            return status
        assert (_value(stream) or 0) in self.queues
        self.handles[_value(handle)] = _value(stream) or 0
        return 0

    def _matrix(self, pointer: int, dtype: int, ld: int, cols: int) -> list[float]:
        fmt = _FORMATS[dtype]
        size = cublas.element_size(fmt)
        block, offset = self.locate(pointer, ld * cols * size)
        return cublas.decode(bytes(block[offset : offset + ld * cols * size]), fmt)

    def cublasGemmEx(
        self, handle: Any, ta: int, tb: int, m: int, n: int, k: int, *rest: Any
    ) -> int:
        status = self._fail("cublasGemmEx")
        if status:
            return status
        alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, _compute, _algo = rest
        alpha_v, beta_v = alpha._obj.value, beta._obj.value
        assert beta_v == 0.0
        a, b, c = _value(a), _value(b), _value(c)

        def run() -> None:
            a_vals = self._matrix(a, a_type, lda, k if ta == 0 else m)
            b_vals = self._matrix(b, b_type, ldb, n if tb == 0 else k)

            def op_a(i: int, p: int) -> float:
                return a_vals[i + p * lda] if ta == 0 else a_vals[p + i * lda]

            def op_b(p: int, j: int) -> float:
                return b_vals[p + j * ldb] if tb == 0 else b_vals[j + p * ldb]

            fmt = _FORMATS[c_type]
            size = cublas.element_size(fmt)
            out, offset = self.locate(c, ldc * n * size)
            for j in range(n):
                column_b = [op_b(p, j) for p in range(k)]
                values = [
                    alpha_v * sum(op_a(i, p) * column_b[p] for p in range(k)) for i in range(m)
                ]
                start = offset + j * ldc * size
                out[start : start + m * size] = cublas.encode(values, fmt)
            for fault in self.faults.pop(c, []):
                fault(out, offset)
            self.gemms += 1
            self.clock_ms += 0.5

        self._queue(self.handles[_value(handle)], run, product=c if n > 1 else 0)
        return 0


def fake_api(gpu: FakeGpu) -> tuple[CudaApi, FakeLib, FakeLib]:
    cudart, blas = FakeLib(gpu), FakeLib(gpu)
    return CudaApi(cudart, blas), cudart, blas


@pytest.fixture
def small_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 4x4 pattern tiled over n = 20 exercises the doubling and the partial tile.
    monkeypatch.setattr(cublas, "PATTERN", 4)


def make_worker(
    gpu: FakeGpu, dtype: str = "bf16", n: int = 20, seed: int = 10
) -> tuple[cublas.CublasWorker, FakeLib]:
    api, _, blas = fake_api(gpu)
    config = BurnConfig(dtype=dtype, matrix_size=n, seed=seed, memory_fraction=0.9)
    return cublas.CublasWorker(api, 0, config), blas


# --- library discovery -------------------------------------------------------------------------


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")
    return path


def test_search_dirs_orders_loader_path_toolkits_system_then_pip(tmp_path: Path) -> None:
    ld = tmp_path / "ld"
    ld.mkdir()
    for d in ("usr/local/cuda-12.4/lib64", "usr/local/cuda-13.0/lib64", "usr/lib/x86_64-linux-gnu"):
        (tmp_path / "root" / d).mkdir(parents=True)
    (tmp_path / "root/usr/local/cuda").symlink_to(tmp_path / "root/usr/local/cuda-13.0")
    pip = tmp_path / "site/nvidia/cublas/lib"
    pip.mkdir(parents=True)
    dirs = search_dirs(
        {"LD_LIBRARY_PATH": f"{ld}::/does/not/exist"},
        root=str(tmp_path / "root"),
        site_dirs=[str(tmp_path / "site")],
    )
    root = tmp_path / "root"
    assert dirs == [
        str(ld),
        str(root / "usr/local/cuda/lib64"),  # cuda-13.0/lib64 is the same directory: listed once
        str(root / "usr/local/cuda-12.4/lib64"),
        str(root / "usr/lib/x86_64-linux-gnu"),
        str(root / "usr/lib"),
        str(pip),
    ]


def test_finds_toolkit_libraries_newest_major_first(tmp_path: Path) -> None:
    new = tmp_path / "cuda-13.0/lib64"
    old = tmp_path / "cuda-12.4/lib64"
    for d, major in ((new, 13), (old, 12)):
        for name in ("libcudart.so", "libcublas.so", "libcublasLt.so"):
            touch(d / f"{name}.{major}")
    found = find_cuda_libraries([str(new), str(old)])
    assert [libs.major for libs in found] == [13, 12]
    assert found[1] == CudaLibraries(
        major=12,
        cudart=str(old / "libcudart.so.12"),
        cublas=str(old / "libcublas.so.12"),
        cublaslt=str(old / "libcublasLt.so.12"),
    )


def test_finds_pip_wheel_layout_with_lt_beside_cublas(tmp_path: Path) -> None:
    runtime = touch(tmp_path / "nvidia/cuda_runtime/lib/libcudart.so.12")
    blas = touch(tmp_path / "nvidia/cublas/lib/libcublas.so.12")
    lt = touch(tmp_path / "nvidia/cublas/lib/libcublasLt.so.12")
    dirs = search_dirs({}, root=str(tmp_path / "empty-root"), site_dirs=[str(tmp_path)])
    (libs,) = find_cuda_libraries(dirs)
    assert (libs.major, libs.cudart, libs.cublas, libs.cublaslt) == (
        12,
        str(runtime),
        str(blas),
        str(lt),
    )


def test_unversioned_runtime_link_counts_for_its_target_major(tmp_path: Path) -> None:
    touch(tmp_path / "libcudart.so.12.4.127")
    os.symlink("libcudart.so.12.4.127", tmp_path / "libcudart.so")
    touch(tmp_path / "libcublas.so.12")
    (libs,) = find_cuda_libraries([str(tmp_path)])
    assert libs.major == 12
    assert libs.cudart == str(tmp_path / "libcudart.so")
    assert libs.cublaslt is None


def test_missing_cublas_names_the_file_the_dirs_and_the_fix(tmp_path: Path) -> None:
    touch(tmp_path / "libcudart.so.12")
    with pytest.raises(BackendUnavailable) as caught:
        find_cuda_libraries([str(tmp_path)])
    assert str(caught.value) == (
        f"libcublas.so.12 not found in {tmp_path}: install the CUDA toolkit (gpuready provision)"
    )


def test_nothing_found_names_every_runtime_tried() -> None:
    with pytest.raises(
        BackendUnavailable,
        match=r"libcudart\.so\.13/libcudart\.so\.12/libcudart\.so\.11 not found in no existing",
    ):
        find_cuda_libraries([])


def test_open_api_falls_back_to_an_older_major_when_the_driver_refuses() -> None:
    too_new, fine = FakeGpu(), FakeGpu(devices=8)
    too_new.failures["cudaGetDeviceCount"] = 35
    libs = {
        "rt13": FakeLib(too_new), "blas13": FakeLib(too_new),
        "rt12": FakeLib(fine), "blas12": FakeLib(fine), "lt12": FakeLib(fine),
    }  # fmt: skip
    opened: list[str] = []

    def opener(path: str) -> FakeLib:
        opened.append(path)
        return libs[path]

    candidates = [
        CudaLibraries(13, "rt13", "blas13"),
        CudaLibraries(12, "rt12", "blas12", "lt12"),
    ]
    api, chosen, count = open_api(candidates, opener)
    assert (chosen.major, count) == (12, 8)
    assert opened == ["rt13", "blas13", "lt12", "rt12", "blas12"]  # Lt before cuBLAS
    assert api.cudart is libs["rt12"]


def test_open_api_says_why_each_candidate_failed() -> None:
    gpu = FakeGpu(devices=0)
    with pytest.raises(BackendUnavailable) as caught:
        open_api([CudaLibraries(12, "rt", "blas")], lambda path: FakeLib(gpu))
    assert str(caught.value) == "CUDA 12 (rt, blas): no CUDA device"


def test_backend_reports_missing_libraries(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match=r"not found in .*gpuready provision"):
        cublas.CublasBackend(dirs=[str(tmp_path)])


def test_backend_refuses_fp8_with_the_reason(tmp_path: Path) -> None:
    for name in ("libcudart.so.12", "libcublas.so.12"):
        touch(tmp_path / name)
    gpu = FakeGpu(devices=2)
    backend = cublas.CublasBackend(dirs=[str(tmp_path)], opener=lambda path: FakeLib(gpu))
    assert backend.device_count() == 2
    with pytest.raises(BackendUnavailable, match="fp8 needs cublasLt: not implemented"):
        backend.worker(0, BurnConfig(dtype="fp8"))


# --- ctypes declarations and status checks -----------------------------------------------------


def test_every_function_gets_its_signature_before_use() -> None:
    api, cudart, blas = fake_api(FakeGpu())
    for name, (restype, argtypes) in CUDART_FUNCTIONS.items():
        function = getattr(cudart, name)
        assert (function.restype, function.argtypes) == (restype, argtypes), name
    gemm = blas.cublasGemmEx
    assert len(gemm.argtypes) == 19
    assert gemm.argtypes[6] is ctypes.c_void_p  # alpha is passed by pointer
    assert gemm.restype is ctypes.c_int
    assert cudart.calls == []  # declaring calls nothing
    del api


_VOID_P_P = ctypes.POINTER(ctypes.c_void_p)
# The pipeline's calls, as cuda_runtime_api.h and cublas_api.h declare them (CUDA 12 and 13).
PIPELINE_SIGNATURES = {
    # cudaDeviceGetPCIBusId(char* pciBusId, int len, int device)
    "cudaDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    # cudaHostAlloc(void** pHost, size_t size, unsigned int flags)
    "cudaHostAlloc": [_VOID_P_P, ctypes.c_size_t, ctypes.c_uint],
    "cudaFreeHost": [ctypes.c_void_p],
    # cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags)
    "cudaStreamCreateWithFlags": [_VOID_P_P, ctypes.c_uint],
    "cudaStreamDestroy": [ctypes.c_void_p],
    "cudaStreamSynchronize": [ctypes.c_void_p],
    # cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
    "cudaStreamWaitEvent": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint],
    # cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind, cudaStream_t)
    "cudaMemcpyAsync": [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p
    ],
    # cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
    "cudaEventRecord": [ctypes.c_void_p, ctypes.c_void_p],
}  # fmt: skip


def test_the_pipeline_calls_have_their_c_signatures() -> None:
    _, cudart, blas = fake_api(FakeGpu())
    for name, argtypes in PIPELINE_SIGNATURES.items():
        function = getattr(cudart, name)
        assert (function.restype, function.argtypes) == (ctypes.c_int, argtypes), name
    # cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
    set_stream = blas.cublasSetStream_v2
    assert (set_stream.restype, set_stream.argtypes) == (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p],
    )


def test_pipeline_wrappers_check_every_status() -> None:
    gpu = FakeGpu()
    api, _, _ = fake_api(gpu)
    calls = {
        "cudaHostAlloc": lambda: api.host_alloc(64),
        "cudaStreamCreateWithFlags": api.stream_create,
        "cudaMemcpyAsync": lambda: api.memcpy_async(0, 0, 0, 2, 0),
        "cudaDeviceGetPCIBusId": lambda: api.device_pci_bus_id(0),
        "cublasSetStream_v2": lambda: api.blas_set_stream(0xB1A5, 0),
    }
    for name, call in calls.items():
        gpu.failures[name] = 2
        with pytest.raises(CudaError, match=f"^{name} failed"):
            call()
    with pytest.raises(CudaError, match=r"cudaFreeHost failed: fake error 1"):
        api.free_host(0x1234)
    with pytest.raises(CudaError, match=r"cudaStreamDestroy failed: fake error 400"):
        api.stream_destroy(0x1234)
    with pytest.raises(CudaError, match=r"cudaEventDestroy failed: fake error 400"):
        api.event_destroy(0x1234)


def test_declare_refuses_a_library_without_a_required_function() -> None:
    class Partial:
        def cublasCreate_v2(self, handle: Any) -> int:
            return 0

    with pytest.raises(BackendUnavailable, match="cublasDestroy_v2 is missing"):
        declare(FakeLib(Partial()), CUBLAS_FUNCTIONS)


def test_runtime_failure_names_the_function_and_the_runtime_message() -> None:
    gpu = FakeGpu()
    gpu.failures["cudaMalloc"] = 2
    api, _, _ = fake_api(gpu)
    with pytest.raises(CudaError) as caught:
        api.malloc(1 << 30)
    assert str(caught.value) == "cudaMalloc failed: fake error 2 (status 2)"
    assert (caught.value.function, caught.value.status) == ("cudaMalloc", 2)


def test_cublas_failure_uses_status_names_when_the_library_has_no_status_string() -> None:
    gpu = FakeGpu()
    gpu.failures["cublasCreate_v2"] = 3
    api, _, _ = fake_api(gpu)
    with pytest.raises(
        CudaError, match=r"^cublasCreate_v2 failed: CUBLAS_STATUS_ALLOC_FAILED \(status 3\)$"
    ):
        api.blas_create()


def test_cublas_failure_prefers_the_library_status_string() -> None:
    class WithStrings(FakeGpu):
        def cublasGetStatusString(self, status: int) -> bytes:
            return b"the library's own words"

    gpu = WithStrings()
    gpu.failures["cublasCreate_v2"] = 13
    api, _, _ = fake_api(gpu)
    with pytest.raises(CudaError, match="the library's own words"):
        api.blas_create()


REAL_CUDART = Path("/usr/local/cuda/lib64/libcudart.so.13")


@pytest.mark.skipif(not REAL_CUDART.exists(), reason="no CUDA 13 runtime on this machine")
@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="a GPU is present: no error to see")
def test_real_runtime_accepts_the_declarations_and_reports_no_device() -> None:
    # A real libcudart without a driver/GPU: signatures bind, and the status is an error
    # carrying the runtime's own message.
    from validator.node.burnin.cuda_libs import load_library

    api = CudaApi(load_library(str(REAL_CUDART)), FakeLib(FakeGpu()))
    with pytest.raises(CudaError) as caught:
        api.device_count()
    assert caught.value.function == "cudaGetDeviceCount"
    assert caught.value.status in (35, 100)  # insufficient driver / no device
    assert api.cuda_error_string(caught.value.status) in str(caught.value)
    assert "CUDA" in str(caught.value) or "device" in str(caught.value)


# --- numbers as bytes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        (1.0, "bf16", 0x3F80),
        (-2.0, "bf16", 0xC000),
        (1.0, "fp16", 0x3C00),
        (-2.0, "fp16", 0xC000),
        (1.0, "fp32", 0x3F800000),
        (1.0, "tf32", 0x3F800000),
    ],
)
def test_known_encodings(value: float, fmt: str, expected: int) -> None:
    data = cublas.encode([value], fmt)
    assert int.from_bytes(data, "little") == expected
    assert cublas.decode(data, fmt) == [value]


def test_bf16_truncates_and_tf32_keeps_ten_mantissa_bits() -> None:
    assert cublas.decode(cublas.encode([1.0 + 2**-8], "bf16"), "bf16") == [1.0]
    assert cublas.decode(cublas.encode([1.0 + 2**-7], "bf16"), "bf16") == [1.0 + 2**-7]
    assert cublas.decode(cublas.encode([1.0 + 2**-11], "tf32"), "tf32") == [1.0]
    assert cublas.decode(cublas.encode([1.0 + 2**-10], "tf32"), "tf32") == [1.0 + 2**-10]
    assert cublas.decode(cublas.encode([1.0 + 2**-11], "fp16"), "fp16") == [1.0]  # ties to even


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "tf32", "fp32"])
def test_pattern_round_trips_and_is_seeded(fmt: str) -> None:
    data, values = cublas.pattern(7, 16, fmt)
    assert len(data) == 256 * cublas.element_size(fmt)
    assert cublas.decode(data, fmt) == values
    assert cublas.encode(values, fmt) == data
    assert all(-1.0 <= v < 1.0 for v in values)
    assert len(set(values)) > 200
    assert cublas.pattern(7, 16, fmt)[0] == data
    assert cublas.pattern(8, 16, fmt)[0] != data


def test_uniform_values_are_fixed_for_a_seed() -> None:
    values = cublas.uniform_values(10, 3)
    assert values == cublas.uniform_values(10, 3)
    assert [round(v, 6) for v in values] != [round(v, 6) for v in cublas.uniform_values(11, 3)]
    assert min(cublas.uniform_values(1, 5000)) < -0.99
    assert max(cublas.uniform_values(1, 5000)) > 0.99


def test_column_strip_repeats_rows_and_keeps_the_partial_tile() -> None:
    # 2x2 column-major block: column 0 = "ab", column 1 = "cd"
    assert cublas.column_strip(b"abcd", 2, 5, 1) == b"ababa" + b"cdcdc"
    assert cublas.column_strip(b"abcd", 2, 1, 1) == b"a"


def test_reference_tile_is_the_tiled_product_in_fp64() -> None:
    side, n = 3, 7
    a = [float(i + 1) for i in range(side * side)]
    b = [float((i * 5) % 7 - 3) for i in range(side * side)]
    exact = cublas.reference_tile(a, b, side, n, 2)
    for i in range(2):
        for j in range(2):
            expected = sum(
                cublas.tiled(a, side, i, k) * cublas.tiled(b, side, k, j) for k in range(n)
            )
            assert exact[i][j] == expected
    # element (1, 0): A row 1 = a[1], a[4], a[7], a[1], ...; B column 0 = b[0], b[1], b[2], ...
    assert exact[1][0] == 2 * -3 + 5 * 2 + 8 * 0 + 2 * -3 + 5 * 2 + 8 * 0 + 2 * -3


def test_relative_error_against_the_largest_magnitude() -> None:
    assert cublas.relative_error([[1.0, 9.0]], [[1.0, 10.0]]) == pytest.approx(0.1)
    assert cublas.relative_error([[float("nan"), 10.0]], [[1.0, 10.0]]) == math.inf


def test_buffer_count_fills_the_share_of_free_memory_less_what_is_kept() -> None:
    n, gib = 8192, 1 << 30
    # bf16: inputs 2 x 128 MiB, first product 128 MiB; each buffer 128 MiB + 32 KiB checksum
    count = cublas.buffer_count(100 * gib, 0.9, n, 2, 2)
    per_buffer = n * n * 2 + n * 4
    fixed = 3 * n * n * 2 + n * 2 + n * 4
    assert count == int((0.9 * 100 * gib - fixed) // per_buffer) == 716
    assert cublas.buffer_count(100 * gib, 0.9, n, 4, 4) == 356
    assert cublas.buffer_count(1 << 20, 0.9, n, 2, 2) == 2  # never fewer than two


def test_differing_elements_finds_each_changed_element() -> None:
    size = 2
    reference = bytes(range(256)) * 64  # 16 KiB: several sub-blocks
    changed = bytearray(reference)
    for index in (0, 3000, 8191):
        changed[index * size + 1] ^= 0x01
    assert cublas.differing_elements(reference, bytes(changed), size) == [0, 3000, 8191]
    assert cublas.differing_elements(reference, reference, size) == []
    # a length difference counts as differing elements at the end
    assert cublas.differing_elements(b"\x00" * 8, b"\x00" * 6, 4) == [1]


@pytest.mark.parametrize(
    ("fmt", "words", "expected"),
    [
        ("bf16", [0x7F80, 0xFF80, 0x7FC0, 0x7F7F, 0x3F80, 0x7F00, 0xFFFF], 4),
        ("fp16", [0x7C00, 0xFC00, 0x7E00, 0x7BFF, 0x3C00, 0x7FFF], 4),
        ("fp32", [0x7F800000, 0x7FC00000, 0x7F7FFFFF, 0x3F800000, 0x7F000000, 0xFF800001], 3),
    ],
)
def test_count_nonfinite_by_exponent_bits(fmt: str, words: list[int], expected: int) -> None:
    size = cublas.element_size(fmt)
    data = b"".join(w.to_bytes(size, "little") for w in words)
    assert cublas.count_nonfinite(data, fmt) == expected
    assert cublas.count_nonfinite(cublas.encode([1.5, -3.0, 60000.0], fmt), fmt) == 0


def test_count_nonfinite_matches_python_on_decoded_values() -> None:
    values = [1.0, float("inf"), -2.5, float("nan"), 3e38, float("-inf")]
    data = struct.pack("<6f", *values)
    assert cublas.count_nonfinite(data, "fp32") == sum(not math.isfinite(v) for v in values)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
def test_spoil_makes_a_nan_or_a_clearly_different_value(fmt: str) -> None:
    element = cublas.encode([123.0], fmt)
    flipped = cublas.decode(cublas.spoil(element, "flip", fmt), fmt)[0]
    assert flipped != 123.0
    assert abs(flipped - 123.0) >= 0.2 * 123.0
    assert math.isnan(cublas.decode(cublas.spoil(element, "nan", fmt), fmt)[0])
    assert cublas.decode(cublas.spoil(cublas.encode([0.0], fmt), "flip", fmt), fmt) == [1.0]


# --- the worker on a fake device ---------------------------------------------------------------


def gemm_calls(blas: FakeLib) -> list[tuple[Any, ...]]:
    return [args for name, args in blas.calls if name == "cublasGemmEx"]


def flip_bits(changes: list[tuple[int, int]]) -> Callable[[bytearray, int], None]:
    """A fault for FakeGpu.faults: XOR each (byte offset, mask) into the product just written."""

    def spoil(block: bytearray, offset: int) -> None:
        for at, mask in changes:
            block[offset + at] ^= mask

    return spoil


@pytest.mark.usefixtures("small_pattern")
def test_setup_tiles_the_inputs_on_the_device() -> None:
    gpu = FakeGpu(free=40_000)
    worker, _ = make_worker(gpu, "fp32", n=18)  # 4 + 4 + 8 + 2 columns: doubling, then a rest
    worker.setup()
    _, a_values = cublas.pattern(10, 4, "fp32")
    block, offset = gpu.locate(worker._a, 18 * 18 * 4)
    on_device = cublas.decode(bytes(block[offset : offset + 18 * 18 * 4]), "fp32")
    expected = [cublas.tiled(a_values, 4, i, k) for k in range(18) for i in range(18)]
    assert on_device == expected


@pytest.mark.usefixtures("small_pattern")
@pytest.mark.parametrize(
    ("dtype", "in_type", "out_type", "compute", "math_mode"),
    [
        ("bf16", cublas.CUDA_R_16BF, cublas.CUDA_R_16BF, 68, 0),
        ("fp16", cublas.CUDA_R_16F, cublas.CUDA_R_16F, 68, 0),
        ("tf32", cublas.CUDA_R_32F, cublas.CUDA_R_32F, 77, 3),
        ("fp32", cublas.CUDA_R_32F, cublas.CUDA_R_32F, 68, 0),
    ],
)
def test_gemm_ex_marshalling(
    dtype: str, in_type: int, out_type: int, compute: int, math_mode: int
) -> None:
    gpu = FakeGpu(free=40_000)
    worker, blas = make_worker(gpu, dtype, n=16)
    worker.setup()
    assert gpu.math_mode == math_mode
    product, checksum = gemm_calls(blas)[:2]
    handle, ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb = product[:13]
    beta, c, c_type, ldc, compute_type, algo = product[13:]
    assert (handle.value, ta, tb, m, n, k) == (0xB1A5, 0, 0, 16, 16, 16)
    assert isinstance(alpha._obj, ctypes.c_float)
    assert (alpha._obj.value, beta._obj.value) == (1.0, 0.0)
    assert (a.value, a_type, lda, b.value, b_type, ldb) == (
        worker._a,
        in_type,
        16,
        worker._b,
        in_type,
        16,
    )
    assert (c.value, c_type, ldc) == (worker._first, out_type, 16)
    assert (compute_type, algo) == (compute, -1)
    # the checksum: first product transposed times ones, fp32 out, never reduced precision
    _, ta, tb, m, n, k, _, a, a_type, lda, b, b_type, ldb, _, c, c_type, ldc, compute_type, _ = (
        checksum
    )
    assert (ta, tb, m, n, k) == (1, 0, 16, 1, 16)
    assert (a.value, a_type, lda) == (worker._first, out_type, 16)
    assert (b.value, b_type, ldb) == (worker._ones, out_type, 16)
    assert (c.value, c_type, ldc) == (worker._sums, cublas.CUDA_R_32F, 16)
    assert compute_type == (68 if dtype in ("bf16", "fp16") else 69)


@pytest.mark.usefixtures("small_pattern")
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32", "fp32"])
def test_setup_checks_the_first_product_against_fp64(dtype: str) -> None:
    gpu = FakeGpu(free=40_000)
    worker, _ = make_worker(gpu, dtype, n=20)
    setup = worker.setup()
    assert setup.matrix_size == 20
    assert setup.reference_ok is True
    assert 0.0 <= setup.reference_max_error <= cublas.TOLERANCES[dtype]
    assert setup.deterministic is True
    assert len(setup.digest) == 16


class TransposedA(FakeGpu):
    """A device whose GEMM reads A with the other transpose: a layout bug."""

    def cublasGemmEx(self, handle: Any, ta: int, tb: int, *rest: Any) -> int:
        return super().cublasGemmEx(handle, 1 - ta, tb, *rest)


@pytest.mark.usefixtures("small_pattern")
def test_a_wrong_layout_fails_the_reference_check() -> None:
    worker, _ = make_worker(TransposedA(free=40_000), "fp32", n=16)
    result = worker.setup()
    assert result.reference_ok is False
    assert result.reference_max_error > 0.05


@pytest.mark.usefixtures("small_pattern")
def test_digest_is_equal_across_devices_and_changes_with_the_inputs() -> None:
    first = make_worker(FakeGpu(free=40_000), "bf16", n=16)[0].setup().digest
    second = make_worker(FakeGpu(free=60_000), "bf16", n=16)[0].setup().digest
    other_seed = make_worker(FakeGpu(free=40_000), "bf16", n=16, seed=11)[0].setup().digest
    assert first == second
    assert first != other_seed


@pytest.mark.usefixtures("small_pattern")
def test_buffers_fill_free_memory_and_batches_recompute_each() -> None:
    gpu = FakeGpu(free=40_000)
    worker, blas = make_worker(gpu, "bf16", n=20)
    setup = worker.setup()
    assert setup.result_buffers == cublas.buffer_count(40_000, 0.9, 20, 2, 2) == 38
    before = len(gemm_calls(blas))
    timing = worker.run_batch()
    products = [args for args in gemm_calls(blas)[before:] if args[4] == 20]  # not checksums
    outputs = [args[14].value for args in products]
    # the batch it returned, every buffer once; then the next batch's first half, queued ahead
    assert outputs[:38] == worker._buffers
    assert outputs[38:] == worker._buffers[:19]
    assert timing.products == 38
    assert timing.compute_s == pytest.approx(38 * 0.5 / 1000)
    assert gpu.current == 0


@pytest.mark.usefixtures("small_pattern")
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_healthy_batches_check_clean(dtype: str) -> None:
    worker, _ = make_worker(FakeGpu(free=20_000), dtype, n=16)
    worker.setup()
    for _ in range(3):
        worker.run_batch()
        assert worker.check_batch() == cublas.CheckResult(0, 0)


@pytest.mark.usefixtures("small_pattern")
@pytest.mark.parametrize(("kind", "nonfinite"), [("flip", 0), ("nan", 1)])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
def test_injected_fault_is_found_then_cleared(kind: str, nonfinite: int, dtype: str) -> None:
    worker, _ = make_worker(FakeGpu(free=20_000), dtype, n=16)
    setup = worker.setup()
    assert setup.result_buffers > 2  # the spoiled last buffer is not this batch's full compare
    worker.run_batch()
    worker.inject(kind)
    checked = worker.check_batch()
    assert (checked.mismatched_elements, checked.nonfinite_elements) == (1, nonfinite)
    worker.run_batch()
    assert worker.check_batch() == cublas.CheckResult(0, 0)


@pytest.mark.usefixtures("small_pattern")
def test_full_compare_catches_what_a_checksum_cannot_see() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "fp32", n=16)
    worker.setup()
    # Buffer 0 is this batch's full compare: a lowest-bit change is counted bitwise even if
    # its column sum rounded to the same fp32 value. The device computes it wrong (the fake
    # spoils the product as the GEMM writes it): poking memory after run_batch would come
    # after the pipelined check of that buffer.
    gpu.faults[worker._buffers[0]] = [flip_bits([(0, 0x01)])]
    worker.run_batch()
    assert worker.check_batch().mismatched_elements == 1


@pytest.mark.usefixtures("small_pattern")
def test_many_mismatching_columns_switch_to_a_whole_buffer_compare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cublas, "MAX_EXACT_COLUMNS", 2)
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    worker.setup()
    # the last buffer's product comes out wrong in five columns (see the test above for why
    # the fault is armed before run_batch rather than poked in afterwards)
    gpu.faults[worker._buffers[-1]] = [flip_bits([(column * 32 + 1, 0x40) for column in range(5)])]
    worker.run_batch()
    assert worker.check_batch().mismatched_elements == 5


@pytest.mark.usefixtures("small_pattern")
def test_close_frees_everything_and_reports_the_first_failure() -> None:
    gpu = FakeGpu(free=20_000)
    worker, blas = make_worker(gpu, "bf16", n=16)
    worker.setup()
    assert gpu.memory
    worker.close()
    assert gpu.memory == {}
    assert any(name == "cublasDestroy_v2" for name, _ in blas.calls)
    worker.close()  # twice is harmless


@pytest.mark.usefixtures("small_pattern")
def test_setup_failure_surfaces_as_cuda_error() -> None:
    gpu = FakeGpu(free=20_000)
    gpu.failures["cublasGemmEx"] = 13
    worker, _ = make_worker(gpu, "bf16", n=16)
    with pytest.raises(CudaError, match="cublasGemmEx failed: CUBLAS_STATUS_EXECUTION_FAILED"):
        worker.setup()
    worker.close()
    assert gpu.memory == {}


# --- the pipeline: the device never waits for the host's checks ----------------------------------


def run_and_check(worker: cublas.CublasWorker, batches: int) -> list[cublas.CheckResult]:
    results = []
    for _ in range(batches):
        worker.run_batch()
        results.append(worker.check_batch())
    return results


@pytest.mark.usefixtures("small_pattern")
def test_the_next_products_are_queued_whenever_the_host_reads_results() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    count = worker.setup().result_buffers
    half = (count + 1) // 2
    seen = len(gpu.deliveries)
    queued_at_check = []
    for _ in range(4):
        worker.run_batch()
        # check_batch compares batch N: batch N+1's first half must already be queued
        queued_at_check.append(gpu.pending_products())
        assert worker.check_batch() == cublas.CheckResult(0, 0)
    assert queued_at_check == [worker._buffers[:half]] * 4
    # and each time results of a batch reached the host, half a batch of products was still
    # queued behind them: the device computes while the host compares
    reads = gpu.deliveries[seen:]
    assert len(reads) >= 8
    assert min(reads) >= count - half


@pytest.mark.usefixtures("small_pattern")
def test_batches_copy_only_checksums_and_one_buffer_through_page_locked_memory() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    count = worker.setup().result_buffers
    pageable, d2h, h2d = gpu.pageable_d2h, gpu.d2h_bytes, gpu.h2d_bytes
    run_and_check(worker, 3)
    assert gpu.pageable_d2h == pageable  # no pageable device-to-host copy after setup
    gpu._run_all()  # what the last batch queued ahead
    # per batch: every buffer's column checksums (16 fp32 each) and one buffer (16 x 16 bf16)
    per_batch = count * 16 * 4 + 16 * 16 * 2
    assert gpu.d2h_bytes - d2h == 3 * per_batch + count * 16 * 4  # + the queued batch's sums
    assert gpu.h2d_bytes == h2d  # and nothing goes up


def test_the_fake_shows_a_read_of_page_locked_memory_before_its_copy_ran() -> None:
    gpu = FakeGpu()
    api, _, _ = fake_api(gpu)
    stream = api.stream_create()
    device = api.malloc(8)
    gpu.memory[device][:] = b"12345678"
    host = api.host_alloc(8)
    api.memcpy_async(host, device, 8, 2, stream)
    assert gpu.pending_copies_into(host, 8)
    assert cublas.read_host(host, 8) == b"\xff" * 8  # not waited for: garbage
    api.stream_synchronize(stream)
    assert not gpu.pending_copies_into(host, 8)
    assert cublas.read_host(host, 8) == b"12345678"


@pytest.mark.usefixtures("small_pattern")
def test_the_worker_reads_page_locked_memory_only_after_its_copy_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "fp16", n=16)
    real_read = cublas.read_host
    reads = []

    def careful(address: int, size: int) -> bytes:
        assert not gpu.pending_copies_into(address, size), "read before its copy ran"
        reads.append(address)
        return real_read(address, size)

    monkeypatch.setattr(cublas, "read_host", careful)
    worker.setup()
    assert run_and_check(worker, 3) == [cublas.CheckResult(0, 0)] * 3
    worker.run_batch()
    worker.inject("nan")
    assert worker.check_batch() == cublas.CheckResult(1, 1)
    assert worker._sums_host in reads


@pytest.mark.usefixtures("small_pattern")
def test_products_and_checks_run_on_non_blocking_streams_of_their_own() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    worker.setup()
    assert sorted(gpu.stream_flags.values()) == [1, 1]  # cudaStreamNonBlocking
    assert gpu.handles[0xB1A5] == worker._compute != 0
    worker.run_batch()
    assert all(op.stream != 0 for queue in gpu.queues.values() for op in queue)


@pytest.mark.usefixtures("small_pattern")
def test_a_wrong_product_in_the_first_half_is_counted_exactly_from_the_device() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    worker.setup()

    # buffer 1: checked in run_batch while the second half computes; not the full compare
    def nan_at_row_0_column_9(block: bytearray, offset: int) -> None:
        block[offset + 9 * 32 : offset + 9 * 32 + 2] = (0x7FC0).to_bytes(2, "little")

    flip = flip_bits([(7 * 32 + 2 * 2 + 1, 0x40)])  # row 2, column 7
    gpu.faults[worker._buffers[1]] = [flip, nan_at_row_0_column_9]
    worker.run_batch()
    assert worker.check_batch() == cublas.CheckResult(2, 1)
    assert run_and_check(worker, 2) == [cublas.CheckResult(0, 0)] * 2  # a transient fault


@pytest.mark.usefixtures("small_pattern")
def test_inject_is_found_once_whichever_buffer_the_rotation_compares() -> None:
    worker, _ = make_worker(FakeGpu(free=4400), "bf16", n=16)
    assert worker.setup().result_buffers == 4
    for _ in range(5):  # the spoiled last buffer is the full compare of batch 3
        worker.run_batch()
        worker.inject("flip")
        assert worker.check_batch() == cublas.CheckResult(1, 0)
    assert run_and_check(worker, 1) == [cublas.CheckResult(0, 0)]


@pytest.mark.usefixtures("small_pattern")
def test_a_batch_left_unchecked_is_checked_by_the_next_run_batch() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    worker.setup()
    gpu.faults[worker._buffers[-1]] = [flip_bits([(5, 0x40)])]
    worker.run_batch()
    worker.run_batch()  # batch 0 was never checked: what it found is kept
    assert worker.check_batch() == cublas.CheckResult(1, 0)
    with pytest.raises(RuntimeError, match="no batch to check"):
        worker.check_batch()
    with pytest.raises(RuntimeError, match="no batch to spoil"):
        worker.inject("flip")
    assert run_and_check(worker, 1) == [cublas.CheckResult(0, 0)]


class BrokenBusId(FakeGpu):
    """Device 3's bus id cannot be read."""

    def cudaDeviceGetPCIBusId(self, text: Any, length: int, device: int) -> int:
        if device == 3:
            return 999  # cudaErrorUnknown
        return super().cudaDeviceGetPCIBusId(text, length, device)


def test_device_bus_ids_are_written_as_nvml_writes_them(tmp_path: Path) -> None:
    for name in ("libcudart.so.12", "libcublas.so.12"):
        touch(tmp_path / name)
    gpu = BrokenBusId(devices=4, bus_ids={0: "0000:19:00.0", 1: "0000:3b:00.0", 2: "garbage"})
    backend = cublas.CublasBackend(dirs=[str(tmp_path)], opener=lambda path: FakeLib(gpu))
    assert backend.device_bus_ids() == ["00000000:19:00.0", "00000000:3B:00.0", "", ""]
    (call,) = [args for name, args in gpu_calls(backend) if args[2] == 0]
    assert call[1] >= 13  # room for "0000:19:00.0" and its NUL


def gpu_calls(backend: cublas.CublasBackend) -> list[tuple[str, tuple[Any, ...]]]:
    return [c for c in backend.api.cudart.calls if c[0] == "cudaDeviceGetPCIBusId"]


def test_the_backend_says_which_dtypes_it_burns() -> None:
    assert cublas.CublasBackend.dtypes == frozenset({"bf16", "fp16", "tf32", "fp32"})
    assert "fp8" not in cublas.CublasBackend.dtypes


@pytest.mark.usefixtures("small_pattern")
def test_close_releases_every_stream_buffer_event_and_the_handle() -> None:
    gpu = FakeGpu(free=20_000)
    worker, _ = make_worker(gpu, "bf16", n=16)
    worker.setup()
    assert gpu.live() == {
        "device memory": 5 + 28,  # A, B, the first product, ones, checksums; 28 result buffers
        "pinned memory": 2,  # checksums, staging
        "streams": 2,
        "events": 8,
        "handles": 1,
    }
    run_and_check(worker, 2)
    worker.run_batch()
    worker.inject("flip")
    worker.close()  # with work still queued
    assert set(gpu.live().values()) == {0}
    worker.close()  # twice is harmless
    assert set(gpu.live().values()) == {0}


@pytest.mark.usefixtures("small_pattern")
@pytest.mark.parametrize(
    ("function", "call"),
    [
        ("cublasCreate_v2", 1),
        ("cudaStreamCreateWithFlags", 1),
        ("cudaStreamCreateWithFlags", 2),
        ("cublasSetStream_v2", 1),
        ("cudaEventCreate", 5),
        ("cudaMalloc", 4),
        ("cudaHostAlloc", 1),
        ("cudaHostAlloc", 2),
        ("cublasGemmEx", 2),
    ],
)
def test_close_after_a_setup_that_failed_halfway(function: str, call: int) -> None:
    gpu = FakeGpu(free=20_000)
    gpu.fail_on[function] = (call, 2)
    worker, _ = make_worker(gpu, "bf16", n=16)
    with pytest.raises(CudaError, match=function):
        worker.setup()
    worker.close()  # frees what was made, never what was not
    assert set(gpu.live().values()) == {0}


# --- on a real GPU -----------------------------------------------------------------------------


def real_backend() -> cublas.CublasBackend:
    try:
        return cublas.CublasBackend()
    except BackendUnavailable as exc:
        pytest.skip(f"no cuBLAS GPU: {exc}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32", "fp32"])
def test_gpu_burn_detects_an_injected_flip(dtype: str) -> None:
    backend = real_backend()
    config = BurnConfig(dtype=dtype, matrix_size=2048, memory_fraction=0.05)
    worker = backend.worker(0, config)
    try:
        setup = worker.setup()
        assert setup.reference_ok, setup.reference_max_error
        assert setup.result_buffers >= 2
        timing = worker.run_batch()
        assert timing.products == setup.result_buffers
        assert timing.compute_s > 0
        assert worker.check_batch() == cublas.CheckResult(0, 0)
        # each check is of the batch run_batch last returned, so each inject follows a run_batch
        worker.run_batch()
        worker.inject("flip")
        assert worker.check_batch().mismatched_elements == 1
        worker.run_batch()
        worker.inject("nan")
        assert worker.check_batch() == cublas.CheckResult(1, 1)
        worker.run_batch()
        assert worker.check_batch() == cublas.CheckResult(0, 0)  # recomputed: clean again
    finally:
        worker.close()


@pytest.mark.gpu
def test_gpu_digests_agree_across_devices() -> None:
    backend = real_backend()
    if backend.device_count() < 2:
        pytest.skip("one GPU")
    config = BurnConfig(matrix_size=1024, memory_fraction=0.02)
    digests = set()
    for device in range(min(2, backend.device_count())):
        worker = backend.worker(device, config)
        try:
            digests.add(worker.setup().digest)
        finally:
            worker.close()
    assert len(digests) == 1


@pytest.mark.gpu
def test_gpu_bus_ids_are_read_for_every_device() -> None:
    backend = real_backend()
    ids = backend.device_bus_ids()
    assert len(ids) == backend.device_count()
    for bus_id in ids:
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", bus_id), ids


@pytest.mark.gpu
def test_gpu_stays_busy_while_the_host_checks() -> None:
    # The event-timed product seconds over the wall seconds of whole run+check cycles: the
    # host's checks overlap the next products, so only the column checksums (a few percent
    # of the device's time at n = 8192, outside the timed products) and launch gaps remain.
    backend = real_backend()
    config = BurnConfig(dtype="bf16", matrix_size=8192, memory_fraction=0.2)
    worker = backend.worker(0, config)
    try:
        worker.setup()
        for _ in range(2):  # warm up clocks and the cuBLAS heuristics
            worker.run_batch()
            worker.check_batch()
        started = time.monotonic()
        compute = 0.0
        for _ in range(6):
            compute += worker.run_batch().compute_s
            assert worker.check_batch() == cublas.CheckResult(0, 0)
        duty = compute / (time.monotonic() - started)
        assert duty >= 0.9, duty
    finally:
        worker.close()
