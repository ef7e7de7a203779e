"""Burn-in: did every GPU carry a sustained load, correctly, at its model's speed, within limits?

Thresholds (policy.thresholds, defaults and why):

- ``burn_speed_ratio`` 0.65: achieved dense TFLOPS must reach this share of the
  SKU's datasheet dense peak for the dtype. Well-cooled H100 SXM reach about
  0.7-0.8 of 989 bf16 TFLOPS in large GEMMs; 0.65 leaves room for clocks under
  a power limit without passing a GPU running at half speed.
- ``burn_relative_min`` 0.90: each GPU within 10% of the node's best (as
  gpu-fryer's tolerance).
- ``burn_power_min_ratio`` 0.75: the median draw under load reaches this
  share of the enforced limit (as DCGM's targeted power).
- ``burn_thermal_margin_c`` 5: peak temperature under load stays this far below slowdown.
- ``burn_clock_sag_max`` 0.30: the SM clock under load (its 5th percentile, so
  that one sample taken while the power controller settles does not decide)
  stays within 30% of the GPU's maximum SM clock.

Every judgement "under load" reads only the samples :func:`validator.trace.under_load`
keeps: the sampler's idle first sample, the ramp, idle gaps and the tail are
not the load. Too few load samples is UNKNOWN.

A burn that was not run, could not start, was interrupted, or measured nothing
is UNKNOWN, never a pass; ``require_burn: false`` makes it optional.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics

from validator.judge.catalog import Sku
from validator.judge.checks.errors import xid_meaning
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    gpu_list,
    node_finding,
    readable_gpus,
)
from validator.judge.checks.thermal import slowdown_temperature
from validator.judge.policy import Policy
from validator.model import (
    BurnResult,
    BurnStatus,
    Finding,
    GpuBurn,
    GpuFacts,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
)
from validator.trace import (
    LOW_PERCENTILE,
    MIN_LOAD_SAMPLES,
    describe_window,
    numbers,
    percentile,
    under_load,
)

HARDWARE_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
THERMAL_SLOWDOWN = ("sw_thermal_slowdown",)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge the burn-in facts."""
    burn = facts.burn
    if burn is None:
        return [
            node_finding(
                "burn.run",
                UNKNOWN,
                "No burn-in was run (--burn 0, or a capture): a node is certified only after "
                "every GPU carried a sustained load",
                observed="not run",
                expected="run",
                required=policy.require_burn,
            )
        ]
    if burn.error:
        # A burn that ran GPUs and still carries an error (an injection never applied)
        # did run: it is its result that cannot be used.
        burned = bool(burn.gpus)
        return [
            node_finding(
                "burn.run",
                UNKNOWN,
                f"The burn-in {'result cannot be used' if burned else 'could not start'}: "
                f"{burn.error}",
                observed="not usable" if burned else "could not start",
                expected="run",
                required=policy.require_burn,
            )
        ]
    # GPUs whose facts could not be read are judged (failed) by the inventory
    # checks; a burn figure must not make one of them look healthy.
    gpus_by_index = {gpu.index: gpu for gpu in readable_gpus(facts)}
    findings = [_run_summary(burn, policy)]
    ran = [
        gpu
        for gpu in burn.gpus
        if gpu.status is BurnStatus.COMPLETED and gpu.index in gpus_by_index
    ]
    for gpu in burn.gpus:
        findings += _status(gpu, burn, policy)
    for gpu in ran:
        facts_gpu = gpus_by_index.get(gpu.index)
        findings += _correctness(gpu)
        findings += _speed(burn, gpu, policy, sku)
        findings += _power(gpu, facts_gpu, policy)
        findings += _throttle(gpu)
        findings += _thermal(gpu, facts_gpu, policy)
        findings += _clocks(gpu, facts_gpu, policy)
        findings += _counters(gpu)
    findings += _cross_gpu(burn, ran)
    findings += _relative_speed(ran, policy)
    findings += _xids(burn, policy)
    return findings


def _run_summary(burn: BurnResult, policy: Policy) -> Finding:
    kind = "simulated " if burn.simulated else ""
    visible = (
        f"; CUDA_VISIBLE_DEVICES={burn.cuda_visible_devices} was set by the environment"
        if burn.cuda_visible_devices is not None
        else ""
    )
    what = (
        f"{kind}{burn.dtype} burn-in of {len(burn.gpus)} GPUs for {burn.elapsed_s:.0f} s on the "
        f"{burn.backend} backend ({burn.matrix_size}x{burn.matrix_size} products){visible}"
    )
    if burn.interrupted:
        return node_finding(
            "burn.run",
            UNKNOWN,
            f"The {what} was interrupted before its {burn.duration_s:.0f} s: the node cannot be "
            "certified on a partial burn; run it again to the end",
            observed=f"interrupted at {burn.elapsed_s:.1f} s",
            expected=f"{burn.duration_s:.0f} s",
            required=policy.require_burn,
        )
    return node_finding(
        "burn.run",
        PASS,
        what,
        observed=f"{burn.elapsed_s:.1f} s",
        expected=f"{burn.duration_s:.0f} s",
        required=policy.require_burn,
    )


def _status(gpu: GpuBurn, burn: BurnResult, policy: Policy) -> list[Finding]:
    if gpu.status is BurnStatus.COMPLETED:
        return []
    if gpu.status is BurnStatus.UNSEEN:
        if burn.cuda_visible_devices is not None:
            return [
                gpu_finding(
                    "burn.status",
                    UNKNOWN,
                    gpu,
                    f"{gpu.detail}: it was not burned; unset CUDA_VISIBLE_DEVICES to certify "
                    "every GPU of the node",
                    observed="hidden by CUDA_VISIBLE_DEVICES",
                    expected="burned",
                    required=policy.require_burn,
                )
            ]
        return [
            gpu_finding(
                "burn.status",
                FAIL,
                gpu,
                f"{gpu.detail}: the CUDA runtime did not initialise it; drain the node, check "
                "the kernel log for its Xids and reset or reseat the GPU",
                observed="not visible to CUDA",
                expected="visible to CUDA",
            )
        ]
    if gpu.status is BurnStatus.INTERRUPTED:
        return [
            gpu_finding(
                "burn.status",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s burn was interrupted before its batch ended: {gpu.detail}",
                observed="interrupted",
                expected="completed",
                required=policy.require_burn,
            )
        ]
    if gpu.status is BurnStatus.NOT_RUN:
        return [
            gpu_finding(
                "burn.status",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index} could not be given a burn worker: {gpu.detail}",
                observed="not run",
                expected="completed",
                required=policy.require_burn,
            )
        ]
    what = (
        "stopped answering during the burn-in (wedged)"
        if gpu.status is BurnStatus.TIMEOUT
        else "failed the burn-in"
    )
    return [
        gpu_finding(
            "burn.status",
            FAIL,
            gpu,
            f"GPU {gpu.index} {what}: {gpu.detail}; drain the node and investigate the GPU",
            observed=gpu.status.value,
            expected="completed",
        )
    ]


def _correctness(gpu: GpuBurn) -> list[Finding]:
    problems = []
    if gpu.mismatched_elements:
        problems.append(
            f"{gpu.mismatched_elements} result elements differed from the first result in "
            f"{gpu.mismatched_iterations} batches ({gpu.iterations} products in all)"
        )
    if gpu.nonfinite_elements:
        problems.append(f"{gpu.nonfinite_elements} elements were NaN or Inf")
    if gpu.reference_ok is False:
        problems.append(
            f"the first product disagreed with an fp64 reference (max relative error "
            f"{gpu.reference_max_error})"
        )
    if not problems and gpu.iterations == 0:
        return [
            gpu_finding(
                "burn.correctness",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index} computed no product past its first: nothing was checked",
                observed="0 products",
                expected="products checked",
            )
        ]
    if problems:
        return [
            gpu_finding(
                "burn.correctness",
                FAIL,
                gpu,
                f"GPU {gpu.index} computed wrong results: {'; '.join(problems)}; a faulty GPU, "
                "drain it and request an RMA",
                observed=f"{gpu.mismatched_elements} bad, {gpu.nonfinite_elements} non-finite",
                expected="0 bad elements",
            )
        ]
    if isinstance(gpu.reference_ok, Unavailable):
        return [
            gpu_finding(
                "burn.correctness",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s first product could not be checked against fp64: "
                f"{gpu.reference_ok}",
                observed="not checked",
                expected="reference ok",
            )
        ]
    return [
        gpu_finding(
            "burn.correctness",
            PASS,
            gpu,
            f"GPU {gpu.index} returned identical, finite results in all {gpu.iterations} products",
            observed="0 bad elements",
            expected="0 bad elements",
        )
    ]


def _speed(burn: BurnResult, gpu: GpuBurn, policy: Policy, sku: Sku | None) -> list[Finding]:
    check_id = "burn.speed"
    if isinstance(gpu.tflops, Unavailable):
        return [
            gpu_finding(
                check_id, UNKNOWN, gpu, f"GPU {gpu.index}'s speed was not measured: {gpu.tflops}"
            )
        ]
    if burn.backend == "numpy" and not burn.simulated:
        return [
            gpu_finding(
                check_id,
                UNKNOWN,
                gpu,
                f"The numpy backend measured the CPU ({gpu.tflops:.3g} TFLOPS), not GPU "
                f"{gpu.index}; "
                "burn with cublas or torch to judge speed",
                observed=f"{gpu.tflops:.3g} TFLOPS (CPU)",
                expected="a GPU backend",
            )
        ]
    peak = sku.peak_tflops.of(burn.dtype) if sku is not None else None
    if peak is None:
        return [
            gpu_finding(
                check_id,
                UNKNOWN,
                gpu,
                f"No datasheet {burn.dtype} peak is known for this GPU model, so {gpu.tflops:.0f} "
                "TFLOPS cannot be judged on its own",
                observed=f"{gpu.tflops:.1f} TFLOPS",
                expected="a catalog peak",
                required=False,
            )
        ]
    floor = policy.thresholds.burn_speed_ratio * peak
    ratio = gpu.tflops / peak
    ok = gpu.tflops >= floor
    duty = f" at {gpu.duty:.1%} device duty" if isinstance(gpu.duty, float) else ""
    return [
        gpu_finding(
            check_id,
            PASS if ok else FAIL,
            gpu,
            f"GPU {gpu.index} sustained {gpu.tflops:.1f} {burn.dtype} TFLOPS{duty}, {ratio:.0%} "
            f"of the {peak:g} dense peak"
            + (
                ""
                if ok
                else f", below the {policy.thresholds.burn_speed_ratio:.0%} floor; check clocks, "
                "power and cooling"
            ),
            observed=f"{gpu.tflops:.1f} TFLOPS",
            expected=f">= {floor:.0f} TFLOPS",
        )
    ]


def _relative_speed(ran: list[GpuBurn], policy: Policy) -> list[Finding]:
    measured = [(gpu, gpu.tflops) for gpu in ran if isinstance(gpu.tflops, float)]
    if len(measured) < 2:
        return []
    best = max(value for _, value in measured)
    floor = policy.thresholds.burn_relative_min * best
    findings = []
    for gpu, value in measured:
        ok = value >= floor
        findings.append(
            gpu_finding(
                "burn.speed_relative",
                PASS if ok else FAIL,
                gpu,
                f"GPU {gpu.index} ran at {value / best:.0%} of the node's fastest GPU "
                f"({best:.1f} TFLOPS)"
                + ("" if ok else "; a straggler slows every job that spans it"),
                observed=f"{value:.1f} TFLOPS",
                expected=f">= {floor:.1f} TFLOPS",
            )
        )
    return findings


def _cross_gpu(burn: BurnResult, ran: list[GpuBurn]) -> list[Finding]:
    digests = {gpu.index: gpu.digest for gpu in ran if isinstance(gpu.digest, str)}
    if len(digests) < 2 or not burn.deterministic:
        return []
    common, count = collections.Counter(digests.values()).most_common(1)[0]
    odd = sorted(index for index, digest in digests.items() if digest != common)
    if not odd:
        return [
            node_finding(
                "burn.cross_gpu",
                PASS,
                f"All {len(digests)} GPUs computed bit-identical products from the same inputs",
                observed=common,
                expected="identical",
            )
        ]
    return [
        node_finding(
            "burn.cross_gpu",
            FAIL,
            f"GPUs {gpu_list(odd)} computed a different product from the same inputs than the "
            f"other {count}: a silent data corruption suspect",
            observed=", ".join(f"gpu{i}={digests[i]}" for i in odd),
            expected=common,
        )
    ]


def _too_few(gpu: GpuBurn, check_id: str, what: str) -> Finding | None:
    """An UNKNOWN finding when too few samples were taken under load to judge ``what``."""
    loaded = under_load(gpu)
    if len(loaded) >= MIN_LOAD_SAMPLES:
        return None
    why = "no samples were taken" if not gpu.samples else f"({describe_window(gpu)})"
    return gpu_finding(
        check_id,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index}'s {what} under load cannot be judged: fewer than "
        f"{MIN_LOAD_SAMPLES} samples under load {why}",
        observed=f"{len(loaded)} load samples",
        expected=f">= {MIN_LOAD_SAMPLES} load samples",
    )


def _power(gpu: GpuBurn, facts_gpu: GpuFacts | None, policy: Policy) -> list[Finding]:
    few = _too_few(gpu, "burn.power", "power")
    if few is not None:
        return [few]
    draws = numbers(under_load(gpu), lambda sample: sample.power_w)
    typical = percentile(draws, 50.0)
    limit = facts_gpu.power_limit_enforced_w if facts_gpu is not None else None
    if typical is None or not isinstance(limit, float):
        why = "the enforced limit is unknown"
        if typical is None:
            why = "no power was sampled under load"
        return [
            gpu_finding(
                "burn.power",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s power under load cannot be judged: {why}",
            )
        ]
    ratio = typical / limit if limit else 0.0
    floor = policy.thresholds.burn_power_min_ratio
    ok = ratio >= floor
    return [
        gpu_finding(
            "burn.power",
            PASS if ok else FAIL,
            gpu,
            f"GPU {gpu.index} drew a median {typical:.0f} W under load (peak {max(draws):.0f} W), "
            f"{ratio:.0%} of its {limit:.0f} W limit"
            + ("" if ok else f"; below {floor:.0%}: the load never reached full power"),
            observed=f"{typical:.0f} W",
            expected=f">= {floor * limit:.0f} W",
        )
    ]


def _throttle(gpu: GpuBurn) -> list[Finding]:
    few = _too_few(gpu, "burn.throttle", "clock-event reasons")
    if few is not None:
        return [few]
    loaded = under_load(gpu)
    seen: dict[str, int] = {}
    measured = 0
    for sample in loaded:
        if isinstance(sample.clock_event_reasons, tuple):
            measured += 1
            for reason in sample.clock_event_reasons:
                seen[reason] = seen.get(reason, 0) + 1
    if not measured:
        return [
            gpu_finding(
                "burn.throttle",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s clock-event reasons were not sampled under load",
            )
        ]

    def share(reason: str) -> str:
        return f"{reason} ({seen[reason]}/{measured} samples)"

    bad = sorted(reason for reason in seen if reason in HARDWARE_SLOWDOWN + THERMAL_SLOWDOWN)
    if bad:
        return [
            gpu_finding(
                "burn.throttle",
                FAIL,
                gpu,
                f"GPU {gpu.index} throttled under load: {', '.join(share(r) for r in bad)}; "
                "check cooling, airflow and the power supply",
                observed=", ".join(bad),
                expected="no slowdown",
            )
        ]
    return [
        gpu_finding(
            "burn.throttle",
            PASS,
            gpu,
            f"GPU {gpu.index} showed no hardware, thermal or power-brake slowdown under load"
            + (f" (seen: {', '.join(share(r) for r in sorted(seen))})" if seen else ""),
            observed=", ".join(sorted(seen)) or "none",
            expected="no slowdown",
        )
    ]


def _thermal(gpu: GpuBurn, facts_gpu: GpuFacts | None, policy: Policy) -> list[Finding]:
    few = _too_few(gpu, "burn.thermal", "temperature")
    if few is not None:
        return [few]
    temperatures = numbers(under_load(gpu), lambda sample: sample.temperature_gpu_c)
    peak = max(temperatures) if temperatures else None
    slowdown = slowdown_temperature(facts_gpu) if facts_gpu is not None else None
    if peak is None:
        return [
            gpu_finding(
                "burn.thermal",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s temperature was not sampled under load",
            )
        ]
    if slowdown is None:
        return [
            gpu_finding(
                "burn.thermal",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index} peaked at {peak:.0f} C; its slowdown temperature is unknown",
                observed=f"{peak:.0f} C",
                expected="a known slowdown threshold",
                required=False,
            )
        ]
    margin = slowdown - peak
    needed = policy.thresholds.burn_thermal_margin_c
    ok = margin >= needed
    return [
        gpu_finding(
            "burn.thermal",
            PASS if ok else FAIL,
            gpu,
            f"GPU {gpu.index} peaked at {peak:.0f} C under load, {margin:.0f} C below its "
            f"{slowdown:.0f} C slowdown point" + ("" if ok else "; check cooling and airflow"),
            observed=f"{peak:.0f} C",
            expected=f"<= {slowdown - needed:.0f} C",
        )
    ]


def _clocks(gpu: GpuBurn, facts_gpu: GpuFacts | None, policy: Policy) -> list[Finding]:
    few = _too_few(gpu, "burn.clocks", "SM clock")
    if few is not None:
        return [dataclasses.replace(few, required=False)]
    clocks = numbers(under_load(gpu), lambda sample: sample.sm_clock_mhz)
    top = facts_gpu.sm_clock_max_mhz if facts_gpu is not None else None
    low = percentile(clocks, LOW_PERCENTILE)
    if low is None or not isinstance(top, int) or top <= 0:
        return [
            gpu_finding(
                "burn.clocks",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s SM clock under load cannot be judged (no samples, "
                "or no maximum clock)",
                required=False,
            )
        ]
    sag = 1.0 - low / top
    allowed = policy.thresholds.burn_clock_sag_max
    ok = sag <= allowed
    return [
        gpu_finding(
            "burn.clocks",
            PASS if ok else FAIL,
            gpu,
            f"GPU {gpu.index}'s SM clock under load stayed at or above {low:.0f} MHz in 95% of "
            f"its samples (median {statistics.median(clocks):.0f}, max {top} MHz)"
            + ("" if ok else f": a {sag:.0%} sag, more than {allowed:.0%}"),
            observed=f"{low:.0f} MHz",
            expected=f">= {top * (1 - allowed):.0f} MHz",
        )
    ]


_COUNTER_RULES: tuple[tuple[str, Severity, str], ...] = (
    ("ecc_volatile_uncorrected", FAIL, "uncorrected ECC errors"),
    ("remapped_rows_uncorrectable", FAIL, "rows remapped for uncorrectable errors"),
    ("ecc_volatile_corrected", WARN, "corrected ECC errors"),
    ("remapped_rows_correctable", WARN, "rows remapped for correctable errors"),
)


def _counters(gpu: GpuBurn) -> list[Finding]:
    before, after = gpu.counters_before, gpu.counters_after
    grew = []
    severity = PASS
    compared = 0
    for name, level, words in _COUNTER_RULES:
        old, new = getattr(before, name), getattr(after, name)
        if isinstance(old, int) and isinstance(new, int):
            compared += 1
            if new > old:
                grew.append(f"{new - old} new {words}")
                severity = FAIL if FAIL in (severity, level) else WARN
    for flag in ("remap_pending", "retired_pages_pending"):
        if getattr(after, flag) is True and getattr(before, flag) is not True:
            grew.append(f"{flag.replace('_', ' ')} appeared")
            severity = FAIL
    hung = [
        value
        for value in (getattr(after, name) for name, _, _ in _COUNTER_RULES)
        if isinstance(value, Unavailable) and value.reason is Reason.GPU_LOST
    ]
    if hung:
        return [
            gpu_finding(
                "burn.errors",
                FAIL,
                gpu,
                f"GPU {gpu.index} stopped answering after the burn-in: {hung[0].detail}; drain "
                "the node and reset the GPU",
                observed="no answer",
                expected="counters read",
            )
        ]
    if not compared:
        return [
            gpu_finding(
                "burn.errors",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index}'s error counters could not be compared",
            )
        ]
    if grew:
        return [
            gpu_finding(
                "burn.errors",
                severity,
                gpu,
                f"GPU {gpu.index} during the burn-in: {'; '.join(grew)}",
                observed="; ".join(grew),
                expected="no new errors",
            )
        ]
    return [
        gpu_finding(
            "burn.errors",
            PASS,
            gpu,
            f"GPU {gpu.index} raised no new ECC errors or row remaps during the burn-in",
            observed="none",
            expected="no new errors",
        )
    ]


def _xids(burn: BurnResult, policy: Policy) -> list[Finding]:
    events = burn.xid_events_during
    if isinstance(events, Unavailable):
        return [
            node_finding(
                "burn.xid",
                UNKNOWN,
                f"Xids during the burn-in could not be read: {events}",
                observed="not measured",
                expected="no new Xids",
            )
        ]
    if not events:
        return [
            node_finding(
                "burn.xid",
                PASS,
                "No Xid appeared during the burn-in",
                observed="none",
                expected="none",
            )
        ]
    failing = sorted({e.xid for e in events if e.xid in policy.fail_xids})
    listed = ", ".join(f"Xid {x} ({xid_meaning(x)})" for x in sorted({e.xid for e in events}))
    return [
        node_finding(
            "burn.xid",
            FAIL if failing else WARN,
            f"During the burn-in the kernel logged {listed}",
            observed=", ".join(str(e.xid) for e in events),
            expected="no new Xids",
        )
    ]


__all__ = ["check"]
