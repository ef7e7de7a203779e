"""What a burn-in is asked to do."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from validator.error_tree import BadInputError
from validator.fields import excerpt

if TYPE_CHECKING:  # the agent parses arguments; the controller, importing this, never does
    import argparse


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
MEMORY_FRACTION_MAX = 0.98
MATRIX_SIZE_MAX = 65536  # 3 bf16 matrices of it take 24 GiB: beyond is a typo, not a GPU
DEFAULT_DURATION_S = 300.0

# A duration: a bare number of seconds, or numbers with units, largest first, each unit
# once (1h30m, 2m30s, 1.5h, 250ms), as systemd and Go write them. ASCII digits only: a
# Unicode digit is refused, not read as a number its user did not see.
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_BARE = re.compile(_NUMBER)
# One number and its unit, and the space after it. Digits and spaces never overlap, so a
# long text is matched in one pass (no two ways to split it to try).
_WITH_UNIT = re.compile(rf"({_NUMBER})\s*(ms|h|m|s)\s*")
_UNIT_ORDER = ("h", "m", "s", "ms")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
# "1h30m" needs a handful; a longer text is a paste, refused before it is matched. A
# number too long for a float reads as infinity, which the callers' week refuses by name.
DURATION_CHARS = 1024
DURATION_FORMS = (
    "a number of seconds (90), or numbers with h, m, s, ms, largest first (1h30m, 2m30s, 1.5h)"
)
_NEGATIVE = re.compile(r"^\s*-")

WEEK_S = 7 * 24 * 3600.0  # the longest burn or deadline: longer is a typo (99999h), not a plan
# Short burns scale their timing (see BurnConfig.window and .warmup): a tenth of the burn warms
# up and the rest is cut into windows of a twentieth of it, until a window reaches its floor.
# Below MIN_DURATION_S the windows would stop shrinking and the plan no longer fits the burn.
WINDOW_FLOOR_S = 0.05
WINDOWS_PER_SHORT_BURN = 20
WARMUP_SHARE = 0.1
WARMUP_MAX_S = 10.0
MIN_DURATION_S = WINDOW_FLOOR_S * WINDOWS_PER_SHORT_BURN
INJECTION_ITERATION_MAX = 10**9  # a batch no burn reaches: a typo, refused up front
_INJECTION = re.compile(r"(flip|nan):([0-9]{1,100}):([0-9]{1,100})")
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp8": 1}
MATRICES_KEPT = 3  # at the least A, B and one product stay on the device


def parse_duration(text: str, flag: str = "--burn") -> float:
    """Seconds from ``90``, ``90s``, ``5m``, ``1.5h``, ``1h30m``, ``2m30s``, ``250ms``.

    Args:
        text: the duration as given.
        flag: the option it was given to, named in the error.

    Raises:
        BadInputError: the text is not a duration (negative ones included), naming
            ``flag`` and the forms accepted.
    """
    seconds = _seconds(text) if len(text) <= DURATION_CHARS else None
    if seconds is None:
        zero = ", or 0 to skip the burn" if flag == "--burn" else ""
        sign = " (it must not be negative)" if _is_negative(text) else ""
        raise BadInputError(
            f"{flag} {excerpt(text)} is not a duration{sign}: give {DURATION_FORMS}{zero}"
        )
    return seconds


def _seconds(text: str) -> float | None:
    """The seconds ``text`` stands for, or None where it is no duration."""
    body = text.strip()
    if _BARE.fullmatch(body):
        return float(body)
    total, position, last = 0.0, 0, -1
    while position < len(body):
        part = _WITH_UNIT.match(body, position)
        if part is None:
            return None
        rank = _UNIT_ORDER.index(part.group(2))
        if rank <= last:  # 30m1h, 5m5m: each unit once, the largest first
            return None
        total += float(part.group(1)) * _UNIT_S[part.group(2)]
        position, last = part.end(), rank
    return total if body else None


def _is_negative(text: str) -> bool:
    """``-5s``: a duration with a minus sign (refused with its own words)."""
    return _NEGATIVE.match(text) is not None and _seconds(text.strip()[1:]) is not None


def parse_burn_duration(text: str, flag: str = "--burn") -> float:
    """A burn's length in seconds: 0 (no burn), or from the shortest burn up to a week.

    Raises:
        BadInputError: not a duration, longer than a week, or too short to time
            (warm-up plus throughput windows, see :data:`MIN_DURATION_S`).
    """
    seconds = parse_duration(text, flag)
    if seconds > WEEK_S:
        raise BadInputError(f"{flag} {excerpt(text)} is longer than a week: give at most 168h")
    if 0 < seconds < MIN_DURATION_S:
        plan = BurnConfig(duration_s=MIN_DURATION_S)
        windows = round((MIN_DURATION_S - plan.warmup) / plan.window)
        raise BadInputError(
            f"{flag} {excerpt(text)} is too short to time: the shortest burn is "
            f"{MIN_DURATION_S:g}s (a {plan.warmup:g} s warm-up, then {windows} throughput "
            f"windows of {plan.window * 1000:.0f} ms); give {MIN_DURATION_S:g}s or more, "
            "or 0 to skip the burn"
        )
    return seconds


def parse_deadline(text: str, flag: str = "--deadline") -> float:
    """A deadline in seconds: above 0 and at most a week (0 is refused, never "the default").

    Raises:
        BadInputError: not a duration, zero, or longer than a week.
    """
    seconds = -1.0 if _is_negative(text) else parse_duration(text, flag)
    if seconds <= 0:
        raise BadInputError(
            f"{flag} must be longer than 0s, got {excerpt(text)}: give e.g. 30m, "
            f"or leave {flag} out for the default"
        )
    if seconds > WEEK_S:
        raise BadInputError(f"{flag} {excerpt(text)} is longer than a week: give at most 168h")
    return seconds


def check_matrix_fits(
    config: BurnConfig,
    memory_bytes: float,
    where: str,
    *,
    matrices: int = MATRICES_KEPT,
    element_bytes: int | None = None,
    sharers: int = 1,
) -> None:
    """Refuse a ``--burn-matrix-size`` whose matrices cannot fit the memory they go to.

    A size that cannot fit would fail every GPU's setup and read as broken hardware.
    The rule is a floor: ``matrices`` n x n matrices of the dtype (or ``element_bytes``)
    in ``memory_fraction`` of ``memory_bytes``, shared by ``sharers`` workers.

    Raises:
        BadInputError: the size does not fit, naming the largest that does.
    """
    n = config.matrix_size
    if n is None:
        return  # the backend's default for the device
    size = element_bytes or _DTYPE_BYTES[str(config.dtype)]
    usable = config.memory_fraction * memory_bytes / max(1, sharers)
    largest = math.isqrt(int(max(0.0, usable) // (matrices * size)))
    if n <= largest:
        return
    need = matrices * size * n * n
    raise BadInputError(
        f"--burn-matrix-size {n} does not fit {where}: {matrices} matrices of {n}x{n} "
        f"({size}-byte elements) need {need / 2**30:.1f} GiB of the {usable / 2**30:.1f} GiB "
        f"the burn may use there (--burn-memory-fraction {config.memory_fraction:g}); "
        f"give --burn-matrix-size {largest} or less, or leave it out for the default"
    )


@dataclass(frozen=True)
class Injection:
    """A test hook: spoil one result on one GPU in one iteration, to prove detection works."""

    gpu: int
    iteration: int
    kind: str  # "flip": one element changed; "nan": one element set to NaN

    @classmethod
    def parse(cls, text: str) -> Injection:
        """From ``KIND:GPU:ITERATION``, e.g. ``flip:3:2`` (iterations count batches from 1).

        Raises:
            BadInputError: the text does not have that shape, or names an iteration no
                burn reaches (0, or beyond :data:`INJECTION_ITERATION_MAX`).
        """
        match = _INJECTION.fullmatch(text.strip())
        if not match:
            raise BadInputError(
                f"--burn-inject {excerpt(text)} is not KIND:GPU:ITERATION with KIND flip or nan: "
                "write e.g. flip:0:2"
            )
        kind, gpu, iteration = match.group(1), int(match.group(2)), int(match.group(3))
        if not 1 <= iteration <= INJECTION_ITERATION_MAX:
            raise BadInputError(
                f"--burn-inject {excerpt(text)}: iteration {excerpt(iteration)} is never "
                f"reached: give a batch from 1 to {INJECTION_ITERATION_MAX:,}"
            )
        return cls(gpu=gpu, iteration=iteration, kind=kind)

    def __str__(self) -> str:
        return f"{self.kind}:{self.gpu}:{self.iteration}"


def check_injection_target(injection: Injection | None, gpu_indexes: Sequence[int]) -> None:
    """Refuse a ``--burn-inject`` on a GPU the node does not have (it would never apply).

    Raises:
        BadInputError: the injection names a GPU index the node lacks.
    """
    if injection is None or not gpu_indexes or injection.gpu in gpu_indexes:
        return
    count = len(gpu_indexes)
    raise BadInputError(
        f"--burn-inject {injection} names GPU {injection.gpu}, but this node has {count} "
        f"GPU{'s' if count != 1 else ''} (indexes {min(gpu_indexes)}-{max(gpu_indexes)}): "
        "give one of its GPU indexes"
    )


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
        if not 0.0 < self.memory_fraction <= MEMORY_FRACTION_MAX:
            raise BadInputError(
                f"burn memory fraction {self.memory_fraction} is out of range: "
                f"give a share in (0, {MEMORY_FRACTION_MAX}]"
            )
        if self.matrix_size is not None and not 16 <= self.matrix_size <= MATRIX_SIZE_MAX:
            raise BadInputError(
                f"burn matrix size {self.matrix_size} is out of range: use 16 to {MATRIX_SIZE_MAX}"
            )
        if not math.isfinite(self.duration_s) or not 0 <= self.duration_s <= WEEK_S:
            raise BadInputError(
                f"burn duration {self.duration_s} s is out of range: give 0 to {WEEK_S:.0f} s"
            )

    def to_argv(self) -> list[str]:
        """The node agent's arguments for this burn (:meth:`from_argv` reads them back).

        Only what a host needs to run the burn travels: the fault-injection hook
        and the timing internals stay with the controller's defaults.
        """
        # repr: every digit, so the agent burns exactly as long as the controller expects.
        argv = ["--burn", repr(self.duration_s), "--burn-dtype", self.dtype]
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
        import argparse

        parser = argparse.ArgumentParser(add_help=False)
        cls.add_arguments(parser)
        return cls.from_arguments(parser.parse_args(list(argv)))

    @property
    def window(self) -> float:
        """Seconds per throughput window: 1 s, or a twentieth of a short burn."""
        if self.window_s is not None:
            return self.window_s
        return min(1.0, max(WINDOW_FLOOR_S, self.duration_s / WINDOWS_PER_SHORT_BURN))

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
        return min(WARMUP_MAX_S, WARMUP_SHARE * self.duration_s)
