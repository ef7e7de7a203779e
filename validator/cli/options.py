"""Options several commands share, declared once, and the types that bound every option.

Every option's value is checked as click parses it, so bad input is one line
(``gpuready: error: ...``, exit 2) before anything runs:

* :class:`FiniteFloat`: a number in a range; NaN and infinity are refused (click's own
  ``FloatRange`` lets ``nan`` through: every comparison with NaN is false, so its range
  checks never trip).
* :class:`NonEmpty` / :class:`NonEmptyPath`: a name or a path that is not empty or blank
  (``--policy ""`` would otherwise become the current directory, or be ignored).
* :data:`BURN_DURATION` / :class:`Deadline`: durations with the burn's and the deadline's
  bounds (validator.node.burnin.burn_config); :class:`CheckedText` checks the first.

The errors are :class:`~validator.error_tree.BadInputError`, not click's usage errors: the
message names the option and the fix on one line.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from validator.error_tree import BadInputError
from validator.fields import excerpt
from validator.node.burnin.burn_config import (
    BACKENDS,
    DEFAULT_DTYPE,
    DEFAULT_MATRIX_SIZE,
    DEFAULT_MEMORY_FRACTION,
    DTYPES,
    MATRIX_SIZE_MAX,
    MEMORY_FRACTION_MAX,
    BurnConfig,
    Dtype,
    Injection,
    parse_burn_duration,
    parse_deadline,
    parse_duration,
)

F = TypeVar("F", bound=Callable[..., object])

if TYPE_CHECKING:
    from validator.service.collect_and_judge import Reach
    from validator.slurm.job_fanout import SlurmOptions


# ------------------------------------------------------------------ types


def param_label(param: click.Parameter | None, ctx: click.Context | None = None) -> str:
    """How a message names the option (``--policy``, ``DIRECTORY``) and an environment value."""
    if param is None:
        return "the value"
    if isinstance(param, click.Option):
        label = max(param.opts, key=len)
    else:
        label = param.human_readable_name
    name = param.name
    if ctx is not None and name and ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT:
        envvar = param.envvar if isinstance(param.envvar, str) else None
        label += f" (from ${envvar})" if envvar else " (from the environment)"
    return label


def refuse_blank(value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
    """``value`` itself; an empty or blank one is refused, naming the option.

    Raises:
        BadInputError: the value is empty or only white space.
    """
    if value.strip():
        return value
    label = param_label(param, ctx)
    metavar = param.metavar if param is not None and param.metavar else None
    if metavar is None:
        is_path = param is not None and isinstance(param.type, click.Path)
        metavar = "a path" if is_path else "a value"
    optional = isinstance(param, click.Option) and not param.required
    leave_out = f", or leave {label} out" if optional else ""
    raise BadInputError(f"{label} is empty: give {metavar}{leave_out}")


class NonEmpty(click.types.StringParamType):
    """A name, pattern or URL: any text but an empty or blank one."""

    name = "text"

    def convert(
        self,
        value: Any,  # noqa: ANN401 - click hands over what it parsed
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str:
        """The text, as given."""
        return refuse_blank(str(value), param, ctx)


class NonEmptyPath(click.Path):
    """A path (click's checks, as declared), never an empty or blank one.

    An empty path is the current directory to the operating system: a report
    directory would be written there, a policy ``""`` read as a directory.
    """

    def convert(
        self,
        value: Any,  # noqa: ANN401 - click hands over what it parsed
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> Any:  # noqa: ANN401 - str, bytes or a Path, as click.Path has it
        """The path, as click.Path converts it."""
        if isinstance(value, str):
            refuse_blank(value, param, ctx)
        return super().convert(value, param, ctx)


class FiniteFloat(click.types.FloatParamType):
    """A finite number from ``minimum`` to ``maximum`` (above ``minimum`` when ``above``)."""

    name = "float"

    def __init__(
        self, minimum: float, maximum: float, *, above: bool = False, unit: str = ""
    ) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.above = above
        self.unit = unit

    def _wanted(self) -> str:
        low = f"above {self.minimum:g}" if self.above else f"from {self.minimum:g}"
        unit = f" {self.unit}" if self.unit else ""
        also = " (or a duration: 30s, 2m, 1h30m)" if self.unit == "seconds" else ""
        return f"a finite number {low} up to {self.maximum:g}{unit}{also}"

    def convert(
        self,
        value: Any,  # noqa: ANN401 - click hands over what it parsed
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> float:
        """The number.

        Raises:
            BadInputError: not a number, NaN, infinite or out of the range.
        """
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if self.unit == "seconds" and math.isnan(number) and isinstance(value, str):
            # A time in seconds is a duration too: 2m, 1h30m (parse_duration's forms)
            with contextlib.suppress(BadInputError):
                number = parse_duration(value, param_label(param, ctx))
        low_ok = number > self.minimum if self.above else number >= self.minimum
        if not (math.isfinite(number) and low_ok and number <= self.maximum):
            raise BadInputError(
                f"{param_label(param, ctx)} must be {self._wanted()}, got {excerpt(str(value))}"
            )
        return number


class BoundedInt(click.types.IntParamType):
    """A whole number from ``minimum`` to ``maximum``, with a one-line error naming the option."""

    name = "integer"

    def __init__(self, minimum: int, maximum: int) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(
        self,
        value: Any,  # noqa: ANN401 - click hands over what it parsed
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> int:
        """The number.

        Raises:
            BadInputError: not a whole number, or out of the range.
        """
        text = str(value).strip()
        if isinstance(value, int) and not isinstance(value, bool):
            number: int | None = value
        else:
            number = int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None
        if number is None or not self.minimum <= number <= self.maximum:
            raise BadInputError(
                f"{param_label(param, ctx)} must be a whole number from {self.minimum} up to "
                f"{self.maximum}, got {excerpt(str(value))}"
            )
        return number


class CheckedText(click.types.StringParamType):
    """Text that ``check`` accepts (it raises otherwise), handed on as given.

    The text itself is what the commands read (a simulated node's burn default depends
    on whether ``--burn`` was given, and an injection is parsed with the burn), so it is
    only checked here.
    """

    def __init__(self, name: str, check: Callable[[str, str], object]) -> None:
        self.name = name
        self.check = check

    def convert(
        self,
        value: Any,  # noqa: ANN401 - click hands over what it parsed
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str:
        """The text, checked."""
        self.check(str(value), param_label(param))
        return str(value)


class Deadline(click.types.FloatParamType):
    """How long a host may take, in seconds: above 0, at most a week."""

    name = "duration"

    def convert(
        self,
        value: Any,  # noqa: ANN401 - click hands over what it parsed
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> float:
        """Seconds."""
        if isinstance(value, float):
            return value
        return parse_deadline(str(value), param_label(param))


TEXT = NonEmpty()
# A burn length: 0 (none), or from the shortest burn up to a week (see parse_burn_duration).
BURN_DURATION = CheckedText("duration", parse_burn_duration)


def apply_options(options: tuple[Callable[[F], F], ...], command: F) -> F:
    """Decorate ``command`` with ``options``, the first listed shown first in its help."""
    for option in reversed(options):
        command = option(command)
    return command


CONNECT_TIMEOUT_MAX_S = 3600.0
INVENTORY_TIMEOUT_MAX_S = 86400.0
INVENTORY_TIMEOUT_ENV = "GPUREADY_INVENTORY_TIMEOUT"

_FANOUT_OPTIONS: tuple[Callable[[F], F], ...] = (
    click.option(
        "--parallel",
        type=click.IntRange(min=1),
        default=64,
        show_default=True,
        help="Hosts at once.",
    ),
    click.option(
        "--deadline",
        type=Deadline(),
        metavar="DURATION",
        help="How long one host may take, at most 168h (default: the burn plus 5 minutes).",
    ),
    click.option(
        "--accept-new-host-keys",
        is_flag=True,
        help="Add unknown SSH host keys to known_hosts (a changed key is always refused).",
    ),
    click.option(
        "--connect-timeout",
        type=FiniteFloat(0.1, CONNECT_TIMEOUT_MAX_S, unit="seconds"),
        default=10.0,
        show_default=True,
        help="Seconds to wait for an SSH connection.",
    ),
    click.option(
        "--ssh-config",
        type=NonEmptyPath(dir_okay=False),
        metavar="FILE",
        help="SSH client config (default ~/.ssh/config).",
    ),
    click.option(
        "--known-hosts",
        type=NonEmptyPath(dir_okay=False),
        metavar="FILE",
        help="known_hosts file (default ~/.ssh/known_hosts).",
    ),
)


def fanout_options(command: F) -> F:
    """How to reach an inventory's hosts: concurrency, deadline, SSH settings."""
    return apply_options(_FANOUT_OPTIONS, command)


def reach_settings(options: dict[str, Any], transport: str, slurm: SlurmOptions | None) -> Reach:
    """Which hosts, and how to reach them, from a command's options (the fan-out ones taken out).

    ``transport`` is the transport's name; ``slurm`` the Slurm options, when given.
    ``--deadline``, a fan-out option too, is the request's own: the caller takes it out.
    """
    from validator.model import TransportName
    from validator.service.collect_and_judge import Reach

    return Reach(
        inventories=options["inventories"],
        limit=options["limit"],
        transport=TransportName(transport),
        parallel=options.pop("parallel"),
        accept_new_host_keys=options.pop("accept_new_host_keys"),
        connect_timeout_s=options.pop("connect_timeout"),
        ssh_config=options.pop("ssh_config"),
        known_hosts=options.pop("known_hosts"),
        slurm=slurm,
    )


def inventory_option(help_text: str, *, required: bool = False) -> Callable[[F], F]:
    """``-i/--inventory`` (repeatable) and ``--inventory-timeout``.

    ``help_text`` says what the command does with the inventory.
    """
    inventory = click.option(
        "-i",
        "--inventory",
        "inventories",
        multiple=True,
        required=required,
        type=TEXT,
        metavar="INVENTORY",
        help=help_text,
    )
    return lambda command: inventory(inventory_timeout_option(command))


def _set_inventory_timeout(
    ctx: click.Context, _param: click.Parameter, seconds: float | None
) -> None:
    """Bound every inventory script this command runs; put back when the command ends.

    The command's inventory is read deep in its service, which takes no such setting:
    ansible-core's script plugin is bounded process-wide, for this command only.
    """
    if seconds is None:
        return  # nothing to import: ansible loads only when -i is given
    from validator import ansible_inventory

    previous = ansible_inventory.set_script_timeout(seconds)
    ctx.call_on_close(lambda: ansible_inventory.set_script_timeout(previous))


inventory_timeout_option = click.option(
    "--inventory-timeout",
    type=FiniteFloat(0.0, INVENTORY_TIMEOUT_MAX_S, above=True, unit="seconds"),
    metavar="SECONDS",
    envvar=INVENTORY_TIMEOUT_ENV,
    expose_value=False,
    callback=_set_inventory_timeout,
    help=f"How long a dynamic inventory script may run (default 60; ${INVENTORY_TIMEOUT_ENV}).",
)


limit_option = click.option(
    "--limit", type=TEXT, metavar="PATTERN", help="Only these hosts, as ansible --limit has it."
)
policy_option = click.option(
    "--policy",
    "policy_path",
    metavar="FILE",
    type=NonEmptyPath(),
    help="Policy YAML overriding the defaults.",
)
db_option = click.option(
    "--db",
    "db_path",
    metavar="PATH",
    type=NonEmptyPath(dir_okay=False),
    help="History database (default: $XDG_STATE_HOME/gpuready/history.db).",
)

# validator.report.json_report.JsonForm's values, spelled here so that parsing the
# command line imports no report code (a test keeps the two in step).
JSON_FORMS = ("auto", "full", "summary")

json_form_option = click.option(
    "--json-form",
    type=click.Choice(JSON_FORMS),
    default="auto",
    show_default=True,
    help="What --json prints: every field (full), or per node its verdict, counts and "
    "non-PASS findings (summary); auto is full for one node and the summary for a fleet. "
    "A fleet's report.json in --report-dir is the summary, each host's full result in hosts/.",
)


def use_color(color: bool | None, stream: Any = None) -> bool:  # noqa: ANN401 - a text stream
    """Whether to colour: ``--color``/``--no-color`` if given, else not where NO_COLOR is set.

    NO_COLOR (https://no-color.org) set and non-empty turns colour off unless --color asks
    for it; otherwise colour goes only to a terminal (``stream``, default stdout).
    """
    import os

    if color is not None:
        return color
    if os.environ.get("NO_COLOR", ""):
        return False
    isatty = getattr(sys.stdout if stream is None else stream, "isatty", None)
    return bool(isatty is not None and isatty())


def command_line(ctx: click.Context) -> tuple[str, ...]:
    """The command line as given to ``gpuready`` (for history), without the program name."""
    root = ctx.find_root().obj
    argv = root.get("argv") if isinstance(root, dict) else None
    return tuple(argv) if isinstance(argv, list) else tuple(sys.argv[1:])


_BURN_SETTING_OPTIONS: tuple[Callable[[F], F], ...] = (
    click.option(
        "--burn-backend",
        type=click.Choice(list(BACKENDS)),
        help="Force a burn backend (default: the first of cublas, torch that can run "
        "the dtype; numpy only measures the CPU).",
    ),
    click.option(
        "--burn-dtype",
        type=click.Choice(list(DTYPES)),
        default=DEFAULT_DTYPE.value,
        show_default=True,
        help="Precision of the burn-in products.",
    ),
    click.option(
        "--burn-matrix-size",
        type=BoundedInt(16, MATRIX_SIZE_MAX),
        help=f"Matrix size, 16-{MATRIX_SIZE_MAX} (default {DEFAULT_MATRIX_SIZE}; it must fit "
        "the GPU's memory).",
    ),
    click.option(
        "--burn-memory-fraction",
        type=FiniteFloat(0.01, MEMORY_FRACTION_MAX),
        default=DEFAULT_MEMORY_FRACTION,
        show_default=True,
        help="Share of free GPU memory the result buffers fill.",
    ),
    click.option(
        "--burn-inject",
        # KIND:GPU:ITERATION, checked as the burn will parse it.
        type=CheckedText("injection", lambda text, _label: Injection.parse(text)),
        hidden=True,
        help="Test hook: KIND:GPU:ITERATION (flip or nan).",
    ),
)


def burn_options(default: str, help_text: str) -> Callable[[F], F]:
    """The burn-in options, declared once (certify, provision --certify).

    ``default`` is the ``--burn`` default and ``help_text`` its help; the rest
    take their defaults from validator.node.burnin.burn_config, the one source.
    """
    duration = click.option(
        "--burn",
        "burn_duration",
        type=BURN_DURATION,
        default=default,
        show_default=True,
        metavar="DURATION",
        help=help_text,
    )

    def decorate(command: F) -> F:
        return apply_options((duration, *_BURN_SETTING_OPTIONS), command)

    return decorate


@dataclass(frozen=True)
class BurnOptions:
    """The burn options as click parsed them."""

    burn_duration: str
    burn_backend: str | None
    burn_dtype: str
    burn_matrix_size: int | None
    burn_memory_fraction: float
    burn_inject: str | None

    @classmethod
    def pop(cls, options: dict[str, Any]) -> BurnOptions:
        """Take the burn options out of a command's keyword arguments."""
        return cls(**{name: options.pop(name) for name in cls.__dataclass_fields__})

    def config(self, duration_s: float) -> BurnConfig | None:
        """The burn these options ask for, ``duration_s`` long; None for none.

        Raises:
            BadInputError: a setting no burn could honour.
        """
        if duration_s <= 0:
            if self.burn_inject:
                raise BadInputError(
                    "--burn-inject needs a burn to spoil: give --burn too (it is 0 here)"
                )
            return None
        return BurnConfig(
            duration_s=duration_s,
            dtype=Dtype(self.burn_dtype),
            backend=self.burn_backend,
            matrix_size=self.burn_matrix_size,
            memory_fraction=self.burn_memory_fraction,
            inject=Injection.parse(self.burn_inject) if self.burn_inject else None,
        )


def interconnect_option(default: bool | None, help_text: str) -> Callable[[F], F]:
    """``--interconnect/--no-interconnect``: measure what joins the GPUs, or not.

    ``default`` None leaves the choice to the policy's ``interconnect`` (certify);
    ``help_text`` says what the command does by default.
    """
    return click.option(
        "--interconnect/--no-interconnect",
        "interconnect",
        default=default,
        help=help_text,
    )


# certify's options that ``provision --certify`` takes too, declared once here.
report_dir_option = click.option(
    "--report-dir",
    metavar="DIR",
    type=NonEmptyPath(file_okay=False),
    help="Write report.json, report.html and junit.xml here.",
)
sign_key_option = click.option(
    "--sign-key",
    type=NonEmptyPath(dir_okay=False),
    help="Sign certificates with HMAC-SHA256 using this key file.",
)
dcgm_level_option = click.option(
    "--dcgm-level",
    type=BoundedInt(0, 4),
    default=None,
    metavar="N",
    help="Run DCGM's diagnostic `dcgmi diag -r N` after the burn-in and judge each test "
    "(0-4; 0 runs none), overriding the policy's dcgm_level.",
)
