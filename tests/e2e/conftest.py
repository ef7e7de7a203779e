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

``slurm_cluster`` is a factory for a real Slurm cluster over such hosts
(:class:`~tests.hosts.slurmcluster.SlurmCluster`): ``slurm_cluster(n_hosts=4)``.
Starting one takes seconds, so the session keeps ONE cluster and hands it to
every call with the same shape (host count, unreachable hosts, extra slurm.conf
lines, binds), reset first: no jobs, no reservations, every slurmd running,
every node idle, the scenarios given (default ``healthy-8x-h100-sxm``). A call
with another shape closes it and starts a new one. Its tests get the ``hosts``
and ``slurm`` markers and skip (or fail, with ``GPUREADY_REQUIRE_HOSTS=1``)
when this machine has no Slurm or cannot build the ``debian12-slurm`` root.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.hosts.slurmcluster import SLURM_SHAPE, SlurmCluster, check_slurm_prerequisites
from tests.hosts.testhosts import (
    HostsUnavailable,
    Scenario,
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
    config.addinivalue_line(
        "markers",
        "slurm: needs a real Slurm cluster over test hosts (slurmctld, slurmd, munge, "
        "slurm-client from Debian 12); skipped otherwise",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if {"test_hosts", "test_rootfs", "slurm_cluster"} & names:
            item.add_marker(pytest.mark.hosts)
        if "slurm_cluster" in names:
            item.add_marker(pytest.mark.slurm)


def _unavailable(reason: str) -> None:
    # CI sets this so that a machine that lost its hosts fails loudly instead of skipping.
    if os.environ.get("GPUREADY_REQUIRE_HOSTS") == "1":
        pytest.fail(f"GPUREADY_REQUIRE_HOSTS=1 but no test hosts: {reason}")
    pytest.skip(f"no test hosts on this machine: {reason}")


@pytest.fixture(scope="session")
def test_rootfs() -> Path:
    """The cached Debian root filesystem; skips every host test when it cannot be had."""
    if os.environ.get("GPUREADY_SKIP_HOSTS") == "1":
        pytest.skip("GPUREADY_SKIP_HOSTS=1")
    try:
        check_prerequisites(building=cached_rootfs() is None)
        return ensure_rootfs()
    except HostsUnavailable as exc:
        _unavailable(str(exc))
        raise  # not reached: _unavailable skips or fails


@pytest.fixture
def test_hosts(test_rootfs: Path) -> Iterator[TestHostPool]:
    """An empty pool for this test; ``.start([scenario or None, ...])`` makes hosts."""
    del test_rootfs  # only ordered before: the build (or skip) happens once per session
    with TestHostPool() as pool:
        yield pool


class _SlurmClusters:
    """The session's one Slurm cluster (and its pool), kept while calls ask for its shape."""

    def __init__(self) -> None:
        self.key: tuple[object, ...] | None = None
        self.pool: TestHostPool | None = None
        self.cluster: SlurmCluster | None = None
        self.unavailable = ""

    def get(
        self,
        n_hosts: int,
        scenarios: Sequence[Scenario] | None,
        extra_conf: Sequence[str],
        ro_binds: Sequence[Path | str],
        rw_binds: Sequence[Path | str],
    ) -> SlurmCluster:
        chosen = list(scenarios) if scenarios is not None else ["healthy-8x-h100-sxm"] * n_hosts
        if len(chosen) != n_hosts:
            raise ValueError(f"{len(chosen)} scenarios for {n_hosts} hosts")
        key = (
            tuple(s is None for s in chosen),
            tuple(extra_conf),
            tuple(str(p) for p in ro_binds),
            tuple(str(p) for p in rw_binds),
        )
        if self.unavailable:
            _unavailable(self.unavailable)
        if self.cluster is not None and self.key == key and not self.cluster.closed:
            # A health check may drain a node again at once: registered is then enough.
            checks = any(line.startswith("HealthCheckProgram=") for line in extra_conf)
            self.cluster.reset(
                [s for s in chosen if s is not None], wait="responding" if checks else "IDLE!"
            )
            return self.cluster
        self.close()
        try:
            check_slurm_prerequisites()
            self.pool = TestHostPool(shape=SLURM_SHAPE)
            self.pool.start(chosen)
            self.cluster = SlurmCluster(
                self.pool, extra_conf=extra_conf, ro_binds=ro_binds, rw_binds=rw_binds
            ).start()
        except HostsUnavailable as exc:
            self.close()
            self.unavailable = str(exc)
            _unavailable(self.unavailable)
        except BaseException:
            self.close()
            raise
        self.key = key
        assert self.cluster is not None
        return self.cluster

    def close(self) -> None:
        cluster, pool = self.cluster, self.pool
        self.cluster = self.pool = None
        self.key = None
        try:
            if cluster is not None:
                cluster.close()
        finally:
            if pool is not None:
                pool.close()


@pytest.fixture(scope="session")
def _slurm_clusters(test_rootfs: Path) -> Iterator[_SlurmClusters]:
    del test_rootfs  # ordered before: the skip (or failure) when hosts cannot be made
    clusters = _SlurmClusters()
    yield clusters
    clusters.close()


@pytest.fixture
def slurm_cluster(_slurm_clusters: _SlurmClusters) -> Callable[..., SlurmCluster]:
    """A factory: ``slurm_cluster(n_hosts=4, scenarios=None, extra_conf=(), ro_binds=(),
    rw_binds=())`` returns the session's running, freshly reset cluster of that shape.

    ``scenarios``: one per host, a built-in name, a scenario object or None (a node
    whose address nobody owns: never responds). Don't ``close()`` the cluster it gives;
    a test about teardown makes its own :class:`SlurmCluster`.
    """

    def make(
        n_hosts: int = 4,
        scenarios: Sequence[Scenario] | None = None,
        extra_conf: Sequence[str] = (),
        ro_binds: Sequence[Path | str] = (),
        rw_binds: Sequence[Path | str] = (),
    ) -> SlurmCluster:
        return _slurm_clusters.get(n_hosts, scenarios, extra_conf, ro_binds, rw_binds)

    return make
