"""Fixtures for end-to-end tests on real SSH test hosts (tests/hosts).

``test_hosts`` is function-scoped: each test gets its own empty
:class:`~tests.hosts.testhosts.TestHostPool` (its own /24, client key and
hosts) and calls ``test_hosts.start([...])``; the pool is torn down after the
test, pass or fail. Starting hosts is cheap (about 0.1 s for three), so tests
never share hosts. The Debian root filesystem is built once per machine
(cached under /var/cache/gpuready-testhosts) by the session-scoped
``test_rootfs``; Ubuntu-shaped hosts (``start([...], shape="ubuntu2404")``) share
it, their release files written into each host's overlay.

Every test using ``test_hosts`` or ``test_rootfs`` gets the ``hosts`` marker (``-m "not hosts"``
leaves them out) and is skipped, with the reason, when this machine cannot
make hosts: not root, ``ip``/``unshare``/``chroot``/``debootstrap`` missing,
the root filesystem cannot be built, or ``GPUREADY_SKIP_HOSTS=1``;
with ``GPUREADY_REQUIRE_HOSTS=1`` (for CI) those tests fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.testhosts import (
    HostsUnavailable,
    TestHostPool,
    cached_rootfs,
    check_prerequisites,
    ensure_rootfs,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "hosts: needs real SSH test hosts in network namespaces (root, iproute2, util-linux, "
        "debootstrap or a cached root filesystem); skipped otherwise",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"test_hosts", "test_rootfs"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.hosts)


@pytest.fixture(scope="session")
def test_rootfs() -> Path:
    """The cached Debian root filesystem; skips every host test when it cannot be had."""
    if os.environ.get("GPUREADY_SKIP_HOSTS") == "1":
        pytest.skip("GPUREADY_SKIP_HOSTS=1")
    try:
        check_prerequisites(building=cached_rootfs() is None)
        return ensure_rootfs()
    except HostsUnavailable as exc:
        # CI sets this so that a machine that lost its hosts fails loudly instead of skipping.
        if os.environ.get("GPUREADY_REQUIRE_HOSTS") == "1":
            pytest.fail(f"GPUREADY_REQUIRE_HOSTS=1 but no test hosts: {exc}")
        pytest.skip(f"no test hosts on this machine: {exc}")


@pytest.fixture
def test_hosts(test_rootfs: Path) -> Iterator[TestHostPool]:
    """An empty pool for this test; ``.start([scenario or None, ...])`` makes hosts."""
    del test_rootfs  # only ordered before: the build (or skip) happens once per session
    with TestHostPool() as pool:
        yield pool
