"""The judgement of bench/gpu_check.sh: every figure into one JSON file, a summary, an exit code.

    python3 bench/gpu_check_summary.py summarize OUT_DIR
    python3 bench/gpu_check_summary.py write-policy PATH

``summarize`` reads what the shell script left in OUT_DIR (steps.tsv, settings.tsv,
and each step's <step>.stdout / .stderr / .rc), writes OUT_DIR/gpu_check.json and
OUT_DIR/summary.txt, prints the summary and exits:

* 0: every target was measured and met;
* 1: everything was measured and a target was missed;
* 2: something could not be measured (no report, no burn, a GPU without TFLOPS, no
  duty, no torch reference, ...). A missing figure is never a pass, and it wins over
  a missed target: an incomplete run is reported as incomplete.

Targets, per GPU and burn backend (cublas, torch):

* burn TFLOPS (median 1 s window) >= 0.95 of the torch reference's median 1 s window on
  the same GPU (bench/burn_reference.py: same inputs, dtype, size, warm-up and load
  window, every GPU loaded at once);
* burn TFLOPS >= 0.70 of the 989 TFLOPS dense bf16 peak on H100 SXM, >= 0.75 on H200 SXM;
  any other model has its ratio reported without a target, and the summary says so;
* duty (share of the load window the device computed) >= 0.97 for cublas;
* correctness: the worker completed, no mismatched or non-finite element, the reference
  tile agreed with fp64;
* the node's findings: no FAIL and no required UNKNOWN, except findings that cannot
  apply to a single-GPU machine (listed as not counted, with the reason).

Standard library only, Python 3.9 and newer: it runs on the lent machine's python3,
where the package's own dependencies may be missing. The under-load rule mirrors
validator.trace (tests/house/test_bench_gpu_check.py holds the two together).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EXIT_PASS, EXIT_MISSED, EXIT_UNMEASURED = 0, 1, 2
OUTCOMES = {
    EXIT_PASS: "PASS",
    EXIT_MISSED: "TARGET MISSED",
    EXIT_UNMEASURED: "NOT MEASURED",
}
BACKENDS = ("cublas", "torch")
REFERENCE_RATIO_MIN = 0.95
DUTY_MIN = {"cublas": 0.97}  # torch's duty is reported without a target
DEFAULT_PEAK_BF16 = 989.0

# validator.trace's rule for samples under load (kept equal by a test).
LOAD_UTILIZATION_MIN_PCT = 90
LOW_PERCENTILE = 5.0

# Checks whose non-PASS findings are not counted against a machine with exactly one
# GPU, and why. state.fabric is not here: the single-GPU policy below settles it with
# a policy key. nvlink.links has no policy key: the SKU row fixes the NVLinks an
# H100/H200 SXM GPU must have up (18), and a lone GPU (a VM given one GPU of an HGX
# board) has no peer at the other end of them.
SINGLE_GPU_NOT_COUNTED = {
    "nvlink.links": "one GPU: no peer GPU to link to (no policy key relaxes the SKU's "
    "NVLink count)",
}

SINGLE_GPU_POLICY = """\
# gpuready policy for a machine with exactly one GPU, written by bench/gpu_check.sh.
#
# Why this is legitimate: Fabric Manager programs the NVSwitches that carry NVLink
# traffic between the GPUs of one HGX board. A machine with one GPU (typically a VM
# given one H100/H200 of such a board) has no second GPU to reach: nothing in it uses
# the fabric, the guest cannot see the NVSwitches, and on a VM it is the host that
# runs Fabric Manager. Left to its defaults, gpuready would require fabric
# registration from the SKU row (H100/H200 SXM ship on NVSwitch boards) whenever the
# PCI NVSwitch count is not measured, and fail a healthy machine for a topology it
# does not have. Only this one rule changes; every other rule and threshold keeps
# its default. An 8-GPU board is certified without this file.
require_fabric_manager: false
"""


@dataclass(frozen=True)
class ModelTarget:
    """The dense bf16 peak of a GPU model and the share of it a burn must reach."""

    model: str
    label: str
    peak_tflops: float
    min_ratio: float


MODEL_TARGETS = {
    "h100-sxm": ModelTarget("h100-sxm", "H100 SXM", 989.0, 0.70),
    "h200-sxm": ModelTarget("h200-sxm", "H200 SXM", 989.0, 0.75),
}
_OTHER_FORMS = re.compile(r"\b(NVL|PCIE)\b")


def model_of(name: str) -> str | None:
    """The model id (a key of MODEL_TARGETS) of an nvidia-smi / NVML product name, or None.

    "NVIDIA H100 80GB HBM3" (the SXM5 board) and "NVIDIA H100 SXM5 ..." are H100 SXM;
    "NVIDIA H200" is H200 SXM. NVL and PCIe cards, and GH200 superchips, are other
    models with other peaks: None.
    """
    text = name.upper()
    if _OTHER_FORMS.search(text):
        return None
    if re.search(r"\bH200\b", text):
        return "h200-sxm"
    if re.search(r"\bH100\b", text) and ("HBM3" in text or "SXM" in text):
        return "h100-sxm"
    return None


def target_for(name: str | None) -> ModelTarget | None:
    """The peak target for a GPU named ``name``; None for an unknown model."""
    model = model_of(name) if name else None
    return MODEL_TARGETS.get(model) if model else None


def write_policy(path: Path) -> None:
    """Write the single-GPU policy file."""
    path.write_text(SINGLE_GPU_POLICY, encoding="utf-8")


# ------------------------------------------------------------------ reading


def num(value: object) -> float | None:
    """A finite number, or None (bools, Unavailable objects and strings are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def why(value: object) -> str:
    """Why a value is missing, in words."""
    if isinstance(value, dict) and "unavailable" in value:
        detail = value.get("detail")
        return f"{value['unavailable']}" + (f": {detail}" if detail else "")
    if value is None:
        return "absent"
    return f"not a number: {value!r}"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile by linear interpolation (validator.trace.percentile)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * min(100.0, max(0.0, q)) / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def bus_key(value: object) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI bus id such as 00000000:19:00.0, or None."""
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"\s*(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.\d\s*", value)
    if match is None:
        return None
    domain, bus, device = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16)


@dataclass
class Step:
    """One step of the shell script, as steps.tsv and its raw files record it."""

    name: str
    status: str = "absent"  # ran | skipped | absent (the script never reached it)
    rc: int | None = None
    seconds: float | None = None
    timeout_s: float | None = None
    note: str = ""
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """Ran and exited 0."""
        return self.status == "ran" and self.rc == 0

    @property
    def timed_out(self) -> bool:
        """Killed by its timeout (timeout's 124, or 137 after -k)."""
        return self.status == "ran" and self.rc in (124, 137)

    def json(self) -> Any:  # noqa: ANN401 - JSON value
        """Parsed stdout, or None when it is not JSON."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None

    def record(self) -> dict[str, Any]:
        """What gpu_check.json keeps of the step (not its output: that is in the raw files)."""
        return {
            "name": self.name,
            "status": self.status,
            "rc": self.rc,
            "seconds": self.seconds,
            "timeout_s": self.timeout_s,
            "timed_out": self.timed_out,
            "note": self.note,
        }


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def read_steps(out: Path) -> dict[str, Step]:
    """The steps recorded in ``out``/steps.tsv, with their raw outputs."""
    steps: dict[str, Step] = {}
    for line in _read(out / "steps.tsv").splitlines():
        parts = line.split("\t")
        if len(parts) < 6 or parts[0] == "name":
            continue
        name, status, rc, start, end, limit = parts[:6]
        begin, finish = num(_float(start)), num(_float(end))
        steps[name] = Step(
            name=name,
            status=status,
            rc=int(rc) if rc.lstrip("-").isdigit() else None,
            seconds=round(finish - begin, 2) if begin is not None and finish is not None else None,
            timeout_s=num(_float(limit)),
            note="\t".join(parts[6:]),
            stdout=_read(out / f"{name}.stdout"),
            stderr=_read(out / f"{name}.stderr"),
        )
    return steps


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_settings(out: Path) -> dict[str, str]:
    """settings.tsv: the knobs the script ran with, one ``key<TAB>value`` a line."""
    settings = {}
    for line in _read(out / "settings.tsv").splitlines():
        key, _, value = line.partition("\t")
        if key:
            settings[key] = value
    return settings


def step(steps: dict[str, Step], name: str) -> Step:
    """The named step, or an absent one."""
    return steps.get(name) or Step(name=name)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ------------------------------------------------------------------ judging


@dataclass
class Check:
    """One figure against its target: pass, fail, missing, or "no target" (reported only)."""

    name: str
    subject: str
    status: str
    value: Any = None
    target: str = ""
    detail: str = ""


@dataclass
class Judgement:
    """Everything found so far."""

    checks: list[Check] = field(default_factory=list)

    def add(self, check: Check) -> Check:
        """Record one check."""
        self.checks.append(check)
        return check

    def at_least(
        self,
        name: str,
        subject: str,
        value: float | None,
        minimum: float | None,
        *,
        missing: str = "",
        no_target: str = "",
    ) -> Check:
        """``value >= minimum``; missing when there is no value, "no target" without a minimum."""
        if value is None:
            return self.add(Check(name, subject, "missing", None, _target(minimum), missing))
        if minimum is None:
            return self.add(Check(name, subject, "no target", round(value, 4), "", no_target))
        status = "pass" if value >= minimum else "fail"
        return self.add(Check(name, subject, status, round(value, 4), _target(minimum)))

    def missing(self, name: str, subject: str, detail: str) -> Check:
        """Something that could not be measured."""
        return self.add(Check(name, subject, "missing", None, "", detail))

    def exit_code(self) -> int:
        """2 when anything is missing, else 1 when a target was missed, else 0."""
        if any(check.status == "missing" for check in self.checks):
            return EXIT_UNMEASURED
        if any(check.status == "fail" for check in self.checks):
            return EXIT_MISSED
        return EXIT_PASS


def _target(minimum: float | None) -> str:
    return f">= {minimum:g}" if minimum is not None else ""


def machine_facts(steps: dict[str, Step], judgement: Judgement) -> dict[str, Any]:
    """nvidia-smi, the driver, torch, pynvml and whether gpuready imports."""
    listing = step(steps, "nvidia-smi-L")
    lines = [line.rstrip() for line in listing.stdout.splitlines() if line.strip()]
    indexes = [int(m.group(1)) for m in (re.match(r"GPU (\d+):", ln) for ln in lines) if m]
    names = [ln.strip() for ln in step(steps, "nvidia-smi-name").stdout.splitlines() if ln.strip()]
    info_rows = [
        [cell.strip() for cell in line.split(",")]
        for line in step(steps, "nvidia-smi-info").stdout.splitlines()
        if line.strip()
    ]
    drivers = sorted({row[2] for row in info_rows if len(row) > 2 and row[2]})
    if not indexes:
        judgement.missing(
            "gpus",
            "machine",
            f"nvidia-smi -L listed no GPU (step {listing.status}, rc {listing.rc}): "
            f"{_last_line(listing.stderr or listing.stdout) or 'no output'}",
        )
    validator = step(steps, "import-validator")
    validator_import = {
        "ok": validator.ok,
        "command": validator.note,
        "error": "" if validator.ok else _last_line(validator.stderr) or f"rc {validator.rc}",
    }
    if not validator.ok:
        judgement.missing(
            "gpuready",
            "machine",
            f"gpuready cannot run here ({validator.note or 'import check'}): "
            f"{validator_import['error']}; nothing can be installed on this machine",
        )
    pynvml = step(steps, "import-pynvml")
    return {
        "nvidia_smi_L": lines,
        "gpu_indexes": indexes,
        "gpu_count": len(indexes),
        "gpu_names": names,
        "gpu_info_csv": info_rows,
        "driver_version": drivers[0] if len(drivers) == 1 else (drivers or None),
        "torch": torch_facts(steps),
        "pynvml": {
            "importable": pynvml.ok,
            "detail": pynvml.stdout.strip() if pynvml.ok else _last_line(pynvml.stderr),
        },
        "validator_import": validator_import,
    }


def torch_facts(steps: dict[str, Step]) -> dict[str, Any]:
    """torch's version, or "not installed" with the import error."""
    probe = step(steps, "torch-info")
    data = probe.json() if probe.ok else None
    if isinstance(data, dict):
        return {"installed": True, "version": str(data.get("version")), **data}
    error = _last_line(probe.stderr) or f"step {probe.status}, rc {probe.rc}"
    return {"installed": False, "version": "not installed", "error": error}


def gpu_models(machine: dict[str, Any], reports: list[Any]) -> dict[int, str]:
    """GPU index -> product name: nvidia-smi's names, else the reports' facts."""
    names: dict[int, str] = {}
    for node in reports:
        for gpu in _list(_get(node, "facts", "gpus")):
            if isinstance(gpu, dict) and isinstance(gpu.get("name"), str) and "index" in gpu:
                names.setdefault(int(gpu["index"]), gpu["name"])
    indexes = machine["gpu_indexes"] or sorted(names)
    for position, name in enumerate(machine["gpu_names"]):
        if position < len(indexes):
            names[indexes[position]] = name
    return names


def _get(data: Any, *keys: str) -> Any:  # noqa: ANN401 - JSON
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def reference_figures(
    steps: dict[str, Step], machine: dict[str, Any], judgement: Judgement
) -> dict[str, Any]:
    """The torch reference per GPU; a missing reference is missing for every ratio to it."""
    probe = step(steps, "reference")
    data = probe.json()
    result: dict[str, Any] = {"step_rc": probe.rc, "status": probe.status, "gpus": []}
    if not machine["torch"]["installed"]:
        result["error"] = "torch not installed: no reference"
        judgement.missing("reference", "torch", "torch not installed: the reference not measured")
        return result
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        error = (data or {}).get("error") if isinstance(data, dict) else None
        result["error"] = error or (
            f"no reference JSON (step {probe.status}, rc {probe.rc}"
            f"{', timed out' if probe.timed_out else ''}): {_last_line(probe.stderr)}"
        )
        judgement.missing("reference", "torch", result["error"])
        return result
    result.update({k: v for k, v in data.items() if k != "gpus"})
    for gpu in data["gpus"]:
        if not isinstance(gpu, dict):
            continue
        entry = {k: v for k, v in gpu.items() if k != "tflops_windows"}
        result["gpus"].append(entry)
        if num(gpu.get("median_tflops")) is None:
            judgement.missing(
                "reference_tflops", f"gpu{gpu.get('index')}", str(gpu.get("error") or "no windows")
            )
    seen = {gpu.get("index") for gpu in result["gpus"]}
    for index in machine["gpu_indexes"]:
        if index not in seen:
            judgement.missing("reference_tflops", f"gpu{index}", "the reference did not run on it")
    return result


def _reference_for(gpu: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any] | None:
    key = bus_key(gpu.get("pci_bus_id"))
    gpus = [g for g in reference.get("gpus", []) if isinstance(g, dict)]
    if key is not None:
        for candidate in gpus:
            if bus_key(candidate.get("pci_bus_id")) == key:
                return candidate
    for candidate in gpus:
        if candidate.get("index") == gpu.get("index"):
            return candidate
    return None


def under_load(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """The samples validator.trace.under_load keeps: in the load window, busy, not idle."""
    start, end = num(gpu.get("load_start_s")), num(gpu.get("load_end_s"))
    if start is None or end is None or end < start:
        return []
    kept = []
    for sample in _list(gpu.get("samples")):
        t = num(_get(sample, "t_s"))
        if t is None or not start <= t <= end:
            continue
        utilization = sample.get("utilization_pct")
        if num(utilization) is not None and utilization < LOAD_UTILIZATION_MIN_PCT:
            continue
        reasons = sample.get("clock_event_reasons")
        if isinstance(reasons, list) and "gpu_idle" in reasons:
            continue
        kept.append(sample)
    return kept


def _series(samples: list[dict[str, Any]], key: str) -> list[float]:
    return [v for v in (num(s.get(key)) for s in samples) if v is not None]


def telemetry(gpu: dict[str, Any], facts_gpu: dict[str, Any]) -> dict[str, Any]:
    """Power, clocks, temperatures and clock-event reasons of one GPU's burn."""
    samples = [s for s in _list(gpu.get("samples")) if isinstance(s, dict)]
    loaded = under_load(gpu)
    power = _series(loaded, "power_w")
    limit = num(facts_gpu.get("power_limit_enforced_w"))
    median_power = statistics.median(power) if power else None
    reasons: dict[str, int] = {}
    for sample in loaded:
        for reason in _list(sample.get("clock_event_reasons")):
            reasons[str(reason)] = reasons.get(str(reason), 0) + 1
    seen = sorted({str(r) for s in samples for r in _list(s.get("clock_event_reasons"))})
    temps = _series(samples, "temperature_gpu_c")
    mem_temps = _series(samples, "temperature_memory_c")
    sm = _series(loaded, "sm_clock_mhz")
    utilization = _series(loaded, "utilization_pct")
    return {
        "samples": len(samples),
        "samples_under_load": len(loaded),
        "median_power_w": _round(median_power, 1),
        "peak_power_w": _round(max(power) if power else None, 1),
        "power_limit_w": limit,
        "median_power_to_limit": _round(
            median_power / limit if median_power is not None and limit else None, 3
        ),
        "p5_sm_clock_mhz": _round(percentile(sm, LOW_PERCENTILE), 0),
        "median_sm_clock_mhz": _round(statistics.median(sm) if sm else None, 0),
        "max_sm_clock_mhz": num(facts_gpu.get("sm_clock_max_mhz")),
        "max_temperature_gpu_c": _round(max(temps) if temps else None, 1),
        "max_temperature_memory_c": _round(max(mem_temps) if mem_temps else None, 1),
        "median_utilization_pct": _round(
            statistics.median(utilization) if utilization else None, 0
        ),
        "reasons_under_load": reasons,
        "reasons_seen": seen,
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _burn_gpu(
    backend: str,
    gpu: dict[str, Any],
    facts_gpu: dict[str, Any],
    reference: dict[str, Any],
    names: dict[int, str],
    peak_default: float,
    judgement: Judgement,
) -> dict[str, Any]:
    index = gpu.get("index")
    subject = f"{backend} gpu{index}"
    tflops = num(gpu.get("tflops"))
    name = names.get(index) if isinstance(index, int) else None
    target = target_for(name)
    peak = target.peak_tflops if target else peak_default
    ref = _reference_for(gpu, reference)
    ref_median = num(ref.get("median_tflops")) if ref else None
    duty = num(gpu.get("duty"))
    if tflops is None:
        judgement.missing("burn_tflops", subject, f"no TFLOPS: {why(gpu.get('tflops'))}")
    vs_ref = tflops / ref_median if tflops is not None and ref_median else None
    vs_peak = tflops / peak if tflops is not None else None
    judgement.at_least(
        "vs_reference",
        subject,
        vs_ref,
        REFERENCE_RATIO_MIN,
        missing="burn or reference TFLOPS not measured",
    )
    judgement.at_least(
        "vs_peak",
        subject,
        vs_peak,
        target.min_ratio if target else None,
        missing="burn TFLOPS not measured",
        no_target=f"unknown model {name or '(no name)'!r}: ratio to {peak:g} TFLOPS, no target",
    )
    if backend in DUTY_MIN or duty is not None:
        judgement.at_least(
            "duty",
            subject,
            duty,
            DUTY_MIN.get(backend),
            missing=f"duty not measured: {why(gpu.get('duty'))}",
            no_target=f"no duty target for {backend}",
        )
    _correctness(subject, gpu, judgement)
    tele = telemetry(gpu, facts_gpu)
    for key, what in (
        ("median_power_w", "power"),
        ("p5_sm_clock_mhz", "SM clock"),
        ("max_temperature_gpu_c", "temperature"),
    ):
        if tele[key] is None:
            judgement.missing(
                f"telemetry_{key}",
                subject,
                f"no {what} sampled under load ({tele['samples']} "
                f"samples, {tele['samples_under_load']} under load)",
            )
    return {
        "index": index,
        "name": name,
        "pci_bus_id": gpu.get("pci_bus_id"),
        "status": gpu.get("status"),
        "detail": gpu.get("detail"),
        "tflops": tflops,
        "tflops_windows": len(_list(gpu.get("tflops_windows"))),
        "reference_median_tflops": ref_median,
        "vs_reference": _round(vs_ref, 4),
        "peak_tflops": peak,
        "model": target.model if target else None,
        "vs_peak": _round(vs_peak, 4),
        "peak_target": target.min_ratio if target else None,
        "duty": duty if duty is not None else why(gpu.get("duty")),
        "iterations": gpu.get("iterations"),
        "mismatched_elements": gpu.get("mismatched_elements"),
        "mismatched_iterations": gpu.get("mismatched_iterations"),
        "nonfinite_elements": gpu.get("nonfinite_elements"),
        "reference_ok": gpu.get("reference_ok"),
        "reference_max_error": gpu.get("reference_max_error"),
        "digest": gpu.get("digest"),
        "load_start_s": gpu.get("load_start_s"),
        "load_end_s": gpu.get("load_end_s"),
        "telemetry": tele,
    }


def _correctness(subject: str, gpu: dict[str, Any], judgement: Judgement) -> None:
    status = gpu.get("status")
    judgement.add(
        Check(
            "completed",
            subject,
            "pass" if status == "completed" else "fail",
            status,
            "completed",
            str(gpu.get("detail") or ""),
        )
    )
    for key in ("mismatched_elements", "nonfinite_elements"):
        value = num(gpu.get(key))
        if value is None:
            judgement.missing(key, subject, why(gpu.get(key)))
        else:
            judgement.add(Check(key, subject, "pass" if value == 0 else "fail", int(value), "== 0"))
    ok = gpu.get("reference_ok")
    if isinstance(ok, bool):
        judgement.add(Check("reference_ok", subject, "pass" if ok else "fail", ok, "true"))
    else:
        judgement.missing("reference_ok", subject, why(ok))


def findings_of(node: dict[str, Any], single_gpu: bool) -> list[dict[str, Any]]:
    """Every non-PASS finding, each marked blocking / counted, with why when not counted."""
    listed = []
    for finding in _list(node.get("findings")):
        if not isinstance(finding, dict) or finding.get("severity") == "PASS":
            continue
        severity = finding.get("severity")
        blocking = severity == "FAIL" or (severity == "UNKNOWN" and finding.get("required", True))
        exempt = SINGLE_GPU_NOT_COUNTED.get(str(finding.get("check"))) if single_gpu else None
        listed.append(
            {
                "check": finding.get("check"),
                "severity": severity,
                "gpu_index": finding.get("gpu_index"),
                "message": finding.get("message"),
                "required": finding.get("required"),
                "blocking": blocking,
                "counted": blocking and exempt is None,
                "not_counted_because": exempt if blocking and exempt else None,
            }
        )
    return listed


def _on(gpu_index: object) -> str:
    return "" if gpu_index is None else f" gpu{gpu_index}"


def backend_figures(
    backend: str,
    steps: dict[str, Step],
    machine: dict[str, Any],
    reference: dict[str, Any],
    peak_default: float,
    judgement: Judgement,
) -> dict[str, Any]:
    """One certify run: its burn per GPU, its findings and its verdict."""
    probe = step(steps, f"certify-{backend}")
    result: dict[str, Any] = {"step": probe.record()}
    if probe.status == "skipped":
        result["skipped"] = probe.note
        judgement.missing("burn", backend, f"skipped: {probe.note}")
        return result
    report = probe.json()
    node = _get(report, "nodes")
    node = node[0] if isinstance(node, list) and node and isinstance(node[0], dict) else None
    if node is None:
        result["error"] = (
            f"no report (step {probe.status}, rc {probe.rc}"
            f"{', timed out' if probe.timed_out else ''}): "
            f"{_last_line(probe.stderr) or 'no output'}"
        )
        judgement.missing("report", backend, result["error"])
        return result
    if probe.rc not in (0, 1):
        judgement.missing("certify_exit", backend, f"certify exited {probe.rc}: could not run")
    single = machine["gpu_count"] == 1 or (
        machine["gpu_count"] == 0 and len(_list(_get(node, "facts", "gpus"))) == 1
    )
    findings = findings_of(node, single)
    result.update(
        {
            "verdict": node.get("verdict"),
            "summary": node.get("summary"),
            "sku": node.get("sku"),
            "policy_digest": node.get("policy_digest"),
            "driver_version": _get(node, "facts", "driver_version"),
            "findings_not_pass": findings,
        }
    )
    counted = [f for f in findings if f["counted"]]
    if node.get("verdict") == "UNKNOWN":
        judgement.missing("verdict", backend, f"nothing could be judged: {node.get('summary')}")
    judgement.add(
        Check(
            "findings",
            backend,
            "pass" if not counted else "fail",
            len(counted),
            "no FAIL / required UNKNOWN finding",
            "; ".join(f"{f['check']}{_on(f['gpu_index'])}: {f['severity']}" for f in counted),
        )
    )
    burn = _get(node, "facts", "burn")
    if not isinstance(burn, dict) or burn.get("error"):
        detail = burn.get("error") if isinstance(burn, dict) else "no burn in the report"
        result["burn_error"] = detail
        judgement.missing("burn", backend, str(detail))
        return result
    result["burn"] = {k: v for k, v in burn.items() if k != "gpus"}
    if burn.get("backend") != backend:
        judgement.missing("burn", backend, f"the burn ran on {burn.get('backend')!r}")
    facts_gpus = {
        g.get("index"): g for g in _list(_get(node, "facts", "gpus")) if isinstance(g, dict)
    }
    names = gpu_models(machine, [node])
    burned = [g for g in _list(burn.get("gpus")) if isinstance(g, dict)]
    result["gpus"] = [
        _burn_gpu(
            backend,
            g,
            facts_gpus.get(g.get("index"), {}),
            reference,
            names,
            peak_default,
            judgement,
        )
        for g in burned
    ]
    burned_indexes = {g.get("index") for g in burned}
    # Every GPU nvidia-smi lists and every GPU the report's facts hold must have burned.
    expected = set(machine["gpu_indexes"]) | {i for i in facts_gpus if isinstance(i, int)}
    for index in sorted(expected):
        if index not in burned_indexes:
            judgement.missing("burn_tflops", f"{backend} gpu{index}", "GPU absent from the burn")
    if not burned:
        judgement.missing("burn_tflops", backend, "the burn has no GPU")
    return result


# ------------------------------------------------------------------ output


def summarize(out: Path) -> tuple[dict[str, Any], str, int]:
    """Judge what the script left in ``out``: (the JSON document, the text, the exit code)."""
    steps = read_steps(out)
    settings = read_settings(out)
    peak_default = num(_float(settings.get("peak_bf16", ""))) or DEFAULT_PEAK_BF16
    judgement = Judgement()
    machine = machine_facts(steps, judgement)
    reference = reference_figures(steps, machine, judgement)
    backends = {
        backend: backend_figures(backend, steps, machine, reference, peak_default, judgement)
        for backend in BACKENDS
    }
    names = gpu_models(machine, [])
    for gpu in reference.get("gpus", []):
        target = target_for(names.get(gpu.get("index")) or gpu.get("name"))
        peak = target.peak_tflops if target else peak_default
        median = num(gpu.get("median_tflops"))
        gpu["vs_peak"] = round(median / peak, 4) if median is not None else None
    code = judgement.exit_code()
    started = num(_float(settings.get("started_epoch", "")))
    models = sorted({model_of(n) or f"unknown ({n})" for n in machine["gpu_names"]})
    document = {
        "schema": 1,
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "exit_code": code,
        "outcome": OUTCOMES[code],
        "settings": settings,
        "targets": {
            "burn_vs_reference_min": REFERENCE_RATIO_MIN,
            "peak_ratio_min": {m: asdict(t) for m, t in MODEL_TARGETS.items()},
            "duty_min": DUTY_MIN,
            "models_here": models,
            "single_gpu_not_counted": SINGLE_GPU_NOT_COUNTED if machine["gpu_count"] == 1 else {},
        },
        "policy": settings.get("policy") or None,
        "machine": machine,
        "reference": reference,
        "burn": backends,
        "checks": [asdict(c) for c in judgement.checks],
        "missing": [_line(c) for c in judgement.checks if c.status == "missing"],
        "missed": [_line(c) for c in judgement.checks if c.status == "fail"],
        "steps": [s.record() for s in steps.values()],
        "total_seconds": round(time.time() - started, 1) if started else None,
    }
    return document, render(document), code


def _line(check: Check) -> str:
    value = "" if check.value is None else f" {check.value}"
    target = f" (target {check.target})" if check.target else ""
    detail = f": {check.detail}" if check.detail else ""
    return f"{check.subject} {check.name}{value}{target}{detail}"


def _fmt(value: object, spec: str = ".1f", missing: str = "not measured") -> str:
    number = num(value)
    return format(number, spec) if number is not None else missing


def _status(checks: list[dict[str, Any]], name: str, subject: str) -> str:
    for check in checks:
        if check["name"] == name and check["subject"] == subject:
            status = str(check["status"])
            word = {"pass": "ok", "fail": "MISSED", "missing": "NOT MEASURED"}.get(status, status)
            return word + (f" {check['target']}" if check["target"] else "")
    return "-"


def render(doc: dict[str, Any]) -> str:
    """The human-readable summary."""
    machine, lines = doc["machine"], []
    lines.append(f"gpuready GPU check: {doc['outcome']} (exit {doc['exit_code']})")
    torch, pynvml, validator = machine["torch"], machine["pynvml"], machine["validator_import"]
    names = ", ".join(sorted(set(machine["gpu_names"]))) or "no name read"
    lines.append(
        f"machine: {machine['gpu_count']} GPU(s) {names}; "
        f"driver {machine['driver_version'] or 'not read'}; "
        + (f"torch {torch['version']}" if torch["installed"] else "torch not installed")
        + ("; pynvml importable" if pynvml["importable"] else "; pynvml NOT importable")
        + ("; gpuready imports" if validator["ok"] else "; gpuready DOES NOT IMPORT")
    )
    if not torch["installed"]:
        lines.append(f"  torch not installed: {torch['error']}")
    if not pynvml["importable"]:
        lines.append(f"  pynvml: {pynvml['detail']}")
    if not validator["ok"]:
        lines.append(f"  gpuready import ({validator['command']}): {validator['error']}")
    for model in doc["targets"]["models_here"]:
        target = MODEL_TARGETS.get(model)
        lines.append(
            f"  {model}: burn >= {target.min_ratio:g} of {target.peak_tflops:g} TFLOPS dense bf16"
            if target
            else f"  {model}: unknown model, ratio to peak reported without a target"
        )
    if doc["policy"]:
        lines.append(
            f"  single GPU: certified with policy {doc['policy']} (require_fabric_manager: false)"
        )
    lines += _render_reference(doc["reference"])
    for backend, figures in doc["burn"].items():
        lines += _render_backend(backend, figures, doc["checks"])
    for title, key in (("NOT MEASURED", "missing"), ("MISSED", "missed")):
        if doc[key]:
            lines.append(f"{title}:")
            lines += [f"  {item}" for item in doc[key]]
    lines.append(
        "steps: "
        + ", ".join(
            f"{s['name']} {s['status'] if s['status'] != 'ran' else 'rc ' + str(s['rc'])}"
            f"{' ' + format(s['seconds'], '.1f') + 's' if s['seconds'] is not None else ''}"
            for s in doc["steps"]
        )
        + (f"; total {doc['total_seconds']:.0f}s" if doc["total_seconds"] else "")
    )
    return "\n".join(lines) + "\n"


def _render_reference(reference: dict[str, Any]) -> list[str]:
    if reference.get("error"):
        return [f"torch reference: NOT MEASURED: {reference['error']}"]
    lines = [
        f"torch reference (torch.matmul {reference.get('dtype')} n={reference.get('size')}, "
        f"{reference.get('warmup_s')} s warm-up, {reference.get('seconds')} s of "
        f"{reference.get('window_s')} s windows, every GPU at once; torch "
        f"{reference.get('torch_version')}):"
    ]
    for gpu in reference.get("gpus", []):
        if gpu.get("error"):
            lines.append(f"  gpu{gpu.get('index')}: NOT MEASURED: {gpu['error']}")
            continue
        lines.append(
            f"  gpu{gpu.get('index')}: median {_fmt(gpu.get('median_tflops'))} "
            f"p10 {_fmt(gpu.get('p10_tflops'))} p90 {_fmt(gpu.get('p90_tflops'))} "
            f"best {_fmt(gpu.get('best_tflops'))} TFLOPS ({gpu.get('windows')} windows, "
            f"{_fmt(gpu.get('vs_peak'), '.3f')} of peak)"
        )
    return lines


def _render_backend(
    backend: str, figures: dict[str, Any], checks: list[dict[str, Any]]
) -> list[str]:
    if "skipped" in figures:
        return [f"{backend} burn: SKIPPED: {figures['skipped']}"]
    if "error" in figures:
        return [f"{backend} burn: NOT MEASURED: {figures['error']}"]
    rc = figures["step"]["rc"]
    lines = [
        f"{backend} burn (certify exit {rc}, verdict {figures.get('verdict')}): "
        f"{figures.get('summary')}"
    ]
    if figures.get("burn_error"):
        lines.append(f"  burn NOT MEASURED: {figures['burn_error']}")
    for gpu in figures.get("gpus", []):
        subject = f"{backend} gpu{gpu['index']}"
        tele = gpu["telemetry"]
        lines.append(
            f"  gpu{gpu['index']}: {_fmt(gpu['tflops'])} TFLOPS; vs reference "
            f"{_fmt(gpu['vs_reference'], '.3f')} [{_status(checks, 'vs_reference', subject)}]; "
            f"vs {gpu['peak_tflops']:g} peak {_fmt(gpu['vs_peak'], '.3f')} "
            f"[{_status(checks, 'vs_peak', subject)}]; "
            f"duty {_fmt(gpu['duty'], '.3f', str(gpu['duty']))} "
            f"[{_status(checks, 'duty', subject)}]"
        )
        lines.append(
            f"    status {gpu['status']}; mismatched {gpu['mismatched_elements']}; nonfinite "
            f"{gpu['nonfinite_elements']}; reference_ok {gpu['reference_ok']}; load "
            f"{_fmt(gpu['load_start_s'])}-{_fmt(gpu['load_end_s'])} s"
        )
        limit = tele["power_limit_w"]
        reasons = ", ".join(f"{k} x{v}" for k, v in sorted(tele["reasons_under_load"].items()))
        lines.append(
            f"    under load ({tele['samples_under_load']} of {tele['samples']} samples): median "
            f"{_fmt(tele['median_power_w'], '.0f')} W of {_fmt(limit, '.0f', 'unknown')} W limit "
            f"({_fmt(tele['median_power_to_limit'], '.2f')}); p5 SM clock "
            f"{_fmt(tele['p5_sm_clock_mhz'], '.0f')} MHz "
            f"(max {_fmt(tele['max_sm_clock_mhz'], '.0f', 'unknown')}); "
            f"max {_fmt(tele['max_temperature_gpu_c'], '.0f')} C; reasons {reasons or 'none'}"
        )
    findings = figures.get("findings_not_pass", [])
    lines.append(f"  non-PASS findings: {len(findings) or 'none'}")
    for finding in findings:
        mark = (
            "counted"
            if finding["counted"]
            else (
                f"NOT COUNTED: {finding['not_counted_because']}"
                if finding["not_counted_because"]
                else "not blocking"
            )
        )
        gpu = _on(finding["gpu_index"])
        lines.append(
            f"    {finding['severity']} {finding['check']}{gpu} [{mark}]: {finding['message']}"
        )
    return lines


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    summary = commands.add_parser("summarize", help="judge OUT_DIR, write gpu_check.json")
    summary.add_argument("out", type=Path)
    policy = commands.add_parser("write-policy", help="write the single-GPU policy file")
    policy.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    if args.command == "write-policy":
        write_policy(args.path)
        return 0
    try:
        document, text, code = summarize(args.out)
    except Exception as exc:  # noqa: BLE001 - a summary bug must still leave a verdict behind
        document = {
            "exit_code": EXIT_UNMEASURED,
            "outcome": OUTCOMES[EXIT_UNMEASURED],
            "error": f"the summary failed: {type(exc).__name__}: {exc}",
        }
        text, code = f"gpuready GPU check: NOT MEASURED: {document['error']}\n", EXIT_UNMEASURED
    _write_atomic(args.out / "gpu_check.json", json.dumps(document, indent=2, default=str) + "\n")
    _write_atomic(args.out / "summary.txt", text)
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
