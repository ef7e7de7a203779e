"""The GPU burn-in through the host's own cuBLAS, called with ctypes (no numpy, no torch).

Semantics follow the numpy reference backend:

* Inputs come from a fixed seed and are identical on every GPU: a ``PATTERN`` x
  ``PATTERN`` block of pseudo-random values in [-1, 1), generated in pure
  Python, rounded to the input precision, and tiled over the n x n matrices on
  the device (one host-to-device copy of a column strip, then device-to-device
  doubling), so generation costs milliseconds even at n = 8192.
* ``K`` result buffers fill ``memory_fraction`` of the free device memory (at
  least 2). The first product is kept as the reference; a ``REFERENCE_TILE``
  square of it is checked against an fp64 product computed in pure Python over
  the full inner dimension, within ``TOLERANCES[dtype]`` of the tile's largest
  magnitude. Its sha256 digest (of the bytes) is equal across healthy GPUs of a
  model.
* Every batch recomputes every buffer, and the device never waits for the
  host's checks (see :class:`CublasWorker` for the pipeline). A column-sum
  checksum of each buffer is computed on the device with cuBLAS itself (a
  matrix-vector product with a vector of ones, fp32 accumulate, pedantic for
  fp32 data) and copied back into page-locked memory (4 bytes per column).
  Columns whose checksum differs bitwise from the first product's are read
  from the device and counted element by element against the host's copy of
  the first product (read once, at setup), bitwise, NaN/Inf included. A
  checksum can in principle miss a change below the fp32 rounding of a column
  sum (a low bit of a tiny element); so, in addition, one buffer per batch (in
  rotation) is read in chunks through a page-locked staging buffer and compared
  bytewise in full. Host traffic per batch: ``K * n * 4`` bytes of checksums
  plus one buffer (128 MiB at n = 8192 in bf16), all while the device computes.
* Results are bf16 / fp16 / fp32 like the inputs (tf32 keeps fp32 storage).
* fp8 is not implemented: it needs cublasLt with scaling descriptors.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import operator
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

from validator.node.burnin.backend import (
    BackendUnavailable,
    BatchTiming,
    CheckResult,
    SetupResult,
)
from validator.node.burnin.burn_config import DEFAULT_MATRIX_SIZE, BurnConfig
from validator.node.burnin.cuda_libs import (
    MEMCPY_DEVICE_TO_DEVICE,
    MEMCPY_DEVICE_TO_HOST,
    MEMCPY_HOST_TO_DEVICE,
    STREAM_NON_BLOCKING,
    CudaApi,
    CudaLibraries,
    Opener,
    find_cuda_libraries,
    load_library,
    open_api,
    search_dirs,
)
from validator.node.parsers.smi_common import normalize_bus_id

# cudaDataType_t (library_types.h)
CUDA_R_32F = 0
CUDA_R_16F = 2
CUDA_R_16BF = 14
# cublasComputeType_t, cublasMath_t, cublasOperation_t, cublasGemmAlgo_t (cublas_api.h)
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_PEDANTIC = 69
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_DEFAULT_MATH = 0
CUBLAS_TF32_TENSOR_OP_MATH = 3
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
CUBLAS_GEMM_DEFAULT = -1

PATTERN = 256  # side of the random block tiled over the inputs
REFERENCE_TILE = 8  # side of the product tile checked against fp64
# Relative to the tile's largest magnitude. The output rounding dominates: bf16 keeps 8
# significant bits (2^-8 ~ 4e-3 relative), fp16 11 bits, tf32 rounds products to 11 bits
# inside the tensor cores, fp32 accumulates 8192 terms in 24 bits. Each bound is a few
# times the expected worst case, so a wrong layout or a wrong type fails by orders of
# magnitude while honest rounding passes.
TOLERANCES = {"bf16": 2e-2, "fp16": 1e-2, "tf32": 5e-3, "fp32": 1e-4}
CHUNK_BYTES = 16 << 20  # host copies for the full compare and the digest
SUB_BLOCK_BYTES = 4096  # a mismatching chunk is narrowed to these before counting elements
MAX_EXACT_COLUMNS = 64  # more mismatching columns than this: compare the whole buffer

_ELEMENT_SIZE = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}
_ONE = {"bf16": 0x3F80, "fp16": 0x3C00, "fp32": 0x3F800000, "tf32": 0x3F800000}
_NAN = {"bf16": 0x7FC0, "fp16": 0x7E00, "fp32": 0x7FC00000, "tf32": 0x7FC00000}
_EXPONENT = {"bf16": 0x7F80, "fp16": 0x7C00, "fp32": 0x7F800000, "tf32": 0x7F800000}
_TOP_MANTISSA_BIT = {"bf16": 1 << 6, "fp16": 1 << 9, "fp32": 1 << 22, "tf32": 1 << 22}


@dataclass(frozen=True)
class GemmTypes:
    """How one burn dtype maps onto cublasGemmEx."""

    input_format: str  # bf16 | fp16 | tf32 (fp32 storage, 10-bit mantissa) | fp32
    output_format: str  # bf16 | fp16 | fp32
    input_type: int  # cudaDataType_t of A and B
    output_type: int  # cudaDataType_t of C
    compute_type: int  # cublasComputeType_t of the burn products
    checksum_compute_type: int  # of the column-sum checks: never reduced precision
    math_mode: int  # cublasMath_t of the handle


GEMM_TYPES = {
    "bf16": GemmTypes(
        "bf16",
        "bf16",
        CUDA_R_16BF,
        CUDA_R_16BF,
        CUBLAS_COMPUTE_32F,
        CUBLAS_COMPUTE_32F,
        CUBLAS_DEFAULT_MATH,
    ),
    "fp16": GemmTypes(
        "fp16",
        "fp16",
        CUDA_R_16F,
        CUDA_R_16F,
        CUBLAS_COMPUTE_32F,
        CUBLAS_COMPUTE_32F,
        CUBLAS_DEFAULT_MATH,
    ),
    "tf32": GemmTypes(
        "tf32",
        "fp32",
        CUDA_R_32F,
        CUDA_R_32F,
        CUBLAS_COMPUTE_32F_FAST_TF32,
        CUBLAS_COMPUTE_32F_PEDANTIC,
        CUBLAS_TF32_TENSOR_OP_MATH,
    ),
    "fp32": GemmTypes(
        "fp32",
        "fp32",
        CUDA_R_32F,
        CUDA_R_32F,
        CUBLAS_COMPUTE_32F,
        CUBLAS_COMPUTE_32F_PEDANTIC,
        CUBLAS_DEFAULT_MATH,
    ),
}


# --- numbers as bytes ------------------------------------------------------------------------


def element_size(fmt: str) -> int:
    """Bytes per element of an encoding (bf16, fp16, tf32, fp32)."""
    return _ELEMENT_SIZE[fmt]


def encode(values: Sequence[float], fmt: str) -> bytes:
    """Little-endian bytes of ``values`` in ``fmt``.

    bf16 keeps the top 16 bits of the float32 (truncation, as the numpy backend
    rounds); tf32 keeps fp32 storage with the low 13 mantissa bits cleared; fp16
    rounds to nearest.
    """
    count = len(values)
    if fmt == "fp16":
        return struct.pack(f"<{count}e", *values)
    words = struct.unpack(f"<{count}I", struct.pack(f"<{count}f", *values))
    if fmt == "bf16":
        return struct.pack(f"<{count}H", *(word >> 16 for word in words))
    if fmt == "tf32":
        return struct.pack(f"<{count}I", *(word & 0xFFFFE000 for word in words))
    if fmt == "fp32":
        return struct.pack(f"<{count}I", *words)
    raise ValueError(f"unknown encoding {fmt!r}")


def decode(data: bytes, fmt: str) -> list[float]:
    """The values of little-endian ``data`` in ``fmt``."""
    size = element_size(fmt)
    count = len(data) // size
    if fmt == "fp16":
        return list(struct.unpack(f"<{count}e", data[: count * 2]))
    if fmt == "bf16":
        halves = struct.unpack(f"<{count}H", data[: count * 2])
        return list(
            struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *(h << 16 for h in halves)))
        )
    if fmt in ("fp32", "tf32"):
        return list(struct.unpack(f"<{count}f", data[: count * 4]))
    raise ValueError(f"unknown encoding {fmt!r}")


_MASK64 = (1 << 64) - 1


def uniform_values(seed: int, count: int) -> list[float]:
    """``count`` values in [-1, 1) from splitmix64: the same on every host and Python version."""
    state = seed & _MASK64
    values = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        values.append((z >> 11) * 2.0**-52 - 1.0)
    return values


def pattern(seed: int, side: int, fmt: str) -> tuple[bytes, list[float]]:
    """A ``side`` x ``side`` column-major block of values in [-1, 1) from ``seed``.

    Returns:
        The encoded bytes and the exact values they hold (after rounding to ``fmt``).
    """
    raw = uniform_values(seed, side * side)
    data = encode(raw, fmt)
    return data, decode(data, fmt)


def column_strip(block: bytes, side: int, n: int, size: int) -> bytes:
    """The first ``min(side, n)`` columns of the n x n tiling of a column-major block.

    Column k of the matrix is column ``k % side`` of the block, its rows repeating
    every ``side``; the rest of the matrix repeats this strip every ``side`` columns.
    """
    reps, rest = divmod(n, side)
    columns = []
    for k in range(min(side, n)):
        column = block[k * side * size : (k + 1) * side * size]
        columns.append(column * reps + column[: rest * size])
    return b"".join(columns)


def tiled(values: Sequence[float], side: int, row: int, col: int) -> float:
    """Element (row, col) of the matrix tiled from a column-major ``side`` x ``side`` block."""
    return values[(row % side) + (col % side) * side]


def reference_tile(
    a_values: Sequence[float], b_values: Sequence[float], side: int, n: int, tile: int
) -> list[list[float]]:
    """``C[i][j]`` for i, j < tile of the tiled product A @ B, over all n terms, in fp64."""
    columns = [[tiled(b_values, side, k, j) for k in range(n)] for j in range(tile)]
    exact = []
    for i in range(tile):
        row = [tiled(a_values, side, i, k) for k in range(n)]
        exact.append([math.fsum(map(operator.mul, row, column)) for column in columns])
    return exact


def relative_error(got: Sequence[Sequence[float]], exact: Sequence[Sequence[float]]) -> float:
    """Largest absolute difference over the largest exact magnitude (inf if anything is NaN)."""
    scale = max((abs(v) for line in exact for v in line), default=0.0) or 1e-30
    worst = 0.0
    for got_line, exact_line in zip(got, exact):
        for value, expected in zip(got_line, exact_line):
            difference = abs(value - expected)
            if math.isnan(difference):
                return math.inf
            worst = max(worst, difference)
    return worst / scale


def buffer_count(free: int, fraction: float, n: int, input_size: int, output_size: int) -> int:
    """How many result buffers fit: ``fraction`` of ``free`` bytes, less what else is kept.

    Kept besides the result buffers: A and B, the first product, the vector of
    ones and the first product's checksum. Each result buffer also holds a column
    checksum (n fp32 values). That is all the device memory a worker allocates:
    the pipeline needs no snapshot (a half is recomputed only after its check),
    and its copies land in page-locked host memory. At least 2, so there is
    always something to compare.
    """
    fixed = 2 * n * n * input_size + n * n * output_size + n * output_size + n * 4
    per_buffer = n * n * output_size + n * 4
    return max(2, int((fraction * free - fixed) // per_buffer))


def differing_elements(reference: bytes, actual: bytes, size: int) -> list[int]:
    """Indices of the ``size``-byte elements that differ bitwise.

    Equal stretches are skipped at memcmp speed; only mismatching sub-blocks are
    walked element by element.
    """
    if reference == actual:
        return []
    block = max(size, SUB_BLOCK_BYTES - SUB_BLOCK_BYTES % size)
    found = []
    for start in range(0, max(len(reference), len(actual)), block):
        ref_part = reference[start : start + block]
        act_part = actual[start : start + block]
        if ref_part == act_part:
            continue
        for offset in range(0, max(len(ref_part), len(act_part)), size):
            if ref_part[offset : offset + size] != act_part[offset : offset + size]:
                found.append((start + offset) // size)
    return found


def _candidate_table(mask: int) -> bytes:
    return bytes(1 if byte & mask == mask else 0 for byte in range(256))


_TOP_BYTE_MASK = {"bf16": 0x7F, "fp16": 0x7C, "fp32": 0x7F, "tf32": 0x7F}
_CANDIDATES = {fmt: _candidate_table(mask) for fmt, mask in _TOP_BYTE_MASK.items()}


def count_nonfinite(data: bytes, fmt: str) -> int:
    """Elements whose exponent bits are all ones (NaN or Inf).

    The top byte of each element is screened at C speed (translate + count);
    only elements whose top byte could belong to a NaN/Inf are decoded.
    """
    size = element_size(fmt)
    marks = data[size - 1 :: size].translate(_CANDIDATES[fmt])
    if marks.count(1) == 0:
        return 0
    exponent = _EXPONENT[fmt]
    count = 0
    position = marks.find(1)
    while position >= 0:
        word = int.from_bytes(data[position * size : (position + 1) * size], "little")
        if word & exponent == exponent:
            count += 1
        position = marks.find(1, position + 1)
    return count


def spoil(element: bytes, kind: str, fmt: str) -> bytes:
    """One element made wrong: ``nan`` -> a quiet NaN, ``flip`` -> its top mantissa bit flipped.

    The top mantissa bit changes the value by a quarter to a half, which no
    checksum can miss; a zero (whose flip would be a denormal) becomes 1.0.
    """
    size = element_size(fmt)
    word = int.from_bytes(element, "little")
    if kind == "nan":
        word = _NAN[fmt]
    elif word & ~(1 << (size * 8 - 1)) == 0:
        word = _ONE[fmt]
    else:
        word ^= _TOP_MANTISSA_BIT[fmt]
    return word.to_bytes(size, "little")


# --- the backend -----------------------------------------------------------------------------


def read_host(address: int, size: int) -> bytes:
    """A copy of ``size`` bytes of host memory at ``address``.

    Page-locked buffers filled by the device are read only through here, so a
    test can see when the host looks at them.
    """
    return ctypes.string_at(address, size)


class CublasBackend:
    """cuBLAS GemmEx on every GPU the CUDA runtime sees.

    Args:
        dirs: where to look for the libraries (default: :func:`search_dirs`).
        opener: loads one library file (tests pass a fake).

    Raises:
        BackendUnavailable: libraries missing or unloadable, or no device; the message says which.
    """

    name = "cublas"
    dtypes = frozenset(GEMM_TYPES)  # what it can burn (fp8 needs cublasLt)

    def __init__(self, dirs: Sequence[str] | None = None, opener: Opener = load_library) -> None:
        candidates = find_cuda_libraries(search_dirs() if dirs is None else dirs)
        api, libraries, count = open_api(candidates, opener)
        self.api: CudaApi = api
        self.libraries: CudaLibraries = libraries
        self._count = count

    def device_count(self) -> int:
        """Devices the CUDA runtime sees (respects CUDA_VISIBLE_DEVICES)."""
        return self._count

    def device_bus_ids(self) -> list[str]:
        """The PCI bus id of each CUDA ordinal, as NVML writes it ("00000000:19:00.0").

        CUDA numbers devices its own way (and CUDA_VISIBLE_DEVICES renumbers them);
        the bus id says which NVML device an ordinal is. A device whose id cannot
        be read has "" in its place.
        """
        ids = []
        for ordinal in range(self._count):
            try:
                raw = self.api.device_pci_bus_id(ordinal)
            except Exception:  # noqa: BLE001 - one unreadable device must not hide the others
                raw = ""
            ids.append(normalize_bus_id(raw) or "")
        return ids

    def worker(self, device: int, config: BurnConfig) -> CublasWorker:
        """A worker for one device.

        Raises:
            BackendUnavailable: the dtype is fp8 (needs cublasLt, not implemented).
        """
        if config.dtype not in GEMM_TYPES:
            raise BackendUnavailable(f"{config.dtype} needs cublasLt: not implemented")
        return CublasWorker(self.api, device, config)


@dataclass
class _Half:
    """A run of result buffers computed, then checked, in turn with the other half."""

    first: int  # index of its first buffer
    count: int
    start: int = 0  # events: before its products,
    end: int = 0  # after them,
    ready: int = 0  # after its checksums (compute stream),
    copied: int = 0  # after the checksums reached host memory (copy stream)

    @property
    def indices(self) -> range:
        return range(self.first, self.first + self.count)


class CublasWorker:
    """One GPU's products and checks, pipelined so the device never waits for the host.

    The result buffers are two halves. On a non-blocking compute stream the
    device works through them in turn: one half's products (between two events,
    which time them), then that half's column checksums; a copy stream waits for
    those and copies the checksums into page-locked host memory. The host checks
    one half while the device computes the other, and queues a half again only
    once it is checked:

    * ``run_batch`` (returning batch N) checks the first half of batch N while
      the second half computes, queues the first half of batch N+1, then waits
      for the second half's products;
    * ``check_batch`` checks the second half of batch N while the first half of
      batch N+1 computes, then queues the second half of batch N+1.

    So a half's device buffers still hold the checked batch's products while it
    is checked: the rotating whole-buffer compare and the columns whose checksum
    differs are read from the device and counted exactly, and nothing is
    drained. Every method makes the device current first: the runtime's current
    device belongs to the calling thread, and the worker's methods run in its own.
    """

    def __init__(self, api: CudaApi, device: int, config: BurnConfig) -> None:
        self._api = api
        self._device = device
        self._config = config
        self._types = GEMM_TYPES[config.dtype]
        self._n = config.matrix_size or DEFAULT_MATRIX_SIZE
        self._in_size = element_size(self._types.input_format)
        self._out_size = element_size(self._types.output_format)
        self._handle = 0
        self._streams: list[int] = []
        self._compute = self._copy = 0
        self._events: list[int] = []
        self._allocations: list[int] = []
        self._host: list[int] = []  # page-locked host allocations
        self._a = self._b = self._ones = self._first = self._sums = 0
        self._sums_host = self._staging = self._staging_size = 0
        self._buffers: list[int] = []
        self._halves: list[_Half] = []
        self._first_host = b""  # the first product, read once at setup
        self._first_sums = b""
        self._found = (0, 0)  # (mismatched, nonfinite) since the last check_batch
        self._batch = -1  # the batch run_batch last returned
        self._unchecked = False  # that batch's second half is not checked yet
        self._started = False

    # --- helpers ---

    def _alloc(self, size: int) -> int:
        pointer = self._api.malloc(size)
        self._allocations.append(pointer)
        return pointer

    def _host_alloc(self, size: int) -> int:
        pointer = self._api.host_alloc(size)
        self._host.append(pointer)
        return pointer

    def _upload(self, pointer: int, data: bytes) -> None:
        """Setup only: a pageable copy on stream 0, ordered before the burn by a device sync."""
        host = ctypes.create_string_buffer(data, len(data))
        self._api.memcpy(pointer, ctypes.addressof(host), len(data), MEMCPY_HOST_TO_DEVICE)

    def _fetch(self, pointer: int, size: int) -> bytes:
        """``size`` device bytes through the page-locked staging buffer.

        A synchronous copy on stream 0, which the non-blocking streams neither
        wait for nor hold up: the host waits for this copy only, while the
        device keeps computing. The caller makes sure nothing queued writes there.
        """
        if size > self._staging_size:
            raise ValueError(f"fetch of {size} bytes exceeds the {self._staging_size}-byte staging")
        self._api.memcpy(self._staging, pointer, size, MEMCPY_DEVICE_TO_HOST)
        return read_host(self._staging, size)

    def _fill_tiled(self, pointer: int, block: bytes) -> None:
        """The n x n tiling of ``block``: one strip uploaded, then doubled on the device."""
        n, size = self._n, self._in_size
        strip = column_strip(block, PATTERN, n, size)
        self._upload(pointer, strip)
        filled = min(PATTERN, n)
        while filled < n:
            count = min(filled, n - filled)
            self._api.memcpy(
                pointer + filled * n * size, pointer, count * n * size, MEMCPY_DEVICE_TO_DEVICE
            )
            filled += count

    def _gemm(self, out: int) -> None:
        n, types = self._n, self._types
        self._api.gemm_ex(
            self._handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n,
            ctypes.c_float(1.0), self._a, types.input_type, n,
            self._b, types.input_type, n,
            ctypes.c_float(0.0), out, types.output_type, n,
            types.compute_type, CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip

    def _checksum(self, matrix: int, out: int) -> None:
        """Column sums of ``matrix`` into ``out`` (n fp32): ``out = matrix^T @ ones``."""
        n, types = self._n, self._types
        self._api.gemm_ex(
            self._handle, CUBLAS_OP_T, CUBLAS_OP_N, n, 1, n,
            ctypes.c_float(1.0), matrix, types.output_type, n,
            self._ones, types.output_type, n,
            ctypes.c_float(0.0), out, CUDA_R_32F, n,
            types.checksum_compute_type, CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip

    def _chunks(self) -> list[tuple[int, int]]:
        total = self._n * self._n * self._out_size
        step = CHUNK_BYTES - CHUNK_BYTES % self._out_size
        return [(offset, min(step, total - offset)) for offset in range(0, total, step)]

    def _queue_half(self, half: _Half) -> None:
        """The half's products (timed by its events), then its checks, on the compute stream."""
        api = self._api
        api.event_record(half.start, self._compute)
        for index in half.indices:
            self._gemm(self._buffers[index])
        api.event_record(half.end, self._compute)
        self._queue_checks(half)

    def _queue_checks(self, half: _Half) -> None:
        """The half's checksums on the compute stream, copied to host memory on the copy stream."""
        api, stride = self._api, self._n * 4
        for index in half.indices:
            self._checksum(self._buffers[index], self._sums + (index + 1) * stride)
        api.event_record(half.ready, self._compute)
        api.stream_wait_event(self._copy, half.ready)
        api.memcpy_async(
            self._sums_host + half.first * stride,
            self._sums + (half.first + 1) * stride,
            half.count * stride,
            MEMCPY_DEVICE_TO_HOST,
            self._copy,
        )
        api.event_record(half.copied, self._copy)

    def _check_half(self, half: _Half, batch: int) -> None:
        """Compare the half's products of ``batch`` with the first product; add what differs.

        Waits only for the half's checksum copy. Its buffers are not queued again
        before this returns, so what is read from them is that batch's products.
        """
        self._api.event_synchronize(half.copied)
        stride = self._n * 4
        sums = read_host(self._sums_host + half.first * stride, half.count * stride)
        rotating = batch % len(self._buffers)
        mismatched, nonfinite = self._found
        for position, index in enumerate(half.indices):
            own = sums[position * stride : (position + 1) * stride]
            columns = differing_elements(self._first_sums, own, 4)
            buffer = self._buffers[index]
            if index == rotating or len(columns) > MAX_EXACT_COLUMNS:
                found = self._compare_whole(buffer)
            elif columns:
                found = self._compare_columns(buffer, columns)
            else:
                continue
            mismatched += found[0]
            nonfinite += found[1]
        self._found = (mismatched, nonfinite)

    def _finish_check(self) -> None:
        """Check the second half of the last batch, then queue it for the next one."""
        second = self._halves[1]
        self._check_half(second, self._batch)
        self._queue_half(second)
        self._unchecked = False

    def _compare_whole(self, pointer: int) -> tuple[int, int]:
        """(mismatched, nonfinite) of a buffer against the first product, bytewise in chunks."""
        mismatched = nonfinite = 0
        fmt = self._types.output_format
        for offset, size in self._chunks():
            actual = self._fetch(pointer + offset, size)
            reference = self._first_host[offset : offset + size]
            if reference != actual:
                mismatched += len(differing_elements(reference, actual, self._out_size))
                nonfinite += count_nonfinite(actual, fmt)
        return mismatched, nonfinite

    def _compare_columns(self, pointer: int, columns: Sequence[int]) -> tuple[int, int]:
        mismatched = nonfinite = 0
        column_bytes = self._n * self._out_size
        for column in columns:
            offset = column * column_bytes
            reference = self._first_host[offset : offset + column_bytes]
            actual = self._fetch(pointer + offset, column_bytes)
            mismatched += len(differing_elements(reference, actual, self._out_size))
            if reference != actual:
                nonfinite += count_nonfinite(actual, self._types.output_format)
        return mismatched, nonfinite

    # --- the protocol ---

    def setup(self) -> SetupResult:
        """Inputs, the first product and its checks, then as many result buffers as fit."""
        api, n, types = self._api, self._n, self._types
        api.set_device(self._device)
        free, _ = api.mem_info()
        self._handle = api.blas_create()
        api.blas_set_math_mode(self._handle, types.math_mode)
        for _ in range(2):
            self._streams.append(api.stream_create(STREAM_NON_BLOCKING))
        self._compute, self._copy = self._streams
        api.blas_set_stream(self._handle, self._compute)
        for _ in range(8):
            self._events.append(api.event_create())
        a_block, a_values = pattern(self._config.seed, PATTERN, types.input_format)
        b_block, b_values = pattern(self._config.seed + 1, PATTERN, types.input_format)
        count = buffer_count(free, self._config.memory_fraction, n, self._in_size, self._out_size)
        self._a = self._alloc(n * n * self._in_size)
        self._b = self._alloc(n * n * self._in_size)
        self._first = self._alloc(n * n * self._out_size)
        self._ones = self._alloc(n * self._out_size)
        self._sums = self._alloc((count + 1) * n * 4)
        self._buffers = [self._alloc(n * n * self._out_size) for _ in range(count)]
        self._sums_host = self._host_alloc(count * n * 4)
        largest_chunk = max(size for _, size in self._chunks())
        self._staging_size = max(largest_chunk, n * self._out_size, n * 4)
        self._staging = self._host_alloc(self._staging_size)
        half = (count + 1) // 2
        self._halves = [_Half(0, half), _Half(half, count - half)]
        for index, part in enumerate(self._halves):
            part.start, part.end, part.ready, part.copied = self._events[4 * index : 4 * index + 4]
        self._fill_tiled(self._a, a_block)
        self._fill_tiled(self._b, b_block)
        one = _ONE[types.output_format].to_bytes(self._out_size, "little")
        self._upload(self._ones, one * n)
        # The uploads and doublings ran on stream 0, which the compute stream does not wait for.
        api.synchronize()
        self._gemm(self._first)
        self._checksum(self._first, self._sums)
        api.stream_synchronize(self._compute)
        self._first_sums = self._fetch(self._sums, n * 4)
        digest = hashlib.sha256()
        parts = []
        for offset, size in self._chunks():
            data = self._fetch(self._first + offset, size)
            digest.update(data)
            self._found = (0, self._found[1] + count_nonfinite(data, types.output_format))
            parts.append(data)
        self._first_host = b"".join(parts)
        tile = min(REFERENCE_TILE, n)
        column = n * self._out_size
        got = [
            decode(self._first_host[j * column : j * column + tile * self._out_size],
                   types.output_format)
            for j in range(tile)
        ]  # fmt: skip
        exact = reference_tile(a_values, b_values, PATTERN, n, tile)
        # got holds columns (column-major); exact holds rows: compare transposed.
        got_rows = [[got[j][i] for j in range(tile)] for i in range(tile)]
        error = relative_error(got_rows, exact)
        return SetupResult(
            matrix_size=n,
            result_buffers=count,
            reference_ok=error <= TOLERANCES[self._config.dtype],
            # JSON has no Infinity: a NaN or Inf in the tile is reported as the largest float,
            # and reference_ok is False either way.
            reference_max_error=error if math.isfinite(error) else sys.float_info.max,
            digest=digest.hexdigest()[:16],
            deterministic=True,
        )

    def run_batch(self) -> BatchTiming:
        """Every result buffer recomputed once, timed with events on the device.

        Before it returns, the first half of the batch is checked (while the
        second half computed) and the first half of the next batch is queued.
        A batch left unchecked is checked here, and what it found is kept for
        the next ``check_batch``.
        """
        api = self._api
        api.set_device(self._device)
        first, second = self._halves
        if self._unchecked:
            self._finish_check()
        if not self._started:
            self._queue_half(first)
            self._queue_half(second)
            self._started = True
        batch = self._batch + 1
        self._check_half(first, batch)
        first_ms = api.event_elapsed_ms(first.start, first.end)  # before its events are reused
        self._queue_half(first)
        api.event_synchronize(second.end)
        second_ms = api.event_elapsed_ms(second.start, second.end)
        self._batch, self._unchecked = batch, True
        return BatchTiming(products=len(self._buffers), compute_s=(first_ms + second_ms) / 1000.0)

    def check_batch(self) -> CheckResult:
        """Check the batch ``run_batch`` last returned while the device computes the next.

        Checksums of every buffer, exact counts where they differ, one buffer in
        full (in rotation).

        Raises:
            RuntimeError: no batch was returned since the last check.
        """
        self._api.set_device(self._device)
        if not self._unchecked:
            raise RuntimeError("check_batch: no batch to check (call run_batch first)")
        self._finish_check()
        mismatched, nonfinite = self._found
        self._found = (0, 0)
        return CheckResult(mismatched_elements=mismatched, nonfinite_elements=nonfinite)

    def inject(self, kind: str) -> None:
        """Spoil one element of the last result buffer (row n/3, column n/5) of the last batch.

        The batch is the one ``run_batch`` last returned; the next ``check_batch``
        finds exactly that element.

        The buffer's half was already checksummed on the device: once that is done
        (nothing reads or writes the half until it is checked), the element is
        rewritten and the half's checksums are queued again.

        Raises:
            RuntimeError: no batch was returned since the last check.
        """
        api, n, size = self._api, self._n, self._out_size
        api.set_device(self._device)
        if not self._unchecked:
            raise RuntimeError("inject: no batch to spoil (call run_batch first)")
        second = self._halves[1]
        api.event_synchronize(second.copied)
        address = self._buffers[-1] + ((n // 3) + (n // 5) * n) * size
        element = self._fetch(address, size)
        ctypes.memmove(self._staging, spoil(element, kind, self._types.output_format), size)
        # From page-locked memory a synchronous copy is complete when it returns.
        api.memcpy(address, self._staging, size, MEMCPY_HOST_TO_DEVICE)
        self._queue_checks(second)

    def close(self) -> None:
        """Free every allocation, page-locked buffer, event, stream and the handle.

        Only what setup got is released, so a half-done setup closes cleanly; the
        first failure is raised at the end.
        """
        api = self._api
        failures: list[Exception] = []
        try:
            api.set_device(self._device)
        except Exception as exc:  # noqa: BLE001 - still try to free what we can
            failures.append(exc)
        releases: list[tuple[Callable[[int], None], int]] = []
        if self._handle:
            releases.append((api.blas_destroy, self._handle))
        releases += [(api.free, pointer) for pointer in self._allocations]
        releases += [(api.free_host, pointer) for pointer in self._host]
        releases += [(api.event_destroy, event) for event in self._events]
        releases += [(api.stream_destroy, stream) for stream in self._streams]
        if releases:
            try:
                api.synchronize()  # queued products still use what is freed below
            except Exception as exc:  # noqa: BLE001 - free anyway
                failures.append(exc)
        for release, target in releases:
            try:
                release(target)
            except Exception as exc:  # noqa: BLE001 - keep freeing the rest
                failures.append(exc)
        self._allocations, self._host, self._events, self._streams = [], [], [], []
        self._buffers, self._halves, self._handle = [], [], 0
        self._compute = self._copy = self._staging = self._sums_host = 0
        self._unchecked = self._started = False
        if failures:
            raise failures[0]
