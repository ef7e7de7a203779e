"""paramiko's ``invoke`` imported on first use, not with paramiko.

paramiko imports invoke (and with it unittest.mock) only to run an ssh_config's
``Match exec`` line: ~30 ms of every fleet run's start-up, for a line few configs
have. Importing this module first puts a stand-in in invoke's place, so paramiko's
``import invoke`` costs nothing, and the real package is imported the first time
anything reads one of its names. Where invoke is not installed, or is already
imported, nothing changes.

The stand-in is a module with its real spec and a module ``__getattr__`` (PEP 562),
not importlib's LazyLoader: on Python 3.11 the ``import`` statement itself reads a
lazy module's ``__spec__``, which loads it at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

NAME = "invoke"


def defer_invoke() -> None:
    """Put a stand-in for ``invoke`` in ``sys.modules``, unless it is there or not installed."""
    if NAME in sys.modules:
        return
    spec = importlib.util.find_spec(NAME)
    if spec is None:
        return
    stand_in = types.ModuleType(NAME)
    stand_in.__spec__ = spec

    def real_attribute(name: str) -> object:
        if sys.modules.get(NAME) is stand_in:
            del sys.modules[NAME]  # so the import below runs the real package
        return getattr(importlib.import_module(NAME), name)

    vars(stand_in)["__getattr__"] = real_attribute  # PEP 562: asked for names it lacks
    sys.modules[NAME] = stand_in


defer_invoke()
