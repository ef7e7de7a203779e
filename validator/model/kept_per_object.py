"""A value kept for each model object while it lives (an object's packed JSON, say)."""

from __future__ import annotations

import weakref
from typing import Dict, Generic, Optional, Tuple, TypeVar

Held = TypeVar("Held")
Kept = TypeVar("Kept")


class KeptPerObject(Generic[Held, Kept]):
    """A value kept for each model object while the object lives.

    Keyed by the object's identity, not its equality (hashing a frozen dataclass hashes
    every field it holds, a burn's thousands of samples too), with a weak reference so
    an entry goes with its object.

    No lock: each access is one dict operation, atomic in CPython. A lock would
    deadlock, as the weak reference's callback runs wherever a collection happens,
    in the same thread too (an allocation while the lock is held). The callback
    removes only its own entry; in a race it may remove a newer one, which costs
    making the value again, never a wrong value (an entry counts only for the
    object it was kept for).
    """

    def __init__(self) -> None:
        self._entries: Dict[int, Tuple[weakref.ref[Held], Kept]] = {}

    def get(self, item: Held) -> Optional[Kept]:
        """The value kept for ``item``, or None."""
        entry = self._entries.get(id(item))
        if entry is not None and entry[0]() is item:
            return entry[1]
        return None

    def keep(self, item: Held, value: Kept) -> None:
        """Keep ``value`` for ``item`` from now on, while it lives."""
        key = id(item)
        entries = self._entries

        def forget(ref: object, key: int = key) -> None:
            current = entries.get(key)
            if current is not None and current[0] is ref:
                entries.pop(key, None)

        entries[key] = (weakref.ref(item, forget), value)
