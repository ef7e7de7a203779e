"""Which burn-in backend runs: the named one, else the best GPU backend that loads.

The backends import :mod:`validator.node.burnin.backend` for what they implement; this
module imports them, so that nothing imports back and forth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from validator.node.burnin.backend import Backend, BackendUnavailable

if TYPE_CHECKING:
    from validator.node.burnin.numpy_backend import SimulatedBoards


def select_backend(
    name: str | None, dtype: str, *, simulated: SimulatedBoards | None = None
) -> Backend:
    """The named backend, or the best GPU backend that loads and can burn ``dtype``.

    Without a name: cublas, then torch (cublas cannot burn fp8, torch can).
    The numpy backend measures the CPU, so it is used only when asked for by
    name, or for a simulated node (whose boards it stands in for).

    Raises:
        BackendUnavailable: the named backend (or every backend) cannot run here.
    """
    from validator.node.burnin import numpy_backend

    if simulated is not None:
        if name not in (None, "numpy"):
            raise BackendUnavailable(
                f"a simulated node can only burn with the numpy backend, not {name}"
            )
        return numpy_backend.NumpyBackend(boards=simulated)
    order = [name] if name else ["cublas", "torch"]
    reasons = []
    for candidate in order:
        try:
            backend = _load(candidate)
        except BackendUnavailable as exc:
            reasons.append(f"{candidate}: {exc}")
            continue
        if dtype in backend.dtypes:
            return backend
        reasons.append(
            f"{candidate} cannot burn {dtype} (it runs {', '.join(sorted(backend.dtypes))})"
        )
    raise BackendUnavailable("; ".join(reasons))


def _load(name: str) -> Backend:
    if name == "numpy":
        from validator.node.burnin.numpy_backend import NumpyBackend

        return NumpyBackend()
    if name == "torch":
        from validator.node.burnin.torch_backend import TorchBackend

        return TorchBackend()
    if name == "cublas":
        from validator.node.burnin.cublas import CublasBackend

        return CublasBackend()
    raise BackendUnavailable(f"unknown backend {name!r}: use cublas, torch or numpy")
