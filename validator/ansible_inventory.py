"""Hosts from Ansible inventories, read through ansible-core's own parser.

INI, YAML, directories and dynamic (executable) inventory scripts, several at once,
``--limit`` patterns exactly as Ansible reads them (``gpu[0:3]``, ``rack1:&h100``,
``!gpu07``, ``@file``), and host / group variables (``group_vars/``, ``host_vars/``)
as Ansible's VariableManager resolves them. Each host becomes a
:class:`~validator.model.HostSpec`; its ``gpuready_*`` variables may
override the policy for that host (:func:`policy_for`).

Decisions:

* Importing ansible costs a few tenths of a second, so only the CLI imports this
  module, and only when ``-i`` is given.
* Ansible reports an unparsable source as a warning and carries on with no hosts.
  Here every source must parse, or :class:`~validator.error_tree.BadInputError` says
  which one; a limit that matches nothing is an error too.
* Ansible's own warnings and errors are captured while the inventory loads (its
  ``Display`` singleton's output is redirected), never printed on the operator's
  terminal: the reasons worth knowing end up in our one-line errors, and the rest
  (e.g. a ``--limit`` part that matched no host while others did) in
  :attr:`Inventory.notes` for the CLI to show as it sees fit.
* Values are rendered with Ansible's Templar, so ``gpuready_driver_version:
  "{{ driver_pin }}"`` in ``group_vars`` works. Only the variables used here are
  rendered: a template elsewhere that needs play-time facts is none of our business.
  Ansible decides what is trusted as a template (values from a dynamic inventory
  script are not, since ansible-core 2.19).
* A key given twice in one YAML mapping (an inventory, ``group_vars``, ``host_vars``) is
  an error: Ansible only warns and keeps the last value, so a pin written twice, one of
  them stale, would pass unnoticed. Ansible's ``DUPLICATE_YAML_DICT_KEY`` is set to
  ``error`` for the load only (:func:`_duplicate_keys_fail`).
* Every ``gpuready_*`` variable must be a policy field or a known agent variable
  (:data:`AGENT_VARS`): a misspelt override would otherwise silently leave a check at
  its default.
* A dynamic inventory script gets :data:`DEFAULT_SCRIPT_TIMEOUT_S` (``--inventory-timeout``)
  per run, and is then killed with every process it started: a script that hangs must not
  hang the command (:func:`_bounded_scripts`). Ansible's script plugin runs it through
  ``subprocess.Popen(...).communicate()`` with no timeout; a deadline around the whole
  load would leave the script running, so the plugin's own processes are bounded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import ansible.constants as ansible_constants
import ansible.plugins.inventory.script as ansible_script_plugin
from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.utils.display import Display
from ansible.vars.manager import VariableManager

from validator import fields, limits
from validator.error_tree import BadInputError, PolicyError
from validator.fields import Document, Field
from validator.judge import yamlfile
from validator.judge.policy import Policy, Thresholds, policy_from_mapping
from validator.model import TRANSPORTS, HostSpec

PREFIX = "gpuready_"
# gpuready_* variables that steer the agent and the transport rather than the policy.
AGENT_VARS = frozenset({"gpuready_simulate", "gpuready_transport"})
# gpuready_* variables that steer provisioning only: their values are checked here, so that
# a typo fails certify too, and nothing else reads them. Where the driver comes from:
# NVIDIA's CUDA repository or the distribution's own archive (playbooks/roles/nvidia_driver).
DRIVER_SOURCES = ("nvidia", "distribution")
PROVISION_VARS = frozenset({"gpuready_driver_source"})
# Policy fields settable per host, as gpuready_<field>; thresholds is a mapping.
POLICY_VARS: tuple[str, ...] = tuple(PREFIX + f.name for f in dataclasses.fields(Policy))
# ansible_python_interpreter values that ask Ansible to discover the interpreter.
_AUTO_INTERPRETERS = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_DEFAULT_PYTHON = "python3"


@dataclasses.dataclass(frozen=True)
class Inventory:
    """The hosts an inventory gave, and what Ansible had to say while reading it."""

    hosts: tuple[HostSpec, ...]
    notes: tuple[str, ...] = ()  # Ansible's warnings, one line each, for the CLI to show


# ------------------------------------------------------------ Ansible's output


@contextlib.contextmanager
def _captured_display() -> Iterator[list[str]]:
    """Collect what Ansible would print while the inventory loads, instead of printing it.

    Display is a process-wide singleton; its ``display`` method is where warnings,
    errors and deprecations end up in every ansible-core since 2.15, so that one
    instance attribute is swapped for the duration. Display drops a message it has
    shown before; its memory of warnings is swapped too, so that loading the same
    broken file twice explains itself twice.
    """
    display = Display()
    messages: list[str] = []

    def capture(msg: str, *_args: object, **_kwargs: object) -> None:
        messages.append(str(msg))

    saved_warns = getattr(display, "_warns", None)
    if isinstance(saved_warns, (set, dict)):
        display._warns = type(saved_warns)()
    # ansible-core 2.15 (Python 3.9's) wraps a warning at the terminal's width before
    # showing it, a path included ("popen-" on one line, "gw1" on the next): not here.
    saved_columns = getattr(display, "columns", None)
    if isinstance(saved_columns, int):
        display.columns = 1 << 20
    display.display = capture
    try:
        yield messages
    finally:
        del display.display  # the class's method shows through again
        if isinstance(saved_warns, (set, dict)):
            display._warns = saved_warns
        if isinstance(saved_columns, int):
            display.columns = saved_columns


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------ a script that hangs

DEFAULT_SCRIPT_TIMEOUT_S = 60.0
_script_timeout_s = DEFAULT_SCRIPT_TIMEOUT_S


def set_script_timeout(seconds: float) -> float:
    """How long each run of a dynamic inventory script may take from now on; the old value.

    The CLI's ``--inventory-timeout`` sets it for one command (and puts it back after).
    """
    global _script_timeout_s  # one process-wide setting: see the CLI's --inventory-timeout
    previous, _script_timeout_s = _script_timeout_s, seconds
    return previous


class ScriptTimedOut(Exception):
    """An inventory script ran past its time and was killed (raised inside Ansible's plugin)."""

    def __init__(self, script: str, seconds: float) -> None:
        super().__init__(f"inventory script {script} did not finish within {seconds:g} s")
        self.script = script
        self.seconds = seconds


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the script and every process it started (its own session, see _bounded_popen)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


def _bounded_popen(
    seconds: float, timed_out: list[ScriptTimedOut]
) -> type[subprocess.Popen[bytes]]:
    """A Popen whose ``communicate`` gives up after ``seconds``, killing the script's group.

    The script starts in a session of its own, so that a ``sleep`` it started (which
    holds the output pipe open) dies with it and reading the pipes ends.
    """

    class BoundedPopen(subprocess.Popen):  # type: ignore[type-arg] # as the plugin calls it
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - Popen's
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

        def communicate(
            self,
            input: bytes | None = None,
            timeout: float | None = None,
        ) -> tuple[Any, Any]:
            try:
                return super().communicate(input, timeout if timeout is not None else seconds)
            except subprocess.TimeoutExpired:
                _kill_group(self)
                super().communicate()  # reap it; the killed group closed the pipes
                script = self.args[0] if isinstance(self.args, (list, tuple)) else self.args
                error = ScriptTimedOut(str(script), seconds)
                timed_out.append(error)
                raise error from None

    return BoundedPopen


@contextlib.contextmanager
def _bounded_scripts(seconds: float) -> Iterator[list[ScriptTimedOut]]:
    """Bound each run of an inventory script by Ansible's script plugin, for this block.

    Only the plugin module's own ``subprocess`` is replaced (by this module with a
    bounded Popen), never the process-wide one. The scripts that timed out are
    collected: Ansible turns the plugin's exception into a parse warning.
    """
    timed_out: list[ScriptTimedOut] = []
    bounded = types.ModuleType(subprocess.__name__)
    bounded.__dict__.update(vars(subprocess))  # everything the plugin may use, as it was
    bounded.Popen = _bounded_popen(seconds, timed_out)  # type: ignore[attr-defined]
    saved = ansible_script_plugin.subprocess
    ansible_script_plugin.subprocess = bounded
    try:
        yield timed_out
    finally:
        ansible_script_plugin.subprocess = saved


def _timeout_error(timed_out: Sequence[ScriptTimedOut]) -> BadInputError | None:
    if not timed_out:
        return None
    return BadInputError(f"{timed_out[0]}: fix the script or raise --inventory-timeout")


# ------------------------------------------------------------ a key given twice

# ansible-core's setting (config/base.yml: warn by default, error or ignore), and the
# environment variable it is read from.
_DUPLICATE_SETTING = "DUPLICATE_YAML_DICT_KEY"
_DUPLICATE_ENV = "ANSIBLE_DUPLICATE_YAML_DICT_KEY"
# The messages of ansible-core 2.19 ("Found duplicate mapping key 'x'.", the key's repr)
# and of 2.15-2.18 ("... found a duplicate dict key (x). Using last defined value only.").
_DUPLICATE_KEY = re.compile(
    r"Found duplicate mapping key (?P<quoted>.+?)\.(?:\s|$)"
    r"|found a duplicate dict key \((?P<bare>.*?)\)\. Using last"
)
# Where: 2.19's "Origin: /path/file.yml:5:7"; 2.15-2.18's "a mapping from /path, line 4".
_ORIGIN = re.compile(r"^Origin: (?P<path>.+?):(?P<line>\d+)(?::\d+)?$", re.MULTILINE)
_MAPPING_FROM = re.compile(r"constructing a mapping from (?P<path>.+?), line (?P<line>\d+),")


@contextlib.contextmanager
def _duplicate_keys_fail() -> Iterator[None]:
    """Make a key given twice in any YAML Ansible reads an error, for this block only.

    ansible-core 2.19 reads the setting through its config manager each time it builds
    a YAML constructor, and that looks at the environment each time; 2.15-2.18 read the
    constant ``ansible.constants.DUPLICATE_YAML_DICT_KEY``. Both are set, and both put
    back as they were (the operator's own setting included) when the block ends.
    """
    saved_env = os.environ.get(_DUPLICATE_ENV)
    had_constant = hasattr(ansible_constants, _DUPLICATE_SETTING)
    saved_constant = getattr(ansible_constants, _DUPLICATE_SETTING, None)
    os.environ[_DUPLICATE_ENV] = "error"
    ansible_constants.DUPLICATE_YAML_DICT_KEY = "error"
    try:
        yield
    finally:
        if saved_env is None:
            os.environ.pop(_DUPLICATE_ENV, None)
        else:
            os.environ[_DUPLICATE_ENV] = saved_env
        if had_constant:
            ansible_constants.DUPLICATE_YAML_DICT_KEY = saved_constant
        else:
            delattr(ansible_constants, _DUPLICATE_SETTING)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _where(texts: Iterable[str], errors: Sequence[BaseException] = ()) -> str | None:
    """The file and line Ansible names, as ``path, line N``; None when it names none."""
    for error in errors:
        origin = getattr(error, "obj", None)  # 2.19: an Origin(path, line_num, col_num)
        path = getattr(origin, "path", None)
        if isinstance(path, str) and path:
            line = getattr(origin, "line_num", None)
            return f"{path}, line {line}" if isinstance(line, int) else path
    for text in texts:
        found = _ORIGIN.search(text) or _MAPPING_FROM.search(text)
        if found:
            return f"{found['path']}, line {found['line']}"
    return None


def _duplicate(texts: Sequence[str], errors: Sequence[BaseException], fallback: str) -> str | None:
    """The one-line error for a key given twice, if that is what Ansible's messages say."""
    for text in texts:
        found = _DUPLICATE_KEY.search(text)
        if found:
            key = found["quoted"] if found["quoted"] is not None else repr(found["bare"])
            where = _where([text], errors) or fallback
            return f"{where}: the key {key} is given twice in one mapping: remove one of the two"
    return None


def _vars_error(exc: AnsibleError, host: str) -> BadInputError:
    """A host's group_vars/host_vars that Ansible could not read, as one line."""
    errors = _chain(exc)
    texts = [str(error) for error in errors]
    duplicate = _duplicate(texts, errors, f"host {host}: group_vars/host_vars")
    if duplicate is not None:
        return BadInputError(duplicate)
    where = _where(texts, errors) or "group_vars/host_vars"
    return BadInputError(
        f"{where}: ansible could not read the variables of host {host} "
        f"({_one_line(texts[0])}): fix the file"
    )


def _strip_label(message: str) -> str:
    text = message.strip()
    for label in ("[WARNING]:", "[ERROR]:", "[DEPRECATION WARNING]:"):
        if text.startswith(label):
            return text[len(label) :].strip()
    return text


def _parse_reason(messages: Sequence[str], path: str) -> str:
    """Ansible's reason for not parsing ``path``, from its captured warnings, if it gave one."""
    # The reason is the message's first paragraph: newer ansible-core writes it on one
    # line, then the cause; 2.15 writes one paragraph (its wrapping is off while captured).
    for message in messages:
        if "Failed to parse" in message and path in message:
            first = re.split(r"\n\s*\n", _strip_label(message), maxsplit=1)[0]
            return _one_line(first).rstrip(":")
    return ""


# ------------------------------------------------------------ value checks


def _plain(value: object) -> object:
    """Ansible's tagged str/int/dict/list subclasses as plain Python values."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    # bool first: it is an int too. One isinstance per type (not a loop over the types):
    # mypy narrows only these.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value) if isinstance(value, str) else value


def _bad_var(origin: str, var: str, wanted: str, value: object) -> BadInputError:
    return BadInputError(
        f"{origin}: {var} must be {wanted}, got {value!r} ({type(value).__name__}); "
        "fix the variable in the inventory or its group_vars/host_vars"
    )


def _port(value: object, origin: str, var: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())  # a templated port renders as text
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _bad_var(origin, var, "a port number 1-65535", value)
    return value


def _text(value: object, origin: str, var: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _bad_var(origin, var, "a non-empty string (quote it)", value)
    return value.strip()


def _stripped(value: object) -> str | None:
    """A checked gpuready_* text variable (see :data:`GPUREADY_VARS`), stripped."""
    return value.strip() if isinstance(value, str) else None


def _python(value: object, origin: str) -> str:
    text = _text(value, origin, "ansible_python_interpreter")
    if text is None or text in _AUTO_INTERPRETERS:
        # Discovery is Ansible's module machinery; the agent needs a command to run.
        return _DEFAULT_PYTHON
    return text


# The gpuready_* variables, declared once: the policy fields (their values are checked by
# the policy's own declarations, validator.judge.policy) and the agent's.
_FIX_VARIABLE = "fix the variable in the inventory or its group_vars/host_vars"
GPUREADY_VARS = Document(
    (
        *(Field(name) for name in POLICY_VARS),
        Field("gpuready_simulate", str, non_empty=True, nullable=True),
        Field("gpuready_transport", str, choices=TRANSPORTS, nullable=True),
        Field("gpuready_driver_source", str, choices=DRIVER_SOURCES, nullable=True),
    ),
    noun="variable",
)


def _check_names(names: Sequence[str], origin: str) -> None:
    """Every gpuready_* name is a policy field or an agent variable (did-you-mean when not)."""
    source = fields.Source(origin, fix=_FIX_VARIABLE, error=BadInputError)
    GPUREADY_VARS.check_keys(dict.fromkeys(names), source)


def _check_agent_vars(variables: Mapping[str, object], origin: str) -> None:
    """The agent's and provisioning's gpuready_* values, each against its declaration."""
    source = fields.Source(origin, fix=_FIX_VARIABLE, error=BadInputError)
    for name in sorted(AGENT_VARS | PROVISION_VARS):
        declared = GPUREADY_VARS.field(name)
        if declared is not None and name in variables:
            declared.check(variables[name], source, (name,))


def _overrides(variables: Mapping[str, object], origin: str) -> dict[str, Any]:
    """The policy values a host's gpuready_* variables set, each parsed and validated.

    Parsed one variable at a time so that an error names the variable.

    Raises:
        BadInputError: an unknown gpuready_* variable, or a value of the wrong kind.
    """
    names = [name for name in variables if name.startswith(PREFIX)]
    _check_names(names, origin)
    parsed: dict[str, Any] = {}
    for name in names:
        if name in AGENT_VARS or name in PROVISION_VARS:
            continue
        key = name[len(PREFIX) :]
        policy = policy_from_mapping({key: variables[name]}, f"{origin}: {name}")
        if key in ("thresholds", "host"):  # a section: replaces only the keys it gives
            raw = variables[name]
            given = list(raw) if isinstance(raw, Mapping) else []
            parsed[key] = {item: getattr(getattr(policy, key), item) for item in given}
        else:
            parsed[key] = getattr(policy, key)
    return parsed


def _merge(base: Policy, overrides: Mapping[str, Any], origin: str) -> Policy:
    thresholds: Thresholds = dataclasses.replace(base.thresholds, **overrides.get("thresholds", {}))
    host = dataclasses.replace(base.host, **overrides.get("host", {}))
    fields = {key: value for key, value in overrides.items() if key not in ("thresholds", "host")}
    policy = dataclasses.replace(base, **fields, thresholds=thresholds, host=host)
    if (
        policy.driver_version
        and policy.driver_branch
        and policy.driver_version.split(".")[0] != policy.driver_branch
    ):
        set_here = [
            f"{PREFIX}{key}" for key in ("driver_version", "driver_branch") if key in fields
        ]
        raise PolicyError(
            f"{origin}: driver_version {policy.driver_version!r} is not on driver_branch "
            f"{policy.driver_branch!r} ({', '.join(set_here)} set for this host); "
            f"set both {PREFIX}driver_version and {PREFIX}driver_branch, or neither"
        )
    return policy


def policy_for(host: HostSpec, base: Policy) -> Policy:
    """The policy for one host: ``base`` with the host's ``gpuready_<field>`` variables over it.

    ``gpuready_thresholds`` and ``gpuready_host`` are mappings whose keys replace those of
    that section only; the base's others stay. A variable set to null unpins the field (its
    default meaning, e.g. "derive the GPU count from the PCI bus").

    Args:
        host: the host, with its ``gpuready_*`` variables in ``vars``.
        base: the policy from the policy file (or the defaults).

    Returns:
        The host's policy; ``base`` itself when the host overrides nothing.

    Raises:
        BadInputError: an unknown ``gpuready_*`` variable (with the closest known name), a
            value of the wrong kind, or a driver pin inconsistent with the branch; the
            one-line message names the host and the variable.
    """
    origin = f"host {host.name}"
    overrides = _overrides(host.vars, origin)
    if not overrides:
        return base
    return _merge(base, overrides, origin)


# ------------------------------------------------------------ loading


def _render(templar: Templar, value: object, origin: str, var: str) -> object:
    try:
        return _plain(templar.template(value))
    except AnsibleError as exc:
        raise BadInputError(
            f"{origin}: {var} could not be rendered: {_one_line(str(exc))}; "
            "define the variables it uses in the inventory or its group_vars"
        ) from None


def _host_spec(host: object, manager: VariableManager, loader: DataLoader) -> HostSpec:
    name = str(getattr(host, "name", host))
    try:
        variables = manager.get_vars(host=host)
    except AnsibleError as exc:
        raise _vars_error(exc, name) from None
    source = str(variables.get("inventory_file") or "inventory")
    origin = f"{source}: host {name}"
    templar = Templar(loader=loader, variables=variables)
    names = sorted(str(key) for key in variables if str(key).startswith(PREFIX))

    def get(*keys: str) -> object:
        for key in keys:
            if variables.get(key) is not None:
                return _render(templar, variables[key], origin, key)
        return None

    gpuready = {key: _render(templar, variables[key], origin, key) for key in names}
    _overrides(gpuready, origin)  # fail now, before any host is contacted
    _check_agent_vars(gpuready, origin)
    key_file = _text(
        get("ansible_ssh_private_key_file", "ansible_private_key_file"),
        origin,
        "ansible_ssh_private_key_file",
    )
    address = _text(get("ansible_host", "ansible_ssh_host"), origin, "ansible_host")
    return HostSpec(
        name=name,
        address=address or name,
        port=_port(get("ansible_port", "ansible_ssh_port"), origin, "ansible_port"),
        user=_text(get("ansible_user", "ansible_ssh_user"), origin, "ansible_user"),
        key_file=os.path.expanduser(key_file) if key_file else None,
        python=_python(get("ansible_python_interpreter"), origin),
        simulate=_stripped(gpuready.get("gpuready_simulate")),
        vars=gpuready,
    )


def _is_host_list(source: str) -> bool:
    """Ansible's ``-i host1,host2,`` form: a comma means hosts, not a path."""
    return "," in source


def _check_sources(sources: Sequence[str]) -> None:
    if not sources:
        raise BadInputError("no inventory given: pass -i INVENTORY (a file, directory or script)")
    for source in sources:
        if not _is_host_list(source) and not os.path.exists(source):
            raise BadInputError(
                f"{source}: inventory not found: check the path "
                "(or give hosts as a comma-separated list ending in ',')"
            )
        if not _is_host_list(source):
            for path in _inventory_files(source):
                _check_bounded(path)


def _inventory_files(source: str) -> list[str]:
    """The files ansible reads for ``source`` (the first 10,000).

    A file and the ``group_vars``/``host_vars`` folders beside it; a folder's files,
    its sub-folders' included.
    """
    if os.path.isdir(source):
        found, folders = [], [source]
    else:
        parent = os.path.dirname(source) or "."
        found, folders = [source], [os.path.join(parent, n) for n in ("group_vars", "host_vars")]
    for folder in folders:
        for directory, _, names in os.walk(folder):
            found.extend(os.path.join(directory, name) for name in sorted(names))
            if len(found) >= _MAX_INVENTORY_FILES:
                return found[:_MAX_INVENTORY_FILES]
    return found


_MAX_INVENTORY_FILES = 10_000


def _check_bounded(path: str) -> None:
    """One inventory file, bounded before ansible reads it.

    A regular file of at most :data:`limits.INVENTORY_BYTES`, whose YAML aliases do not
    expand it past :data:`limits.YAML_EXPANDED_VALUES` values.

    Raises:
        BadInputError: naming the file and what is wrong with it.
    """
    try:
        data = limits.read_bounded(path, limits.INVENTORY_BYTES)
    except limits.OverLimitError as exc:
        raise BadInputError(f"inventory {path} {exc}; give an inventory file") from None
    except OSError:
        return  # ansible says why it cannot read it
    if os.access(path, os.X_OK) or b"*" not in data:
        return  # a script's output, or YAML with no alias to expand
    try:
        yamlfile.compose_checked(data.decode("utf-8", errors="replace"))
    except fields.LoadError as exc:
        raise BadInputError(f"inventory {path}, line {exc.line}: {exc.problem}") from None


def _parsed_sources(inventory: InventoryManager) -> list[str]:
    """The sources Ansible parsed, by absolute path (the files, for a directory source)."""
    data = getattr(inventory, "_inventory", None)
    return [str(path) for path in getattr(data, "processed_sources", None) or [] if path]


def _was_parsed(source: str, path: str, parsed: Sequence[str]) -> bool:
    if source in parsed or path in parsed:
        return True
    if os.path.isdir(path):
        # A directory counts when any inventory in it parsed; the rest are notes.
        return any(item.startswith(path.rstrip(os.sep) + os.sep) for item in parsed)
    return False


def _graph_hint(sources: Sequence[str]) -> str:
    return " ".join(f"-i {source}" for source in sources)


def load_inventory(sources: Sequence[str], limit: str | None = None) -> Inventory:
    """Read inventories with ansible-core and turn each selected host into a HostSpec.

    Args:
        sources: inventory files, directories, executable scripts, or ``host1,host2,``.
        limit: an Ansible ``--limit`` pattern; None selects every host.

    Returns:
        The hosts in inventory order, and Ansible's warnings as one-line notes.

    Raises:
        BadInputError: a missing or unparsable source, an inventory script that ran past
            its time (:func:`set_script_timeout`), a key given twice in one YAML
            mapping, an inventory with no hosts, a limit that matches none, or a bad host
            variable; one line naming the file, host or pattern and what to do.
    """
    _check_sources(sources)
    hint = _graph_hint(sources)
    with contextlib.ExitStack() as stack:
        messages = stack.enter_context(_captured_display())
        stack.enter_context(_duplicate_keys_fail())
        timed_out = stack.enter_context(_bounded_scripts(_script_timeout_s))
        loader = DataLoader()
        try:
            inventory = InventoryManager(loader=loader, sources=list(sources))
        except AnsibleError as exc:
            timeout = _timeout_error(timed_out)
            if timeout is not None:
                raise timeout from None
            # The operator's ansible.cfg may make an unparsed source fatal (unparsed_is_failed).
            errors = _chain(exc)
            texts = [*messages, *(str(error) for error in errors)]
            duplicate = _duplicate(texts, errors, ", ".join(sources))
            if duplicate is not None:
                raise BadInputError(duplicate) from None
            raise BadInputError(
                f"{', '.join(sources)}: ansible could not read the inventory: "
                f"{_one_line(str(exc))}; fix it (ansible-inventory {hint} --graph)"
            ) from None
        # A script that hung fails the load, even inside a directory whose other files parsed.
        timeout = _timeout_error(timed_out)
        if timeout is not None:
            raise timeout
        # A file that failed on a key given twice fails the load, even inside a directory
        # whose other files parsed: its hosts must not just go missing.
        duplicate = _duplicate(messages, (), ", ".join(sources))
        if duplicate is not None:
            raise BadInputError(duplicate)
        parsed = _parsed_sources(inventory)
        for source in sources:
            path = source if _is_host_list(source) else os.path.abspath(source)
            if not _was_parsed(source, path, parsed):
                reason = _parse_reason(messages, path)
                because = f" ({reason})" if reason else ""
                raise BadInputError(
                    f"{source}: ansible could not parse this inventory{because}: fix it "
                    f"(ansible-inventory -i {source} --list shows ansible's full message)"
                )
        if not inventory.get_hosts():
            raise BadInputError(
                f"{', '.join(sources)}: the inventory has no hosts: add some "
                f"(ansible-inventory {hint} --graph lists what ansible sees)"
            )
        if limit is not None:
            try:
                inventory.subset(limit)
                selected = inventory.get_hosts()
            except AnsibleError as exc:
                raise BadInputError(
                    f"--limit {limit!r}: {_one_line(str(exc))}: check the pattern"
                ) from None
            if not selected:
                raise BadInputError(
                    f"{', '.join(sources)}: no hosts matched --limit {limit!r}: check the "
                    f"pattern (ansible-inventory {hint} --graph lists the hosts)"
                )
        else:
            selected = inventory.get_hosts()
        manager = VariableManager(loader=loader, inventory=inventory)
        hosts = tuple(_host_spec(host, manager, loader) for host in selected)
    notes = tuple(_one_line(_strip_label(message)) for message in messages if message.strip())
    return Inventory(hosts=hosts, notes=notes)


def load_hosts(sources: Sequence[str], limit: str | None = None) -> list[HostSpec]:
    """The hosts of :func:`load_inventory`, as a list (same arguments and errors)."""
    return list(load_inventory(sources, limit).hosts)
