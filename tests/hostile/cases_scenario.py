"""``--simulate FILE``: scenario files that are huge, deep, mistyped, misspelt or implausible.

The base file extends the healthy H100 node and certifies under the no-burn policy
(exit 0); each change is refused (2) or, where the file is valid but the node it
describes is not plausible, never certified (1 or 2).
"""

from __future__ import annotations

import json

from tests.hostile.cases import Case, case
from tests.hostile.data_files import (
    combine,
    gpu,
    mkdir,
    nested_json,
    policy,
    scenario,
    write,
)

CERTIFY = (
    "certify", "--simulate", "{tmp}/scenario.json", "--burn", "0",
    "--policy", "{tmp}/policy.yml", "--db", "{tmp}/history.db",
)  # fmt: skip
BURNED = (
    "certify", "--simulate", "{tmp}/scenario.json", "--burn", "2s",
    "--policy", "{tmp}/policy.yml", "--db", "{tmp}/history.db",
)  # fmt: skip
BUILTIN = ("certify", "--burn", "0", "--policy", "{tmp}/policy.yml", "--db", "{tmp}/history.db")
NEVER_CERTIFIED = frozenset({1, 2})
A100 = "healthy-8x-a100-80gb"
NO_BURN = "require_burn: false\n"

XID_79_DMESG = (
    "[86000.123456] NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def _bad(label: str, overrides: dict[str, object], err: str | tuple[str, ...]) -> Case:
    return case(f"scenario-{label}", *CERTIFY, exit=2, err=err, setup=scenario(overrides))


def _implausible(label: str, **values: object) -> Case:
    """GPU 3 reports an impossible value (set over its own overrides, which win over nvml.gpu)."""
    return case(
        f"scenario-implausible-{label}",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=scenario({"nvml": {"gpu_overrides": {"3": values}}}),
    )


def _beyond(
    label: str, overrides: dict[str, object], out: str = "inventory.figures_plausible"
) -> Case:
    """A figure above what the SKU can do: not certified, the figure named."""
    return case(f"scenario-beyond-{label}", *BURNED, exit=1, out=out, setup=scenario(overrides))


def _raw(label: str, text: str | bytes, err: str | tuple[str, ...], **options: object) -> Case:
    return case(f"scenario-{label}", *CERTIFY, exit=2, err=err, setup=scenario(raw=text), **options)  # type: ignore[arg-type]


def _builtin(name: str, expected: int, pin: str = "") -> Case:
    return case(
        f"scenario-builtin-{name}",
        *BUILTIN,
        "--simulate",
        name,
        exit=expected,
        setup=policy(NO_BURN + pin),
    )


CASES: tuple[Case, ...] = (
    case("scenario-base-certifies", *CERTIFY, exit=0, setup=scenario({})),
    # Sizes: a count no node has is refused before anything is simulated.
    case(
        "scenario-gpu-count-20000",
        *CERTIFY,
        exit=2,
        err="gpu_count",
        setup=scenario({"nvml": {"gpu_count": 20000}}),
        child=True,
        timeout_s=60,
    ),
    case(
        "scenario-pci-gpus-20000",
        *CERTIFY,
        exit=2,
        err="gpus",
        setup=scenario({"pci": {"gpus": 20000}}),
        child=True,
        timeout_s=60,
    ),
    _raw("nested-200k-deep", nested_json(200_000), "scenario.json", child=True, timeout_s=60),
    _raw(
        "twenty-megabytes",
        json.dumps(
            {"name": "big", "extends": "healthy-8x-h100-sxm", "description": "x" * 20_000_000}
        ),
        "scenario.json",
        child=True,
        timeout_s=60,
    ),
    _bad("gpu-count-negative", {"nvml": {"gpu_count": -1}}, "gpu_count"),
    _bad("gpu-count-text", {"nvml": {"gpu_count": "8"}}, "gpu_count"),
    _bad("gpu-count-fraction", {"nvml": {"gpu_count": 8.5}}, "gpu_count"),
    _bad("gpu-count-bool", {"nvml": {"gpu_count": True}}, "gpu_count"),
    case(
        "scenario-bus-ids-all-the-same",
        *CERTIFY,
        exit=NEVER_CERTIFIED,  # eight GPUs in one slot is no node
        setup=scenario({"nvml": {"pci_bus_ids": ["00000000:19:00.0"] * 8}}),
    ),
    _bad("bus-id-malformed", {"nvml": {"pci_bus_ids": ["nope"] * 8}}, "pci_bus_ids"),
    _bad("override-gpu-99", {"nvml": {"gpu_overrides": {"99": {"temperature_gpu_c": 30}}}}, "99"),
    _bad(
        "override-gpu-not-a-number",
        {"nvml": {"gpu_overrides": {"x": {"temperature_gpu_c": 30}}}},
        "gpu_overrides",
    ),
    # Unknown keys, at every level.
    _bad("unknown-top-key", {"nvml_": {}}, "nvml_"),
    _bad("unknown-host-key", {"host": {"hostnme": "x"}}, "hostnme"),
    _bad("unknown-gpu-key", gpu(temprature_gpu_c=30), "temprature_gpu_c"),
    _bad("unknown-pci-key", {"pci": {"gpu": 8}}, "gpu"),
    _bad("unknown-command-key", {"commands": {"nvidia-smi": {"rc": 0, "stdot": ""}}}, "stdot"),
    _bad("unknown-nvml-key", {"nvml": {"gpu_cnt": 8}}, "gpu_cnt"),
    # Wrong types, field by field.
    _bad("name-not-text", {"name": 5}, "name"),
    _bad("description-not-text", {"description": 5}, "description"),
    _bad("extends-unknown", {"extends": "no-such-node"}, "no-such-node"),
    _bad("extends-not-text", {"extends": 5}, "extends"),
    _bad("now-not-a-time", {"now": "yesterday"}, "now"),
    _bad("uptime-text", {"host": {"uptime_s": "long"}}, "uptime_s"),
    _bad("uptime-negative", {"host": {"uptime_s": -1}}, "uptime_s"),
    _bad("hostname-number", {"host": {"hostname": 5}}, "hostname"),
    _bad("temperature-text", gpu(temperature_gpu_c="hot"), "temperature_gpu_c"),
    _bad("memory-total-text", gpu(memory_total_mib="80GB"), "memory_total_mib"),
    _bad("persistence-text", gpu(persistence_mode="yes"), "persistence_mode"),
    _bad("clock-reasons-not-a-list", gpu(clock_event_reasons="gpu_idle"), "clock_event_reasons"),
    _bad("clock-reason-unknown", gpu(clock_event_reasons=["melting"]), "melting"),
    _bad("compute-mode-unknown", gpu(compute_mode="turbo"), "compute_mode"),
    _bad("fabric-state-unknown", gpu(fabric_state="great"), "fabric_state"),
    _bad("nvlinks-negative", gpu(nvlinks=-3), "nvlinks"),
    _bad("pci-gpus-text", {"pci": {"gpus": "eight"}}, "gpus"),
    _bad(
        "command-rc-text",
        {"commands": {"nvidia-smi": {"rc": "zero", "stdout": "", "stderr": ""}}},
        "rc",
    ),
    _bad(
        "file-content-number",
        {"files": {"/proc/driver/nvidia/version": 5}},
        "/proc/driver/nvidia/version",
    ),
    _bad("burn-not-an-object", {"burn": "fast"}, "burn"),
    _bad("passthrough-paths-text", {"passthrough": {"paths": "/"}}, "paths"),
    _bad("passthrough-relative-path", {"passthrough": {"paths": ["etc"]}}, "paths"),
    # NaN and infinity are not numbers a scenario may hold.
    _raw(
        "temperature-nan",
        '{"name": "n", "extends": "healthy-8x-h100-sxm",'
        ' "nvml": {"gpu": {"temperature_gpu_c": NaN}}}',
        "temperature_gpu_c",
    ),
    _raw(
        "power-infinite",
        '{"name": "n", "extends": "healthy-8x-h100-sxm",'
        ' "nvml": {"gpu": {"power_draw_w": Infinity}}}',
        "power_draw_w",
    ),
    _raw(
        "uptime-nan",
        '{"name": "n", "extends": "healthy-8x-h100-sxm", "host": {"uptime_s": NaN}}',
        "uptime_s",
    ),
    _raw(
        "duplicate-key",
        '{"name": "d", "extends": "healthy-8x-h100-sxm", "nvml": {"gpu_count": 8, "gpu_count": 1}}',
        "gpu_count",
    ),
    _raw("empty-file", "", "scenario.json"),
    _raw("binary-file", bytes(range(256)) * 16, "scenario.json"),
    _raw("latin1-file", b'{"name": "caf\xe9"}', "scenario.json"),
    _raw("json-array", "[1, 2, 3]", "scenario.json"),
    _raw("json-string", '"healthy-8x-h100-sxm"', "scenario.json"),
    case(
        "scenario-is-a-directory",
        "certify",
        "--simulate",
        "{tmp}/scen.d/",
        "--burn",
        "0",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="scen.d",
        setup=mkdir("scen.d"),
    ),
    # Valid files describing an implausible node: not measured, so never certified.
    _implausible("temperature-minus-273", temperature_gpu_c=-273),
    _implausible("temperature-5000", temperature_gpu_c=5000),
    _implausible("power-draw-1e9", power_draw_w=1e9),
    _implausible("power-limit-zero", power_limit_enforced_w=0),
    _implausible("memory-total-zero", memory_total_mib=0),
    _implausible("memory-used-over-total", memory_used_mib=10_000_000),
    _implausible("ecc-negative", ecc_volatile_uncorrected=-5),
    _implausible("remapped-rows-negative", remapped_rows_uncorrectable=-1),
    _implausible("pcie-gen-99", pcie_gen_max=99, pcie_gen_current=99),
    _implausible("tlimit-margin-500", tlimit_margin_c=500),
    _implausible("sm-clock-huge", sm_clock_max_mhz=99_999_999),
    case(
        "scenario-uptime-1e12-hides-xid79",
        *CERTIFY,
        exit=NEVER_CERTIFIED,  # refused as out of range, or the Xid counts
        setup=scenario(
            {
                "host": {"uptime_s": 1e12},
                "commands": {"dmesg": {"rc": 0, "stdout": XID_79_DMESG, "stderr": ""}},
            }
        ),
    ),
    case(
        "scenario-xid79-in-window",
        *CERTIFY,
        exit=1,
        setup=scenario({"commands": {"dmesg": {"rc": 0, "stdout": XID_79_DMESG, "stderr": ""}}}),
    ),
    # The built-in faulty nodes: the wrong verdict is the worst outcome.
    _builtin("healthy-8x-a100-80gb", 0),
    _builtin("driver-mismatch", 1),
    _builtin("gpu-fallen-off-bus", 1),
    _builtin("mixed-hbm-40gb-in-80gb-node", 1),
    _builtin("one-gpu-power-capped", 1),
    _builtin("one-gpu-thermal-throttling", 1),
    _builtin("row-remap-pending", 1),
    _builtin("cudnn-missing", 1),
    _builtin("nvcc-off-pin", 1, pin="nvcc_version: '12.4'\n"),
    _builtin("no-gpu-driver", 3),
    # Figures beyond what the hardware can do: never certified, and named.
    _beyond("tflops-10000", {"burn": {"tflops": 10_000.0}}),
    _beyond("tflops-a-hundredfold", {"burn": {"tflops": 72_000.0}}),  # a unit slip
    _beyond("one-gpu-tflops-2000", {"burn": {"gpu_overrides": {"5": {"tflops": 2000.0}}}}),
    # The A100 scenario synthesises its trace (the H100's replays a real one).
    _beyond("burn-power-twice-the-limit", {"extends": A100, "burn": {"power_fraction": 2.0}}),
    _beyond(
        "idle-power-draw-1500-w",
        {"nvml": {"gpu_overrides": {"3": {"power_draw_w": 1500}}}},
        out="inventory.readings_plausible",
    ),
    _beyond("h2d-5000", {"interconnect": {"h2d_gb_s": 5000.0}}),
    _beyond("hbm-tenfold", {"interconnect": {"hbm_gb_s": 28_800.0}}),
    _beyond("p2p-above-nvlink", {"interconnect": {"p2p_gb_s": 4000.0}}),
    _beyond("busbw-above-the-fabric", {"interconnect": {"all_reduce_busbw_gb_s": 9000.0}}),
    # Plausible speed while the power samples say the GPU idled: the speed is not believed.
    case(
        "scenario-burn-fast-but-idle-power",
        *BURNED,
        exit=1,
        out="burn.power",
        setup=scenario({"extends": A100, "burn": {"power_fraction": 0.1}}),
    ),
    # At the edge of physics but within it: a measurement, and the node certifies.
    case(
        "scenario-burn-just-below-peak-certifies",
        *BURNED,
        exit=0,
        setup=scenario({"burn": {"tflops": 985.0}}),
    ),
    # The telemetry CSV is streamed under its bounds (validator.limits), never read whole.
    case(
        "scenario-telemetry-csv-one-endless-line",
        *CERTIFY,
        exit=2,
        err=("t.csv", "line 1 is longer than"),
        setup=combine(
            scenario({"burn": {"telemetry_csv": "t.csv"}}), write("t.csv", "x" * (8 << 20))
        ),
        child=True,
        timeout_s=30,
    ),
)
