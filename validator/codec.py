"""How kept JSON text is compressed: one format for the store, the host files and the agent.

xz at preset 0 packs a result with 300 s of burn telemetry to 11 KB in ~9 ms of
CPU; zlib takes ~6 ms for 30 KB (level 6) and ~2.5 ms for 36 KB (level 1), xz's
higher presets save 10% more for 10x the time. Text of words that repeat (a
result's findings) is packed ``quick``, with zlib: 77 KB to 4.5 KB in 0.5 ms, where
xz takes 1.3 ms for 4.3 KB. Python built without liblzma (rare, and optional in
CPython) writes zlib; a reader tells them apart by their first bytes (xz's magic;
zlib starts 0x78).

A leaf: the node agent packs its facts with it (``--packed``), so the controller
keeps the agent's bytes as they came (validator.packed) instead of packing them
again, and the facts cross the network at a tenth of their size.
"""

from __future__ import annotations

import functools
import zlib
from types import ModuleType

from validator.safe_text import one_line

XZ_PRESET = 0
ZLIB_LEVEL = 6
XZ_MAGIC = b"\xfd7zXZ\x00"


@functools.lru_cache(maxsize=1)
def _lzma() -> ModuleType | None:
    """The lzma module, or None where Python was built without it; imported on first use."""
    try:
        import lzma  # 5 ms of start-up that only packing or unpacking needs
    except ImportError:  # pragma: no cover - CPython without liblzma
        return None
    return lzma


def pack(text: str, *, quick: bool = False) -> bytes:
    """``text`` compressed: xz (preset 0), else (or ``quick``) zlib."""
    data = text.encode("utf-8")
    xz = None if quick else _lzma()
    if xz is not None:
        return bytes(xz.compress(data, format=xz.FORMAT_XZ, check=xz.CHECK_CRC32, preset=XZ_PRESET))
    return zlib.compress(data, ZLIB_LEVEL)


def unpack(blob: bytes, *, limit: int | None = None) -> str:
    """The text :func:`pack` packed.

    Args:
        blob: the packed bytes.
        limit: the most bytes the text may unpack to (a few KB of xz can unpack to GBs);
            None for none, for what this controller packed itself.

    Raises:
        ValueError: not packed data, damaged, cut short, past ``limit``, or xz on a
            Python without lzma.
    """
    xz = _lzma()
    errors: tuple[type[Exception], ...] = (zlib.error, UnicodeDecodeError, EOFError)
    if xz is not None:
        errors += (xz.LZMAError,)
    try:
        if not blob.startswith(XZ_MAGIC):
            data = zlib.decompress(blob) if limit is None else _bounded(blob, limit, None)
        elif xz is None:  # pragma: no cover - CPython without liblzma
            raise ValueError("packed with xz, and this Python has no lzma module")
        else:
            data = (
                xz.decompress(blob, format=xz.FORMAT_XZ)
                if limit is None
                else _bounded(blob, limit, xz)
            )
        return str(data.decode("utf-8"))
    except errors as exc:
        raise ValueError(one_line(exc)) from None


def _bounded(blob: bytes, limit: int, xz: ModuleType | None) -> bytes:
    """``blob`` unpacked (xz when ``xz`` is given, else zlib), refused past ``limit`` bytes."""
    unpacker = xz.LZMADecompressor(format=xz.FORMAT_XZ) if xz is not None else zlib.decompressobj()
    data = bytes(unpacker.decompress(blob, limit + 1))
    if len(data) > limit:
        raise ValueError(f"unpacks to more than {limit} bytes")
    if not unpacker.eof:
        raise ValueError("cut short: the packed data ends before its end marker")
    return data


__all__ = ["XZ_MAGIC", "XZ_PRESET", "ZLIB_LEVEL", "pack", "unpack"]
