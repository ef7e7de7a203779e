"""What a burn-in is asked to do."""

from __future__ import annotations

import argparse
import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from validator.errors import BadInputError


class Dtype(str, enum.Enum):
    """The precisions a burn-in multiplies in."""

    BF16 = "bf16"
    FP16 = "fp16"
    TF32 = "tf32"
    FP32 = "fp32"
    FP8 = "fp8"

    def __str__(self) -> str:
        return self.value


DTYPES = tuple(dtype.value for dtype in Dtype)
BACKENDS = ("cublas", "torch", "numpy")
DEFAULT_DTYPE = Dtype.BF16
DEFAULT_MATRIX_SIZE = 8192
DEFAULT_MEMORY_FRACTION = 0.9
DEFAULT_DURATION_S = 300.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``5m``, ``1.5h``.

    Raises:
        BadInputError: the text is not a duration.
    """
    match = _DURATION.match(text)
    if not match:
        raise BadInputError(
            f"burn duration {text!r} is not a duration: write e.g. 300s, 5m or 0 to skip the burn"
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class Injection:
    """A test hook: spoil one result on one GPU in one iteration, to prove detection works."""

    gpu: int
    iteration: int
    kind: str  # "flip": one element changed; "nan": one element set to NaN

    @classmethod
    def parse(cls, text: str) -> Injection:
        """From ``KIND:GPU:ITERATION``, e.g. ``flip:3:2``.

        Raises:
            BadInputError: the text does not have that shape.
        """
        kind, _, rest = text.partition(":")
        gpu, _, iteration = rest.partition(":")
        if kind not in ("flip", "nan") or not gpu.isdigit() or not iteration.isdigit():
            raise BadInputError(
                f"fault injection {text!r} is not KIND:GPU:ITERATION with KIND flip or nan"
            )
        return cls(gpu=int(gpu), iteration=int(iteration), kind=kind)


@dataclass(frozen=True)
class BurnConfig:
    """How long, how big, in what precision, on which backend."""

    duration_s: float = DEFAULT_DURATION_S
    dtype: Dtype = DEFAULT_DTYPE
    matrix_size: int | None = None  # None: the backend's default for the device
    memory_fraction: float = DEFAULT_MEMORY_FRACTION
    backend: str | None = None  # None: the best one available
    window_s: float | None = None  # None: 1 s, shorter for burns under 20 s
    warmup_s: float | None = None  # None: 10% of the duration, at most 10 s
    sample_interval_s: float = 1.0
    seed: int = 10
    grace_s: float = 60.0  # how long past the duration a worker may take before it counts as wedged
    inject: Injection | None = None

    def __post_init__(self) -> None:
        """Refuse settings no burn could honour."""
        if self.dtype not in DTYPES:
            raise BadInputError(
                f"burn dtype {str(self.dtype)!r} is unknown: use one of {', '.join(DTYPES)}"
            )
        # Given as text by click, argparse and tests: one type from here on.
        object.__setattr__(self, "dtype", Dtype(self.dtype))
        if not 0.0 < self.memory_fraction <= 0.98:
            raise BadInputError(
                f"burn memory fraction {self.memory_fraction} is out of range: "
                "give a share in (0, 0.98]"
            )
        if self.matrix_size is not None and self.matrix_size < 16:
            raise BadInputError(f"burn matrix size {self.matrix_size} is too small: use 16 or more")
        if self.duration_s < 0:
            raise BadInputError("burn duration must not be negative")

    def to_argv(self) -> list[str]:
        """The node agent's arguments for this burn (:meth:`from_argv` reads them back).

        Only what a host needs to run the burn travels: the fault-injection hook
        and the timing internals stay with the controller's defaults.
        """
        argv = ["--burn", f"{self.duration_s:g}", "--burn-dtype", self.dtype]
        if self.backend:
            argv += ["--burn-backend", self.backend]
        if self.matrix_size:
            argv += ["--burn-matrix-size", str(self.matrix_size)]
        argv += ["--burn-memory-fraction", f"{self.memory_fraction:g}"]
        return argv

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Declare the arguments :meth:`to_argv` writes on the agent's parser."""
        parser.add_argument("--burn", type=float, default=0.0, metavar="SECONDS")
        parser.add_argument("--burn-backend", choices=BACKENDS)
        parser.add_argument("--burn-dtype", choices=DTYPES, default=DEFAULT_DTYPE.value)
        parser.add_argument("--burn-matrix-size", type=int)
        parser.add_argument("--burn-memory-fraction", type=float, default=DEFAULT_MEMORY_FRACTION)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> BurnConfig | None:
        """The burn parsed arguments ask for; None when they ask for none.

        Raises:
            BadInputError: settings no burn could honour.
        """
        if args.burn <= 0:
            return None
        return cls(
            duration_s=args.burn,
            dtype=args.burn_dtype,
            backend=args.burn_backend,
            matrix_size=args.burn_matrix_size,
            memory_fraction=args.burn_memory_fraction,
        )

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> BurnConfig | None:
        """Read back what :meth:`to_argv` wrote (and nothing else)."""
        parser = argparse.ArgumentParser(add_help=False)
        cls.add_arguments(parser)
        return cls.from_arguments(parser.parse_args(list(argv)))

    @property
    def window(self) -> float:
        """Seconds per throughput window: 1 s, or a twentieth of a short burn."""
        if self.window_s is not None:
            return self.window_s
        return min(1.0, max(0.05, self.duration_s / 20.0))

    @property
    def sample_interval(self) -> float:
        """Seconds between telemetry samples: the configured interval, finer for short burns.

        A short burn still gets about 40 samples, so that the judge has enough of them
        under load (validator.trace) once warm-up and the idle tail are left out.
        """
        return min(self.sample_interval_s, max(0.05, self.duration_s / 40.0))

    @property
    def warmup(self) -> float:
        """Seconds at the start whose throughput does not count."""
        if self.warmup_s is not None:
            return self.warmup_s
        return min(10.0, 0.1 * self.duration_s)
