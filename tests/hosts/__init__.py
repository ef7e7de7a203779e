"""Real SSH test hosts on this machine: network namespaces over one cached Debian root.

See ``tests/hosts/README.md`` for how they are built and torn down, and
:mod:`tests.hosts.testhosts` for the API.
"""

from __future__ import annotations
