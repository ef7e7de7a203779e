"""Container checks: can the node's NVIDIA Container Toolkit hand every GPU to a container.

- ``container.toolkit``: nvidia-ctk is installed (its version). Not installed and the
  policy's ``container.required`` false: one PASS, "not applicable", and nothing else
  (validator.judge.container_policy says why). Required: FAIL, fix the software stack.
- ``container.cdi``: the CDI spec (``nvidia-ctk cdi list``) names every GPU by index and,
  where the spec lists UUIDs (toolkit 1.17 on), by UUID, and names ``all``. A GPU it
  misses FAILs: a container asking for it cannot start. Regenerate the spec.
- ``container.runtime``: a runtime (docker, containerd, podman, enroot/pyxis) is set up
  for the GPUs. One installed but not configured FAILs; none installed FAILs only where
  containers are required. Its PASS says whether a container was run.
- ``container.gpus_visible``: only where an image was named (``--container-image``,
  policy ``container.image``): the GPUs ``nvidia-smi -L`` lists inside it are the node's.

What could not be read is UNKNOWN, never PASS; a capture without the files says which
file to record and how (required only where containers are).
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.advice import capture_file
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import (
    Action,
    CdiSpec,
    ContainerFacts,
    ContainerRun,
    Finding,
    GpuFacts,
    NodeFacts,
    Reason,
    RuntimeConfig,
    Unavailable,
    configured_runtimes,
)

TOOLKIT = "container.toolkit"
CDI = "container.cdi"
RUNTIME = "container.runtime"
GPUS_VISIBLE = "container.gpus_visible"
REGENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
CDI_SOURCE = f"NVIDIA Container Toolkit, CDI support: regenerate the spec: {REGENERATE}"
INSTALL_SOURCE = (
    "NVIDIA Container Toolkit install guide: install nvidia-container-toolkit (gpuready "
    "provision), then nvidia-ctk runtime configure --runtime=docker (or containerd)"
)
CONFIGURE = "nvidia-ctk runtime configure --runtime={name}, then restart {name}"
CAPTURE_SOURCE = "gpuready: the capture lacks it: capture it on the host"
NOT_ASKED = (
    "no container was run (not asked: certify --container-image IMAGE, or the policy's "
    "container.image, lists the GPUs a container sees)"
)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """The container family's findings; none where the facts hold no container facts."""
    found = facts.container
    if found is None:
        return []
    required = policy.container.required
    toolkit = _toolkit(found, required)
    if toolkit.observed.startswith("not installed") and not required:
        return [toolkit]  # not applicable: no toolkit, and containers are not required
    findings = [toolkit, *_cdi(found, facts, required), _runtime(found, required)]
    if found.run is not None:
        findings.append(_visible(found.run, facts))
    return findings


def _not_measured(check_id: str, value: Unavailable, what: str, required: bool) -> Finding:
    """UNKNOWN for a fact a capture lacks: the file to record and the command (MEASURE)."""
    name, command = capture_file(check_id)
    finding = node_finding(
        check_id,
        UNKNOWN,
        f"{what} was not recorded, so it cannot be judged: {why_not(value)}; capture "
        f"{name} on the host: {command} (gpuready capture records it)",
        observed=why_not(value),
        required=required,
    )
    return with_action(finding, Action.MEASURE, f"{CAPTURE_SOURCE}: {command}")


def _toolkit(found: ContainerFacts, required: bool) -> Finding:
    version = found.toolkit_version
    if isinstance(version, str):
        return node_finding(
            TOOLKIT, PASS, f"NVIDIA Container Toolkit {version} is installed", observed=version
        )
    if version.reason is Reason.NOT_MEASURED:
        return _not_measured(TOOLKIT, version, "The NVIDIA Container Toolkit", required)
    if version.reason is Reason.NOT_SUPPORTED:
        if not required:
            return node_finding(
                TOOLKIT,
                PASS,
                "Containers not applicable: no NVIDIA Container Toolkit on this node "
                "(nvidia-ctk not found) and the policy does not require containers "
                "(container.required: false)",
                observed=f"not installed: {why_not(version)}",
                expected="not required",
                required=False,
            )
        finding = node_finding(
            TOOLKIT,
            FAIL,
            "The NVIDIA Container Toolkit is not installed (nvidia-ctk not found), but the "
            "policy requires containers (container.required: true): no container gets a GPU",
            observed=f"not installed: {why_not(version)}",
            expected="nvidia-container-toolkit installed",
        )
        return with_action(finding, Action.FIX_SOFTWARE, INSTALL_SOURCE)
    finding = node_finding(
        TOOLKIT,
        UNKNOWN,
        f"nvidia-ctk could not tell its version: {why_not(version)}",
        observed=why_not(version),
        required=required,
    )
    return with_action(finding, Action.FIX_SOFTWARE, INSTALL_SOURCE)


def _cdi(found: ContainerFacts, facts: NodeFacts, required: bool) -> list[Finding]:
    spec = found.cdi
    if isinstance(spec, Unavailable):
        if spec.reason is Reason.NOT_MEASURED:
            return [_not_measured(CDI, spec, "The CDI spec (nvidia-ctk cdi list)", required)]
        finding = node_finding(
            CDI,
            UNKNOWN,
            f"nvidia-ctk cdi list could not be read: {why_not(spec)}",
            observed=why_not(spec),
        )
        return [with_action(finding, Action.FIX_SOFTWARE, CDI_SOURCE)]
    if not facts.gpus:
        return [
            node_finding(
                CDI,
                UNKNOWN,
                f"The CDI spec names {len(spec.indexes)} GPUs, but the node's GPUs could not "
                "be read to compare them with",
                observed=_named(spec),
                required=False,
            )
        ]
    node_uuids = {g.uuid for g in facts.gpus if isinstance(g.uuid, str)}
    gone = sorted(set(spec.uuids) - node_uuids)
    stale = (
        f" (the spec names {', '.join(gone)}, which this node has not: it predates a "
        "change of GPUs)"
        if gone
        else ""
    )
    missing = [f for gpu in facts.gpus if (f := _missing(gpu, spec, stale)) is not None]
    if not spec.has_all:
        finding = node_finding(
            CDI,
            FAIL,
            "The CDI spec has no nvidia.com/gpu=all device: a container asking for every "
            f"GPU cannot start; regenerate it: {REGENERATE}",
            observed=_named(spec),
            expected="nvidia.com/gpu=all",
        )
        missing.append(with_action(finding, Action.FIX_SOFTWARE, CDI_SOURCE))
    if missing:
        return missing
    return [
        node_finding(
            CDI,
            PASS,
            f"The CDI spec names all {len(facts.gpus)} GPUs (by index"
            f"{' and UUID' if spec.uuids else ''}) and nvidia.com/gpu=all",
            observed=_named(spec),
            expected=f"{len(facts.gpus)} GPUs",
        )
    ]


def _named(spec: CdiSpec) -> str:
    return f"{len(spec.indexes)} indexes, {len(spec.uuids)} UUIDs" + (
        ", all" if spec.has_all else ""
    )


def _missing(gpu: GpuFacts, spec: CdiSpec, stale: str) -> Finding | None:
    """FAIL for a GPU the spec does not name (by index, or by UUID where it lists UUIDs)."""
    uuid = gpu.uuid if isinstance(gpu.uuid, str) else None
    lacks = []
    if gpu.index not in spec.indexes:
        lacks.append(f"nvidia.com/gpu={gpu.index}")
    if spec.uuids and uuid is not None and uuid not in spec.uuids:
        lacks.append(f"nvidia.com/gpu={uuid}")
    if not lacks:
        return None
    finding = gpu_finding(
        CDI,
        FAIL,
        gpu,
        f"GPU {gpu.index} is missing from the CDI spec{stale}: {', '.join(lacks)} not listed, "
        f"so a container asking for it cannot start; regenerate it: {REGENERATE}",
        observed=_named(spec),
        expected=", ".join(lacks),
    )
    return with_action(finding, Action.FIX_SOFTWARE, CDI_SOURCE)


def _runtime(found: ContainerFacts, required: bool) -> Finding:
    runtimes = found.runtimes
    if isinstance(runtimes, Unavailable):
        return _not_measured(RUNTIME, runtimes, "The container runtime config", required)
    ready = configured_runtimes(found)
    run_note = "" if found.run is not None else f"; {NOT_ASKED}"
    if ready:
        named = ", ".join(f"{r.name} ({r.how})" for r in ready)
        return node_finding(
            RUNTIME, PASS, f"Configured for the GPUs: {named}{run_note}", observed=named
        )
    broken = [r for r in runtimes if r.installed and isinstance(r.configured, Unavailable)]
    if broken:
        return _unreadable(broken[0])
    installed = [r for r in runtimes if r.installed]
    if installed:
        names = ", ".join(r.name for r in installed)
        how = "; ".join(CONFIGURE.format(name=r.name) for r in installed if r.name != "enroot")
        finding = node_finding(
            RUNTIME,
            FAIL,
            f"{names} is installed but not configured for the GPUs (no nvidia runtime, CDI "
            f"not enabled): {how or 'install enroot NVIDIA hook (98-nvidia.sh)'}",
            observed=f"{names}: not configured",
            expected="a runtime configured for the GPUs",
        )
        return with_action(finding, Action.FIX_SOFTWARE, INSTALL_SOURCE)
    if not required:
        return node_finding(
            RUNTIME,
            PASS,
            f"No container runtime is installed (containers not required){run_note}",
            observed="none installed",
            required=False,
        )
    finding = node_finding(
        RUNTIME,
        FAIL,
        "No container runtime (docker, containerd, podman, enroot) is installed, but the "
        "policy requires containers",
        observed="none installed",
        expected="a runtime configured for the GPUs",
    )
    return with_action(finding, Action.FIX_SOFTWARE, INSTALL_SOURCE)


def _unreadable(runtime: RuntimeConfig) -> Finding:
    """A runtime whose config could not be read (UNKNOWN) or does not parse (FAIL)."""
    value = runtime.configured
    assert isinstance(value, Unavailable)  # noqa: S101 - the caller chose these
    path = runtime.config_path or f"{runtime.name}'s config"
    if value.reason is Reason.ERROR:
        finding = node_finding(
            RUNTIME,
            FAIL,
            f"{path} does not parse, so {runtime.name} refuses it: {why_not(value)}",
            observed=why_not(value),
            expected="a valid config",
        )
        return with_action(finding, Action.FIX_SOFTWARE, f"gpuready: fix {path}")
    return node_finding(
        RUNTIME,
        UNKNOWN,
        f"{path} could not be read: {why_not(value)}",
        observed=why_not(value),
    )


def _visible(run: ContainerRun, facts: NodeFacts) -> Finding:
    """Whether a container of the asked image listed every GPU of the node."""
    seen = run.uuids
    node = [g.uuid for g in facts.gpus if isinstance(g.uuid, str)]
    how = " ".join(run.argv) or f"a container of {run.image}"
    if isinstance(seen, Unavailable):
        action = Action.MEASURE if seen.reason is Reason.NOT_MEASURED else Action.FIX_SOFTWARE
        finding = node_finding(
            GPUS_VISIBLE,
            UNKNOWN,
            f"What a container sees could not be measured: {why_not(seen)}",
            observed=why_not(seen),
            expected=f"{len(node)} GPUs",
        )
        return with_action(finding, action, f"gpuready: {how}")
    missing = [uuid for uuid in node if uuid not in seen]
    if missing or not node:
        finding = node_finding(
            GPUS_VISIBLE,
            FAIL if node else UNKNOWN,
            f"A container ({how}) listed {len(seen)} of the node's {len(node)} GPUs; "
            f"missing: {', '.join(missing) or 'the node GPUs could not be read'}",
            observed=f"{len(seen)} GPUs",
            expected=f"{len(node)} GPUs",
        )
        return with_action(finding, Action.FIX_SOFTWARE, CDI_SOURCE)
    return node_finding(
        GPUS_VISIBLE,
        PASS,
        f"A container ({how}) listed all {len(node)} GPUs",
        observed=f"{len(seen)} GPUs",
        expected=f"{len(node)} GPUs",
    )
