"""validator.codec: one packed format for the store and the agent, read back within a bound."""

from __future__ import annotations

import zlib

import pytest

from validator import codec

TEXT = (
    '{"gpus":['
    + ",".join(f'{{"index":{i},"name":"NVIDIA H100 80GB HBM3"}}' for i in range(64))
    + "]}"
)


@pytest.mark.parametrize("quick", [False, True])
def test_packed_text_comes_back_with_or_without_a_bound(quick: bool) -> None:
    blob = codec.pack(TEXT, quick=quick)
    assert blob.startswith(codec.XZ_MAGIC) is not quick
    assert codec.unpack(blob) == TEXT
    assert codec.unpack(blob, limit=len(TEXT)) == TEXT


@pytest.mark.parametrize("quick", [False, True])
def test_text_past_the_bound_is_refused_before_it_is_all_unpacked(quick: bool) -> None:
    blob = codec.pack(TEXT, quick=quick)
    with pytest.raises(ValueError, match=f"more than {len(TEXT) - 1} bytes"):
        codec.unpack(blob, limit=len(TEXT) - 1)


@pytest.mark.parametrize("quick", [False, True])
def test_packed_data_cut_short_is_refused_with_or_without_a_bound(quick: bool) -> None:
    blob = codec.pack(TEXT, quick=quick)[:-6]
    for limit in (None, 10 * len(TEXT)):
        with pytest.raises(ValueError, match=r"end-of-stream|incomplete|cut short") as refused:
            codec.unpack(blob, limit=limit)
        assert "\n" not in str(refused.value)


def test_a_bomb_is_refused_at_the_bound() -> None:
    """A few KB that would unpack to 64 MB stop at the bound, not in memory."""
    bomb = zlib.compress(b"0" * (64 * 1024 * 1024), 9)
    assert len(bomb) < 100_000
    with pytest.raises(ValueError, match="more than 1048576 bytes"):
        codec.unpack(bomb, limit=1024 * 1024)
