"""The container runtime: can the node's NVIDIA Container Toolkit hand its GPUs to a container.

Three things are read (validator.node.container_probe): the toolkit's own view of the
CDI spec (``nvidia-ctk cdi list``) and its version, which container runtimes are
installed and configured for the GPUs (docker's daemon.json, containerd's config.toml,
podman, enroot/pyxis), and, only when an image is named (``--container-image`` or the
policy's ``container.image``), what ``nvidia-smi -L`` lists inside a container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.fields import Document, Field
from validator.model.measured import NOT_MEASURED, Measured

# An image reference as docker and podman take it (registry/name:tag or @digest); never
# starting with "-", so it is never read as an option of the runtime.
IMAGE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}"


@dataclass(frozen=True)
class CdiSpec:
    """The GPUs the CDI spec names (``nvidia-ctk cdi list``), as the toolkit read it.

    ``indexes`` and ``uuids`` are the ``nvidia.com/gpu=N`` and ``nvidia.com/gpu=GPU-...``
    names; ``has_all``: ``nvidia.com/gpu=all`` is there. ``devices``: every name listed,
    other kinds included (MIG devices, a management spec's), for the report.
    """

    indexes: Tuple[int, ...] = ()
    uuids: Tuple[str, ...] = ()
    has_all: bool = False
    devices: Tuple[str, ...] = ()


@dataclass(frozen=True)
class RuntimeConfig:
    """One container runtime on the node and whether it is set up to hand out GPUs.

    ``name``: docker, containerd, podman or enroot. ``installed``: its program (or,
    for enroot, its hook) is there. ``configured``: its config names the NVIDIA
    runtime or enables CDI (podman reads CDI specs itself: configured when
    installed); not measured where its config could not be read. ``how``: what in
    the config says so ("runtimes.nvidia", "features.cdi", "CDI", "hook 98-nvidia.sh").
    ``cdi``: the runtime takes ``--device nvidia.com/gpu=all``.
    """

    name: str
    installed: bool
    configured: Measured[bool] = NOT_MEASURED
    how: str = ""
    cdi: bool = False
    config_path: str = ""


@dataclass(frozen=True)
class ContainerRun:
    """What a container listed (``nvidia-smi -L`` in ``image``), or why it did not run."""

    runtime: str  # docker | podman
    image: str
    argv: Tuple[str, ...]
    uuids: Measured[Tuple[str, ...]] = NOT_MEASURED  # the GPUs the container saw


@dataclass(frozen=True)
class ContainerFacts:
    """The node's container runtime facts (:mod:`validator.model.container_facts`).

    ``toolkit_version`` NOT_SUPPORTED: nvidia-ctk is not installed; NOT_MEASURED: a
    capture without ``nvidia-ctk-version.txt``. ``cdi``: likewise for the CDI list.
    ``run`` None: no image was named, so no container was started.
    """

    toolkit_version: Measured[str] = NOT_MEASURED
    cdi: Measured[CdiSpec] = NOT_MEASURED
    runtimes: Measured[Tuple[RuntimeConfig, ...]] = NOT_MEASURED
    run: Optional[ContainerRun] = None


def configured_runtimes(facts: ContainerFacts) -> Tuple[RuntimeConfig, ...]:
    """The runtimes installed and configured for the GPUs (none where not measured)."""
    if isinstance(facts.runtimes, tuple):
        return tuple(r for r in facts.runtimes if r.installed and r.configured is True)
    return ()


@dataclass(frozen=True)
class CertifiedContainer:
    """What a certificate keeps of the container runtime, for drift to compare with.

    ``runtimes``: each configured runtime as "name: how" ("docker: runtimes.nvidia").
    """

    toolkit_version: Optional[str] = None
    cdi_indexes: Tuple[int, ...] = ()
    cdi_uuids: Tuple[str, ...] = ()
    runtimes: Tuple[str, ...] = ()


def certified_container(facts: Optional[ContainerFacts]) -> Optional[CertifiedContainer]:
    """The certificate's container summary; None where no toolkit was read (nothing to keep)."""
    if facts is None or not isinstance(facts.toolkit_version, str):
        return None
    spec = facts.cdi if isinstance(facts.cdi, CdiSpec) else CdiSpec()
    return CertifiedContainer(
        toolkit_version=facts.toolkit_version,
        cdi_indexes=spec.indexes,
        cdi_uuids=spec.uuids,
        runtimes=tuple(f"{r.name}: {r.how}" for r in configured_runtimes(facts)),
    )


def _texts(items: list[object]) -> Tuple[str, ...]:
    return tuple(str(item) for item in items)


# A certificate's ``container`` object, as validator.certificate reads it back.
_CERTIFIED_CONTAINER_KEYS = Document(
    (
        Field("toolkit_version", str, nullable=True),
        Field("cdi_indexes", list, item=Field("index", int, minimum=0), convert=tuple),
        Field("cdi_uuids", list, item=Field("uuid", str), convert=_texts),
        Field("runtimes", list, item=Field("runtime", str), convert=_texts),
    ),
    noun="field",
    wanted="a JSON object",
)
CERTIFIED_CONTAINER_FIELD = Field(
    "container",
    dict,
    document=_CERTIFIED_CONTAINER_KEYS,
    convert=lambda data: CertifiedContainer(**data),
)
