"""The policy's ``container:`` section: whether a node must run GPU containers, and how to try.

Decisions:

* ``required`` false (the default): a node without the NVIDIA Container Toolkit is not
  judged on containers at all (one PASS that says "not applicable"). A site whose jobs
  run in containers (Kubernetes, Slurm with pyxis/enroot, docker) sets it true: then a
  node without the toolkit, or without a runtime configured for the GPUs, FAILs with
  "fix the software stack". Wherever the toolkit IS installed it is judged, required or
  not: a stale CDI spec breaks the first container that asks for the GPU it misses.
* ``image`` None: no container is started (``certify --container-image IMAGE`` names
  one for a run). With an image, ``nvidia-smi -L`` runs in a container of it through
  docker or podman, and every GPU of the node must be listed there.
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.fields import Document, Field
from validator.model.container_facts import IMAGE_PATTERN

IMAGE_WANTED = "an image reference like 'nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04'"


@dataclass(frozen=True)
class ContainerPolicy:
    """What the container checks ask of a node (see the module doc)."""

    required: bool = False
    image: str | None = None


CONTAINER_FIELDS = Document(
    (
        Field("required", bool),
        Field("image", str, wanted=IMAGE_WANTED, pattern=IMAGE_PATTERN, nullable=True),
    ),
    wanted="a mapping of container keys (required, image)",
)
