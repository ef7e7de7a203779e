"""The standard library's top-level module names, on every Python the suite runs on."""

from __future__ import annotations

import os
import pkgutil
import sys
import sysconfig


def stdlib_module_names() -> frozenset[str]:
    """``sys.stdlib_module_names`` (3.10+), or the same read off the interpreter's own tree.

    Python 3.9 has no such list: there it is what its stdlib folder and lib-dynload hold, plus
    the modules built into the interpreter.
    """
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return frozenset(names)
    stdlib = sysconfig.get_paths()["stdlib"]
    folders = [stdlib, os.path.join(stdlib, "lib-dynload")]
    found = {module.name for module in pkgutil.iter_modules(folders)}
    return frozenset(found | set(sys.builtin_module_names))
