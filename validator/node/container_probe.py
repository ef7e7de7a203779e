"""The container runtime's facts, read through the System seam alone.

Live, captured and simulated nodes share it (validator.node.collect sets
``NodeFacts.container`` from it for every source). What is read:

- ``nvidia-ctk --version`` and ``nvidia-ctk cdi list``: the toolkit and the GPUs its
  CDI spec names (not installed: NOT_SUPPORTED; a capture without the file:
  NOT_MEASURED, never "absent");
- each runtime: docker (``/etc/docker/daemon.json``), containerd
  (``/etc/containerd/config.toml``), podman (reads CDI specs itself) and enroot/pyxis
  (its NVIDIA hook, or libnvidia-container); a capture that recorded neither the
  program nor its config leaves that runtime out, and one that recorded no runtime at
  all leaves the runtimes NOT_MEASURED;
- only when an image is named: ``nvidia-smi -L`` in a container of it, through the
  first configured runtime that can run one (docker, then podman), with CDI's
  ``--device nvidia.com/gpu=all`` where the runtime takes it, else ``--gpus all``.
  The container is ours by name (``--name gpuready-<random>``, ``--rm``): stopped at
  its timeout (what the deadline leaves, at most :data:`CONTAINER_RUN_TIMEOUT_S`), the
  killed client leaves it running, so it is removed by that name (``rm -f NAME``,
  never by a pattern that could match another's).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import replace
from typing import Callable

from validator.model import (
    IMAGE_PATTERN,
    CdiSpec,
    ContainerFacts,
    ContainerRun,
    Measured,
    Reason,
    RuntimeConfig,
    Unavailable,
)
from validator.node.parsers.base import ParseError
from validator.node.parsers.nvidia_ctk import (
    parse_cdi_list,
    parse_containerd_toml,
    parse_ctk_version,
    parse_daemon_json,
    parse_smi_list,
)
from validator.node.system import NotRecordedError, System
from validator.node.system_facts import command_failure, parsed, read_file, run_parsed

CDI_LIST_ARGV = ("nvidia-ctk", "cdi", "list")
CTK_VERSION_ARGV = ("nvidia-ctk", "--version")
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# enroot (and pyxis over it) hands GPUs out through this hook, which calls
# libnvidia-container's nvidia-container-cli.
ENROOT_HOOK = "/etc/enroot/hooks.d/98-nvidia.sh"
LIBNVIDIA_CONTAINER = (
    "/usr/lib/x86_64-linux-gnu/libnvidia-container.so.1",
    "/usr/lib/aarch64-linux-gnu/libnvidia-container.so.1",
    "/usr/lib64/libnvidia-container.so.1",
)
# A container start may pull the image first: minutes on a slow registry, never forever.
CONTAINER_RUN_TIMEOUT_S = 600.0
CONTAINER_RM_TIMEOUT_S = 60.0  # removing a stopped run's container: the daemon answers
CONTAINER_PREFIX = "gpuready-"
CDI_ALL = "nvidia.com/gpu=all"

ConfigParser = Callable[[str], "tuple[bool, str, bool]"]


def container_facts(system: System) -> ContainerFacts:
    """The toolkit, its CDI spec and the runtimes (no container is started here)."""
    return ContainerFacts(
        toolkit_version=run_parsed(
            system, CTK_VERSION_ARGV, parse_ctk_version, "nvidia-ctk --version"
        ),
        cdi=run_parsed(system, CDI_LIST_ARGV, parse_cdi_list, "nvidia-ctk cdi list"),
        runtimes=_runtimes(system),
    )


def _installed(system: System, program: str) -> bool | None:
    """Whether ``program`` is on PATH; None where a recording cannot tell."""
    try:
        return system.which(program) is not None
    except NotRecordedError:
        return None


def _configured(text: str | Unavailable, parse: ConfigParser) -> tuple[Measured[bool], str, bool]:
    if isinstance(text, Unavailable):
        if text.reason is Reason.NOT_SUPPORTED:  # no config file: the runtime's defaults
            return False, "", False
        return text, "", False
    try:
        configured, how, cdi = parse(text)
    except ParseError as exc:
        return Unavailable(Reason.ERROR, str(exc)), "", False
    return configured, how, cdi


def _configured_runtime(
    system: System, name: str, program: str, path: str, parse: ConfigParser
) -> RuntimeConfig | None:
    """A runtime with a config file; None where a recording holds neither it nor its config."""
    installed = _installed(system, program)
    text = read_file(system, path)
    recorded = isinstance(text, str)
    if installed is None and not recorded:
        return None
    configured, how, cdi = _configured(text, parse)
    return RuntimeConfig(
        name=name,
        installed=bool(installed) or recorded,
        configured=configured,
        how=how,
        cdi=cdi,
        config_path=path if recorded else "",
    )


def _enroot(system: System) -> RuntimeConfig | None:
    installed = _installed(system, "enroot")
    hook = read_file(system, ENROOT_HOOK)
    if installed is None and not isinstance(hook, str):
        return None
    if isinstance(hook, str):
        return RuntimeConfig("enroot", True, True, f"hook {ENROOT_HOOK}", False, ENROOT_HOOK)
    libraries = [path for path in LIBNVIDIA_CONTAINER if _exists(system, path)]
    how = f"libnvidia-container at {libraries[0]}" if libraries else ""
    return RuntimeConfig("enroot", bool(installed), bool(libraries), how, False)


def _exists(system: System, path: str) -> bool:
    """Whether a file is there (a library: never read whole)."""
    try:
        return bool(system.glob(path))
    except (NotRecordedError, OSError):
        return False


def _runtimes(system: System) -> Measured[tuple[RuntimeConfig, ...]]:
    found = [
        _configured_runtime(system, "docker", "docker", DOCKER_DAEMON_JSON, parse_daemon_json),
        _configured_runtime(
            system, "containerd", "containerd", CONTAINERD_CONFIG, parse_containerd_toml
        ),
        _podman(system),
        _enroot(system),
    ]
    # Only the runtimes there: one a recording cannot tell about is left out, never "absent".
    known = tuple(runtime for runtime in found if runtime is not None and runtime.installed)
    if not known and None in found:
        return Unavailable(
            Reason.NOT_MEASURED,
            f"no container runtime was recorded ({DOCKER_DAEMON_JSON}, {CONTAINERD_CONFIG})",
        )
    return known


def _podman(system: System) -> RuntimeConfig | None:
    installed = _installed(system, "podman")
    if installed is None:
        return None
    # podman reads /etc/cdi and /var/run/cdi itself: installed is configured.
    return RuntimeConfig("podman", installed, installed, "CDI" if installed else "", installed)


def container_name() -> str:
    """A name for our container that no one else's has: ``gpuready-`` and 12 hex digits."""
    return f"{CONTAINER_PREFIX}{secrets.token_hex(6)}"


def run_argv(runtime: RuntimeConfig, image: str, name: str) -> tuple[str, ...]:
    """The command that lists a container's GPUs through ``runtime``, in container ``name``."""
    how = ("--device", CDI_ALL) if runtime.cdi else ("--gpus", "all")
    return (runtime.name, "run", "--rm", "--name", name, *how, image, "nvidia-smi", "-L")


def with_container_run(
    system: System,
    facts: ContainerFacts,
    image: str,
    cdi_usable: bool,
    timeout_s: float | None = CONTAINER_RUN_TIMEOUT_S,
) -> ContainerFacts:
    """``facts`` with what a container of ``image`` saw (``nvidia-smi -L``), or why not.

    ``cdi_usable``: the CDI spec names ``nvidia.com/gpu=all`` (a runtime that takes CDI
    is then asked for it; else docker's ``--gpus all``). ``timeout_s``: what the
    deadline leaves it (at most :data:`CONTAINER_RUN_TIMEOUT_S`); None: no time was
    left, so none is started.
    """
    if not re.fullmatch(IMAGE_PATTERN, image):  # the controller refuses it; a hand-run agent too
        why = Unavailable(Reason.ERROR, f"{image[:80]!r} is no image reference: not run")
        return replace(facts, run=ContainerRun("none", image, (), why))
    runtimes = facts.runtimes if isinstance(facts.runtimes, tuple) else ()
    runnable = [
        r for r in runtimes if r.name in ("docker", "podman") and r.installed and r.configured
    ]
    if not runnable:
        why = Unavailable(
            Reason.NOT_SUPPORTED,
            "no docker or podman configured for the GPUs to run the container with",
        )
        return replace(facts, run=ContainerRun("none", image, (), why))
    runtime = runnable[0]
    if runtime.cdi and not cdi_usable:
        runtime = replace(runtime, cdi=False)
    argv = run_argv(runtime, image, container_name())
    if timeout_s is None:
        why = Unavailable(
            Reason.NOT_MEASURED,
            "the deadline left no time to start the container: give a longer --deadline",
        )
        return replace(facts, run=ContainerRun(runtime.name, image, argv, why))
    listed = _listed(system, argv, min(timeout_s, CONTAINER_RUN_TIMEOUT_S))
    return replace(facts, run=ContainerRun(runtime.name, image, argv, listed))


def _listed(system: System, argv: tuple[str, ...], timeout_s: float) -> Measured[tuple[str, ...]]:
    try:
        result = system.run(argv, timeout_s=timeout_s)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    if result.rc == 124:
        return Unavailable(
            Reason.ERROR,
            f"the container ran past {timeout_s:g} s and was stopped; {_removed(system, argv)}",
        )
    if not result.ok:
        return command_failure(result, " ".join(argv[:2]))
    gpus = parsed(parse_smi_list, result.stdout, "nvidia-smi -L in the container")
    if isinstance(gpus, Unavailable):
        return gpus
    return tuple(uuid for _, uuid in gpus)


def _removed(system: System, argv: tuple[str, ...]) -> str:
    """Remove the stopped run's container by the name we gave it; what became of it."""
    name = argv[argv.index("--name") + 1]
    remove = (argv[0], "rm", "-f", name)
    try:
        result = system.run(remove, timeout_s=CONTAINER_RM_TIMEOUT_S)
    except NotRecordedError:
        return f"its container ({name}) was not removed"
    if result.ok:
        return f"its container was removed ({name})"
    return (
        f"its container could not be removed: {' '.join(remove)} exited {result.rc}; "
        "run it on the node"
    )


def cdi_names_all(facts: ContainerFacts) -> bool:
    """Whether the CDI spec names ``nvidia.com/gpu=all``."""
    return isinstance(facts.cdi, CdiSpec) and facts.cdi.has_all
