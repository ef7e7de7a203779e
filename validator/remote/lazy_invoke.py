"""paramiko imported without ``invoke``: invoke is imported on first use instead.

paramiko imports invoke (and with it unittest.mock) only to run an ssh_config's
``Match exec`` line: ~30 ms of every fleet run's start-up, for a line few configs
have. Importing this module imports paramiko with a stand-in in invoke's place,
so paramiko's ``import invoke`` costs nothing; the real package is imported the
first time paramiko reads one of its names. The stand-in is in ``sys.modules`` only
while paramiko is imported: any other ``import invoke`` (or of its submodules) gets
the real package. Where invoke is not installed, or invoke or paramiko is already
imported, paramiko is imported as it is.

The stand-in is a module with invoke's spec and a module ``__getattr__`` (PEP 562),
not importlib's LazyLoader: on Python 3.11 the ``import`` statement itself reads a
lazy module's ``__spec__``, which loads it at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

NAME = "invoke"


def _stand_in() -> types.ModuleType | None:
    """A module that imports the real invoke when a name is read from it; None without one."""
    spec = importlib.util.find_spec(NAME)
    if spec is None:
        return None
    stand_in = types.ModuleType(NAME)
    stand_in.__spec__ = spec

    def real_attribute(name: str) -> object:
        return getattr(importlib.import_module(NAME), name)

    vars(stand_in)["__getattr__"] = real_attribute  # PEP 562: asked for names it lacks
    return stand_in


def import_paramiko() -> None:
    """Import paramiko with the stand-in for invoke, then take the stand-in away."""
    if NAME in sys.modules or "paramiko" in sys.modules:
        importlib.import_module("paramiko")
        return
    stand_in = _stand_in()
    if stand_in is not None:
        sys.modules[NAME] = stand_in
    try:
        importlib.import_module("paramiko")  # paramiko.config keeps the stand-in
    finally:
        if stand_in is not None and sys.modules.get(NAME) is stand_in:
            del sys.modules[NAME]


import_paramiko()
