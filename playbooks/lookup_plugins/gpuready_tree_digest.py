"""Lookup plugin: the inputs digest gpuready_converged compares (sha256, hex).

``lookup('gpuready_tree_digest')`` digests, on the controller, (a) the content of the
playbook tree that runs (``roles/``, ``library/``, ``lookup_plugins/`` and ``site.yml``
under ``playbook_dir``), so that any role or module change invalidates convergence, and
(b) the host's variables the roles read: every variable named with a role's prefix,
``gpuready_`` (the pins) or ``provision_``, less the run-specific ones (RUN_SPECIFIC),
taken as written (not templated), sorted, as JSON. Both parts are declared here only.

The tree part is computed once per controller process and playbook directory; the
variables part per host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: gpuready_tree_digest
short_description: sha256 over the playbook tree and the host's role variables
description:
  - Returns one hex digest; see the module docstring for what goes in.
options:
  _terms:
    description: Unused.
    required: false
"""

# What of playbook_dir runs: every file below these (sorted by path), contents included.
TREE: tuple[str, ...] = ("roles", "library", "lookup_plugins", "site.yml")
# Variable name prefixes beyond the roles' own (playbook_dir/roles/<role> -> "<role>_").
EXTRA_PREFIXES: tuple[str, ...] = ("gpuready_", "provision_")
# Run-specific or set by the run itself: never part of what a host should look like.
RUN_SPECIFIC = re.compile(
    r"^provision_(run_id|serial|max_fail_percentage|slurm_.*|force|probe.*|converged|inputs_digest)$"
)

_TREE_CACHE: dict[str, tuple[str, list[str]]] = {}


def tree_digest(playbook_dir: str) -> tuple[str, list[str]]:
    """``(sha256 hex, role names)`` of the tree under ``playbook_dir`` (cached)."""
    cached = _TREE_CACHE.get(playbook_dir)
    if cached is not None:
        return cached
    sha = hashlib.sha256()
    paths: list[str] = []
    for entry in TREE:
        top = os.path.join(playbook_dir, entry)
        if os.path.isfile(top):
            paths.append(top)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            paths += [
                os.path.join(dirpath, name) for name in filenames if not name.endswith(".pyc")
            ]
    for path in sorted(paths):
        sha.update(os.path.relpath(path, playbook_dir).encode() + b"\0")
        with open(path, "rb") as handle:
            sha.update(handle.read())
        sha.update(b"\0")
    roles_dir = os.path.join(playbook_dir, "roles")
    roles = sorted(os.listdir(roles_dir)) if os.path.isdir(roles_dir) else []
    _TREE_CACHE[playbook_dir] = (sha.hexdigest(), roles)
    return _TREE_CACHE[playbook_dir]


def variables_part(variables: dict[str, Any], roles: list[str]) -> str:
    """The host's role variables as sorted JSON (values as written, not templated)."""
    prefixes = tuple(f"{role}_" for role in roles) + EXTRA_PREFIXES
    chosen = {
        name: value
        for name, value in variables.items()
        if name.startswith(prefixes) and not RUN_SPECIFIC.match(name)
    }
    return json.dumps(chosen, sort_keys=True, default=str)


def inputs_digest(playbook_dir: str, variables: dict[str, Any]) -> str:
    """The digest: the tree's and the variables', hashed together."""
    tree, roles = tree_digest(playbook_dir)
    sha = hashlib.sha256(tree.encode() + b"\0")
    sha.update(variables_part(variables, roles).encode())
    return sha.hexdigest()


class LookupModule(LookupBase):  # type: ignore[misc]  # ansible is untyped
    """``lookup('gpuready_tree_digest')``: one hex digest."""

    def run(
        self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: object
    ) -> list[str]:
        """Return ``[digest]`` for the current host's variables."""
        scope = variables or {}
        playbook_dir = scope.get("playbook_dir")
        if not playbook_dir:
            raise AnsibleLookupError("gpuready_tree_digest: playbook_dir is not set")
        return [inputs_digest(str(playbook_dir), scope)]
