"""Short meanings of the common Xid codes, and which ones mean hardware trouble.

Descriptions follow NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/), as summarised in
captures/xid/XID_MEANINGS.md.
"""

from __future__ import annotations

XID_DESCRIPTIONS: dict[int, str] = {
    13: "Graphics engine exception (often an application fault)",
    31: "GPU memory page fault (MMU fault)",
    43: "GPU stopped processing (channel reset after an application fault)",
    45: "Preemptive cleanup after previous errors",
    48: "Double-bit ECC error",
    56: "Display engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal microcontroller breakpoint/warning",
    62: "Internal microcontroller halt",
    63: "Row remap / page retirement event recorded (reset the GPU to apply)",
    64: "Row remap / page retirement failure",
    65: "Video processor exception",
    68: "Video processor (NVDEC) exception",
    69: "Graphics engine class error",
    73: "NVENC2 error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    80: "Corrupted data sent to the GPU",
    81: "VGA subsystem error",
    92: "High single-bit ECC error rate",
    94: "Contained uncorrectable memory error",
    95: "Uncontained uncorrectable memory error",
    109: "Context switch timeout",
    119: "GSP RPC timeout (GSP firmware did not answer)",
    120: "GSP error",
    121: "C2C (chip-to-chip) link error",
    140: "Unrecovered ECC error",
    143: "GPU initialization failure",
    144: "NVLink SAW error",
    145: "NVLink RLW error",
    146: "NVLink TLW error",
    147: "NVLink TREX error",
    148: "NVLink NVLPW_CTRL error",
    149: "NVLink NETIR error",
    150: "NVLink MSE error",
    154: "GPU recovery action changed (informational)",
}

# Xids that indicate hardware trouble. Source: Azure azurehpc-health-checks
# azure_gpu_xid.nhc (48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120), as
# documented in shared/reference/validators.md, plus the memory-containment,
# unrecovered-ECC and NVLink5 codes of NVIDIA's catalog (94 95 140 144-150).
HARDWARE_XIDS: frozenset[int] = frozenset(
    {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
    | {94, 95, 140, 144, 145, 146, 147, 148, 149, 150}
)
