"""Results as packed JSON text: encoded once per object, shared by the store and the host files.

The history store keeps a result as two packed texts, its facts and the rest; a
fleet's host files (``hosts/<name>.json``) hold the same two texts joined. A fleet
records and writes every host twice, as it arrives and after the fleet judgement,
and encoding a certifying result (to_dict, then json.dumps) costs more than judging
it: so each object is encoded once, its packed bytes remembered while it lives, and
the host file is written from them (unpacking costs a tenth of encoding).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Generic, TypeVar

from validator.codec import XZ_MAGIC, pack, unpack
from validator.limits import AGENT_OUTPUT_BYTES, size_text
from validator.model import BurnResult, KeptPerObject, NodeFacts, NodeResult, from_dict, to_dict


def encode(data: object) -> str:
    """JSON text as results are kept: compact, keys sorted, no NaN or infinity.

    Raises:
        ValueError: a number that is not finite (JSON has no such value).
    """
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


Item = TypeVar("Item")


class PackedPerObject(Generic[Item]):
    """Each object's packed encoding, remembered while the object lives.

    The packed bytes are a few KB, against the hundreds of KB the object holds
    (see :class:`~validator.model.KeptPerObject`).
    """

    def __init__(self, text_of: Callable[[Item], str], *, quick: bool = False) -> None:
        self._text_of = text_of
        self._quick = quick  # packed with pack(quick=True)
        self._kept: KeptPerObject[Item, bytes] = KeptPerObject()

    def get(self, item: Item) -> bytes:
        """``item`` packed: remembered from an earlier call for this object, else packed now."""
        packed = self._kept.get(item)
        if packed is None:
            packed = pack(self._text_of(item), quick=self._quick)
            self._kept.keep(item, packed)
        return packed

    def remember(self, item: Item, packed: bytes) -> None:
        """Take ``packed`` as ``item``'s packed encoding from now on, while it lives."""
        self._kept.keep(item, packed)


def _facts_text(facts: NodeFacts) -> str:
    # Facts made from held ones (a copy with another field changed) keep the held burn:
    # encoded with its samples back, never without them.
    return encode(to_dict(facts_with_samples(facts)))


_RESULT_FIELDS = tuple(item.name for item in dataclasses.fields(NodeResult) if item.name != "facts")


def _result_text(result: NodeResult) -> str:
    return encode({name: to_dict(getattr(result, name)) for name in _RESULT_FIELDS})


# The fleet comparison replaces a result's findings, never its facts: the facts,
# nearly all of a result's bytes, are encoded once per run.
_FACTS = PackedPerObject(_facts_text)
_RESULTS = PackedPerObject(_result_text, quick=True)


def packed_facts(facts: NodeFacts) -> bytes:
    """The facts as the store keeps them (:func:`encode`, then :func:`pack`)."""
    return _FACTS.get(facts)


# The most an agent may print, and the most its packed facts may unpack to (a few KB of
# xz can unpack to GBs).
AGENT_OUTPUT_LIMIT = AGENT_OUTPUT_BYTES
AGENT_FACTS_LIMIT = AGENT_OUTPUT_BYTES
# Output that is packed (``--packed``): base64 on one line, of xz's magic or zlib's 0x78.
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def agent_facts(output: bytes | str) -> NodeFacts:
    """The facts an agent printed, its text kept as their packed encoding.

    The agent prints its facts as :func:`encode` would (keys sorted, compact), from
    the same model: encoding them again here would give the same text, for about
    what judging the host costs. With ``--packed`` it prints that text packed
    (validator.codec) in base64 on one line, and those bytes are kept as they came,
    so the controller packs nothing for the host. What is kept is kept only once
    ``from_dict`` has accepted the text (which refuses NaN and infinity), so it
    decodes to the facts, whatever an agent of another version left out or wrote
    differently. Output that is neither is read as JSON, for JSON's own error.

    Raises:
        SchemaError: JSON that does not fit NodeFacts (naming the path).
        ValueError: neither JSON nor packed JSON (not UTF-8, damaged, cut short, past
            :data:`AGENT_FACTS_LIMIT` unpacked or :data:`AGENT_OUTPUT_LIMIT` printed, or
            nested too deeply).
    """
    if len(output) > AGENT_OUTPUT_LIMIT:
        raise ValueError(
            f"more than {size_text(AGENT_OUTPUT_LIMIT)} of output: no agent prints that much"
        )
    text = (output.decode("utf-8") if isinstance(output, bytes) else output).strip()
    blob = _packed_bytes(text)
    if blob is not None:
        try:
            text = unpack(blob, limit=AGENT_FACTS_LIMIT)
        except ValueError as exc:
            raise ValueError(f"packed facts that do not unpack: {exc}") from None
        if text != text.strip():  # kept as one line: a host file joins it with the rest
            text, blob = text.strip(), None
    try:
        facts = from_dict(NodeFacts, json.loads(text))
    except RecursionError:
        raise ValueError("JSON nested too deeply to be NodeFacts") from None
    _FACTS.remember(facts, blob if blob is not None else pack(text))
    return facts


def _packed_bytes(text: str) -> bytes | None:
    """The packed bytes ``text`` carries in base64, or None when it is not packed output."""
    if not _BASE64.fullmatch(text):
        return None
    try:
        blob = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return blob if blob.startswith(XZ_MAGIC) or blob[:1] == b"\x78" else None


def packed_result(result: NodeResult) -> bytes:
    """The result without its facts, as the store keeps it."""
    return _RESULTS.get(result)


def result_json(result: NodeResult) -> str:
    """The whole result as one JSON object (a host file): its two packed texts joined.

    Raises:
        ValueError: a number in it that is not finite.
    """
    rest = unpack(packed_result(result))
    # Both are objects; the rest always holds the hostname, so it is never "{}".
    return '{"facts":' + unpack(packed_facts(result.facts)) + "," + rest[1:]


# A fleet holds every result until its reports are written, and a default burn's 2,400
# telemetry samples are most of a decoded host (~450 of ~600 KB). A certified node's
# are read again only by a report that shows them in full, so the fleet holds it
# without them: its burn (the samples dropped) is kept here with the packed facts it
# came from, the facts' packed encoding stays the full one (the store and the host
# files write from it), and whatever shows the samples takes them back from it.
_HELD_BURNS: KeptPerObject[BurnResult, bytes] = KeptPerObject()


def without_samples(result: NodeResult) -> NodeResult:
    """``result`` with its burn's telemetry samples only in its packed facts.

    Everything packed from it is as from ``result`` (the store's rows, the host file);
    :func:`with_samples` gives the samples back. ``result`` itself when it has none.
    """
    facts = result.facts
    burn = facts.burn
    if burn is None or not any(gpu.samples for gpu in burn.gpus):
        return result
    full = packed_facts(facts)  # the agent's own text, remembered: nothing is encoded
    held_burn = dataclasses.replace(
        burn, gpus=tuple(dataclasses.replace(gpu, samples=()) for gpu in burn.gpus)
    )
    held_facts = dataclasses.replace(facts, burn=held_burn)
    _HELD_BURNS.keep(held_burn, full)
    _FACTS.remember(held_facts, full)
    return dataclasses.replace(result, facts=held_facts)


def facts_with_samples(facts: NodeFacts) -> NodeFacts:
    """``facts`` with the samples :func:`without_samples` took (``facts`` itself if none were).

    Raises:
        ValueError: the packed facts cannot be read back (they were packed here).
    """
    burn = facts.burn
    full = _HELD_BURNS.get(burn) if burn is not None else None
    if full is None:
        return facts
    whole = from_dict(NodeFacts, json.loads(unpack(full)))
    return dataclasses.replace(facts, burn=whole.burn)


def with_samples(result: NodeResult) -> NodeResult:
    """``result`` with its burn's samples back (``result`` itself if it has them)."""
    facts = facts_with_samples(result.facts)
    return result if facts is result.facts else dataclasses.replace(result, facts=facts)
