"""Measured values: a reading, or the reason it has none (:class:`Unavailable`).

Facts are what was measured. A value that could not be measured is an
:class:`Unavailable` carrying the reason, never ``None`` and never a guess. Also the
model's schema version, which every JSON document it writes carries.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from typing import TypeVar, Union

# Bump on any change that a reader of an older JSON document would misread.
SCHEMA_VERSION = 1

T = TypeVar("T")


class Reason(str, enum.Enum):
    """Why a fact has no value."""

    NOT_SUPPORTED = "not_supported"  # the device or driver does not offer it
    NOT_MEASURED = "not_measured"  # nobody asked: file missing from a capture, source lacks it
    NO_PERMISSION = "no_permission"
    GPU_LOST = "gpu_lost"  # the GPU stopped answering (fallen off the bus)
    ERROR = "error"  # asking failed; the detail says how


@dataclass(frozen=True)
class Unavailable:
    """A fact that has no value, and why."""

    reason: Reason
    detail: str = ""

    def __str__(self) -> str:
        text = self.reason.value.replace("_", " ")
        return f"{text} ({self.detail})" if self.detail else text


NOT_MEASURED = Unavailable(Reason.NOT_MEASURED)
# How every implausible reading's detail begins (``Reason.ERROR``): a value no GPU or
# host can have, so it was not measured, and the judge knows it from a mere error.
IMPLAUSIBLE = "implausible value"


def implausible_reading(value: object) -> bool:
    """True for the fact the plausibility pass put where a reading could not be."""
    return (
        isinstance(value, Unavailable)
        and value.reason is Reason.ERROR
        and value.detail.startswith(IMPLAUSIBLE)
    )


NOT_SUPPORTED = Unavailable(Reason.NOT_SUPPORTED)

# ``Measured[int]`` is an int or the reason it is missing. Written with
# ``Union`` (not ``|``) because the JSON decoder evaluates these hints at run
# time on Python 3.9.
Measured = Union[T, Unavailable]


def known(value: Measured[T]) -> bool:
    """True when ``value`` was measured."""
    return not isinstance(value, Unavailable)


# The kinds a host holds by the hundred or thousand (a default burn: 2,400 samples) keep
# slots, not a dict each: the controller holds every host's until its report. Python 3.9
# (which the agent still runs on) has no dataclass slots; there they keep the dict.
_MANY_PER_HOST: dict[str, bool] = {"slots": True} if sys.version_info >= (3, 10) else {}
