"""Settings from config files and ``GPUREADY_*`` variables, beneath the command line.

Precedence, highest first: the command line, a ``GPUREADY_*`` environment variable, the
user's file (``$XDG_CONFIG_HOME/gpuready/config.yaml``), the system's
(``/etc/gpuready/config.yaml``), the built-in default. The files and variables are merged
here into click's ``default_map``, so whatever is typed still wins, as click has it.

Every value is checked here, naming the file or variable it came from, before any
command sees it; the sign key is a path and never key material (a file that holds a
key is refused, so a key never sits in a world-readable config).
"""

from __future__ import annotations

import enum
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from validator.error_tree import BadInputError
from validator.fields import excerpt

SYSTEM_CONFIG = Path("/etc/gpuready/config.yaml")
CONFIG_BYTES = 64 * 1024  # a few lines of settings; more is not a config file
PATH_CHARS = 4096  # PATH_MAX


class Source(str, enum.Enum):
    """Where a setting's value came from, as ``gpuready config`` names it."""

    DEFAULT = "default"
    SYSTEM = "/etc file"
    USER = "user file"
    ENV = "env var"
    COMMAND_LINE = "command line"


@dataclass(frozen=True)
class Setting:
    """One setting: its config key, variable, the click parameters it fills, and its kind.

    ``params`` are the parameter names the commands declare it under (the sign key is
    ``sign_key`` in certify and ``key_path`` in drift); ``choices`` bound a choice;
    ``low``/``high`` a number; ``default`` is what applies when nothing sets it.
    """

    key: str
    params: tuple[str, ...]
    kind: str  # "path", "choice", "int" or "seconds"
    help: str
    default: str = ""
    choices: tuple[str, ...] = ()
    low: float = 0.0
    high: float = 0.0

    @property
    def env(self) -> str:
        """Its environment variable: ``GPUREADY_`` and the key in capitals."""
        return "GPUREADY_" + self.key.upper()

    @property
    def option(self) -> str:
        """The command-line spelling: ``--report-dir``."""
        return "--" + self.key.replace("_", "-")


def builtin_defaults() -> dict[str, str]:
    """The defaults that depend on the environment (XDG), worked out only when shown.

    Not on every run's road: the Slurm spool's module is not for a single node's certify.
    """
    from validator.slurm.submission_spool import default_spool
    from validator.store.defaults import default_db_path

    return {"db": str(default_db_path()), "spool": str(default_spool())}


SETTINGS: tuple[Setting, ...] = (
    Setting("db", ("db_path",), "path", "history database"),
    Setting("spool", ("spool",), "path", "Slurm spool (shared storage)"),
    Setting("sign_key", ("sign_key", "key_path"), "path", "signing key file (a path)"),
    Setting("policy", ("policy_path",), "path", "policy YAML"),
    Setting("report_dir", ("report_dir",), "path", "report directory"),
    Setting(
        "certificates", ("certificates_dir",), "path",
        "drift: read-only folder of <host>.json certificates",
    ),
    Setting(
        "transport", ("transport",), "choice", "how hosts are reached", "ssh",
        choices=("ssh", "local", "ansible"),
    ),
    Setting("parallel", ("parallel",), "int", "hosts at once (forks)", "64", low=1, high=100000),
    Setting(
        "connect_timeout", ("connect_timeout",), "seconds", "SSH connect timeout, seconds",
        "10", low=0.1, high=3600.0,
    ),
    Setting("ssh_config", ("ssh_config",), "path", "SSH client config (user, port, key)"),
    Setting("known_hosts", ("known_hosts",), "path", "known_hosts file"),
)  # fmt: skip
BY_KEY = {setting.key: setting for setting in SETTINGS}
# The variable the spool had before it was a setting, still read where the new one is unset.
OLDER_ENV = {"spool": "GPUREADY_SLURM_SPOOL"}


@dataclass(frozen=True)
class Value:
    """A setting's effective value and where it came from (``where``: the file or variable)."""

    value: str | int | float | None
    source: Source
    where: str = ""


def user_config() -> Path:
    """``$XDG_CONFIG_HOME/gpuready/config.yaml``, else ``~/.config/gpuready/config.yaml``."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "gpuready" / "config.yaml"


# Key material rather than a path: a PEM block, an OpenSSH public key line, or a long
# run of base64 or hex with no path in it.
_KEY_TEXT = re.compile(r"-----BEGIN|^\s*(ssh-|ecdsa-|sk-)|[\r\n]")
_KEY_LIKE = re.compile(r"[A-Za-z0-9+=_-]{32,}")


def _refuse_key_material(text: str, where: str) -> None:
    if _KEY_TEXT.search(text) or (_KEY_LIKE.fullmatch(text) and not os.path.exists(text)):
        raise BadInputError(
            f"{where}: sign_key holds key material, not a path; put the key in a file only "
            "its owner can read (chmod 600) and give that file's path"
        )


def _number(text: object, where: str, setting: Setting) -> int | float:
    """An int or a finite number within the setting's bounds, from YAML or a variable."""
    wanted = "a whole number" if setting.kind == "int" else "a number of seconds or a duration"
    bounds = f"from {setting.low:g} up to {setting.high:g}"
    value: float = math.nan
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    elif isinstance(text, str) and text.strip().isascii() and len(text) <= 32:
        try:
            value = float(text.strip())
        except ValueError:
            value = _duration(text) if setting.kind == "seconds" else math.nan
    whole = math.isfinite(value) and (setting.kind != "int" or value == math.floor(value))
    if not (whole and setting.low <= value <= setting.high):
        raise BadInputError(
            f"{where}: {setting.key} must be {wanted} {bounds}, got {excerpt(str(text))}"
        )
    return int(value) if setting.kind == "int" else value


def _duration(text: str) -> float:
    """Seconds from a duration (2m, 1m30s), NaN where it is none."""
    from validator.node.burnin.burn_config import parse_duration

    try:
        return parse_duration(text, "")
    except BadInputError:
        return math.nan


def check_value(setting: Setting, raw: object, where: str) -> str | int | float:
    """``raw`` for ``setting`` checked; ``where`` (a file or a variable) names it in errors.

    Raises:
        BadInputError: a value of the wrong kind, out of bounds, blank, or key material.
    """
    if setting.kind in ("int", "seconds"):
        return _number(raw, where, setting)
    if not isinstance(raw, str):
        kind = "path" if setting.kind == "path" else "name"
        # A key's digits (YAML reads them as a number) are no path, and not to be echoed
        got = "" if setting.key == "sign_key" else f", got {excerpt(str(raw))}"
        raise BadInputError(f"{where}: {setting.key} must be text (a {kind}){got}")
    if setting.key == "sign_key":
        _refuse_key_material(raw, where)
    if not raw.strip() or "\0" in raw or len(raw) > PATH_CHARS:
        raise BadInputError(
            f"{where}: {setting.key} is empty or no usable path: give one, or leave it out"
        )
    if setting.kind == "choice" and raw not in setting.choices:
        raise BadInputError(
            f"{where}: {setting.key} must be one of {', '.join(setting.choices)}, "
            f"got {excerpt(raw)}"
        )
    return raw


def _refuse_unsafe(path: Path, info: os.stat_result) -> None:
    """As root, a file others can write (or that someone else owns) could change our run."""
    if os.geteuid() != 0:
        return
    if info.st_mode & stat.S_IWOTH:
        raise BadInputError(
            f"{path} is world-writable, so anyone could change what root runs: chmod o-w {path}"
        )
    folder = path.parent
    held = os.stat(folder)
    if held.st_mode & stat.S_IWOTH and not held.st_mode & stat.S_ISVTX:
        raise BadInputError(
            f"{folder} is world-writable, so anyone could put another {path.name} there: "
            f"chmod o-w {folder}"
        )
    if info.st_uid != 0:
        raise BadInputError(
            f"{path} belongs to uid {info.st_uid}, not root, so it could change what root "
            f"runs: chown root {path}"
        )


def read_config(path: Path) -> dict[str, str | int | float]:
    """The settings in ``path`` ({} when there is no such file), each checked.

    Raises:
        BadInputError: a link, a file root should not trust, more than
            :data:`CONFIG_BYTES`, not YAML, not a mapping, or an unknown key or bad value.
    """
    from validator.judge.yamlfile import load

    if not os.path.lexists(path):
        return {}
    if path.is_symlink():
        raise BadInputError(
            f"{path} is a symbolic link, and gpuready follows no link it did not make: "
            f'put the file itself there (cp --remove-destination "$(readlink -f {path})" {path})'
        )
    try:
        data = load(_read_checked(path).decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInputError(f"{path} is not UTF-8 text: write it as YAML") from None
    except OSError as exc:
        raise BadInputError(
            f"{path} cannot be read ({exc.strerror}): fix its permissions, or remove it"
        ) from None
    except BadInputError:
        raise
    except ValueError as exc:  # LoadError: the YAML's own words, with its line
        line = getattr(exc, "line", None)
        at = f" line {line}" if line else ""
        raise BadInputError(f"{path}{at}: {excerpt(str(exc))}: fix the YAML") from None
    return _settings_of(data, path)


def _read_checked(path: Path) -> bytes:
    """The file's bytes, judged by what was opened (no link, a regular file, small, trusted).

    Raises:
        OSError: it cannot be opened (a link put there since is ELOOP) or read.
        BadInputError: no regular file, too large, or one root should not trust.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInputError(f"{path} is not a regular file: put the settings in a file")
        _refuse_unsafe(path, info)
        data = os.read(fd, CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > CONFIG_BYTES:
        raise BadInputError(
            f"{path} is larger than {CONFIG_BYTES // 1024} KiB: a config file holds a few settings"
        )
    return data


def _settings_of(data: object, path: Path) -> dict[str, str | int | float]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInputError(
            f"{path} must be a mapping of settings (db: PATH, ...), not a list or a value"
        )
    settings: dict[str, str | int | float] = {}
    for key, raw in data.items():
        if key not in BY_KEY:
            known = ", ".join(BY_KEY)
            raise BadInputError(
                f"{path}: unknown setting {excerpt(str(key))}: the settings are {known}"
            )
        if raw is not None:  # "policy:" with nothing after it leaves the default
            settings[key] = check_value(BY_KEY[key], raw, str(path))
    return settings


@dataclass(frozen=True)
class Effective:
    """Every setting's value and source, and the config files looked at."""

    values: Mapping[str, Value]
    files: tuple[tuple[Path, bool], ...]  # each file, and whether it was there


def _from_environment(environ: Mapping[str, str]) -> dict[str, tuple[str | int | float, str]]:
    """Each setting a variable sets, with the variable's name; an empty one sets nothing."""
    found: dict[str, tuple[str | int | float, str]] = {}
    for setting in SETTINGS:
        for name in (setting.env, OLDER_ENV.get(setting.key, "")):
            text = environ.get(name, "") if name else ""
            if text:
                found[setting.key] = (check_value(setting, text, f"${name}"), name)
                break
    return found


def effective(environ: Mapping[str, str] | None = None) -> Effective:
    """The settings the files and variables make, each with its source.

    Raises:
        BadInputError: a config file or variable that is refused (one line: which, and the fix).
    """
    env = os.environ if environ is None else environ
    system, user = SYSTEM_CONFIG, user_config()
    layers = [(Source.SYSTEM, system, read_config(system)), (Source.USER, user, read_config(user))]
    variables = _from_environment(env)
    values: dict[str, Value] = {}
    for setting in SETTINGS:
        builtin = check_value(setting, setting.default, "default") if setting.default else None
        value = Value(builtin, Source.DEFAULT)
        for source, path, found in layers:
            if setting.key in found:
                value = Value(found[setting.key], source, str(path))
        if setting.key in variables:
            raw, name = variables[setting.key]
            value = Value(raw, Source.ENV, name)
        values[setting.key] = value
    files = tuple((path, os.path.lexists(path)) for _, path, _ in layers)
    return Effective(values, files)


# Commands no setting reaches: verify-cert's --db and --sign-key turn checks on, asked for
# each time; config shows the settings and takes its own options as the command line.
UNSET_COMMANDS = frozenset({"verify-cert", "config"})


def default_map(settings: Effective, path: Sequence[str]) -> dict[str, object]:
    """click's ``default_map`` for the command at ``path`` (``("slurm", "collect")``).

    The set values, by every parameter name each fills, at every level of the path: a
    group's subcommands (``history``'s, ``slurm``'s) read them as plain commands do.
    """
    params: dict[str, object] = {}
    for setting in SETTINGS:
        value = settings.values[setting.key]
        if value.source is not Source.DEFAULT:
            params.update(dict.fromkeys(setting.params, value.value))
    if not path or path[0] in UNSET_COMMANDS:
        return {}
    nested: dict[str, object] = dict(params)
    for name in reversed(path):
        nested = {**params, name: nested}
    return nested
