"""The live sampler: every GPU through NVML, once per interval, on a thread of its own."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Callable

from validator.model import (
    ErrorCounters,
    Reason,
    TelemetrySample,
    Unavailable,
    counters_unavailable,
)
from validator.node import nvml

Session = Callable[[], contextlib.AbstractContextManager[object]]


class NvmlSampler:
    """Samples power, temperatures, clocks, utilisation and clock-event reasons at a fixed rate.

    NVML is opened once for the whole burn. If it cannot be opened, every
    trace is empty and counters are unmeasured: the judge then says the burn's
    telemetry could not be read, never that it was fine.
    """

    name = "nvml"

    def __init__(
        self,
        indexes: Sequence[int],
        interval_s: float = 1.0,
        session: Session | None = None,
    ) -> None:
        self._indexes = list(indexes)
        self._interval = interval_s
        self._session_factory: Session = session or nvml.nvml_session
        self._stack = contextlib.ExitStack()
        self._lib: object | None = None
        self._error = ""
        self._samples: dict[int, list[TelemetrySample]] = {i: [] for i in self._indexes}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def _open(self) -> object | None:
        if self._lib is None and not self._error:
            try:
                self._lib = self._stack.enter_context(self._session_factory())
            except RuntimeError as exc:
                self._error = str(exc)
        return self._lib

    def counters(self, index: int) -> ErrorCounters:
        """A GPU's error counters now (unmeasured when NVML is unavailable)."""
        lib = self._open()
        if lib is None:
            return counters_unavailable(Unavailable(Reason.ERROR, self._error))
        return nvml.read_counters(lib, index)

    def start(self) -> None:
        """Take the first sample now, then one per interval."""
        self._start = time.monotonic()
        if self._open() is None:
            return
        self._thread = threading.Thread(target=self._loop, name="burn-sampler", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        lib = self._lib
        if lib is None:
            return
        t_s = round(time.monotonic() - self._start, 3)
        for index in self._indexes:
            self._samples[index].append(nvml.sample_gpu(lib, index, t_s))

    def _loop(self) -> None:
        while True:
            self._tick()
            if self._stop.wait(self._interval):
                return

    def latest(self) -> dict[int, TelemetrySample]:
        """The last sample taken of each GPU."""
        return {index: samples[-1] for index, samples in self._samples.items() if samples}

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        """Stop sampling; the trace per GPU (counters stay readable until close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval * 5 + 5)
        return {index: tuple(samples) for index, samples in self._samples.items()}

    def close(self) -> None:
        """Shut NVML down."""
        self._stack.close()
