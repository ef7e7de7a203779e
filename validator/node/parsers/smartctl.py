"""smartctl's NVMe health: ``smartctl -H -A -j /dev/nvmeN`` (JSON), or the text it prints.

smartctl's exit status is a bit mask (bit 3: the drive says it is failing; bit 6: its
error log has entries), so a non-zero status still comes with a whole document: the
document is read whatever the status, and only a document without any health section
(the device could not be opened: smartctl's ``messages`` say why) is no reading.
"""

from __future__ import annotations

import json
import re
from typing import Any

from validator.limits import TOOL_OUTPUT_BYTES
from validator.model import SmartHealth
from validator.node.parsers.base import ParseError


class SmartUnreadable(ParseError):
    """smartctl answered, but with no health reading (no device, no permission)."""


def parse_smartctl(text: str) -> SmartHealth:
    """A drive's health from smartctl's JSON (``-j``) or its printed text.

    Raises:
        SmartUnreadable: a smartctl document with no health section; its message is
            smartctl's own error line.
        ParseError: text that is neither.
    """
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(f"smartctl output is over {TOOL_OUTPUT_BYTES} bytes")
    if text.lstrip().startswith("{"):
        return parse_smartctl_json(text)
    return parse_smartctl_text(text)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_smartctl_json(text: str) -> SmartHealth:
    """A drive's health from ``smartctl -j`` (json_format_version 1).

    Raises:
        SmartUnreadable: no ``smart_status`` and no NVMe health log (smartctl's
            message says why: the device could not be opened).
        ParseError: not a smartctl JSON document.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"smartctl output is not JSON: {exc}") from None
    except RecursionError:  # nested deeper than the parser's stack
        raise ParseError("smartctl output is nested too deep to be smartctl's") from None
    if not isinstance(data, dict) or not isinstance(data.get("smartctl"), dict):
        raise ParseError("not a smartctl JSON document: no 'smartctl' object")
    log = data.get("nvme_smart_health_information_log")
    status = data.get("smart_status")
    if not isinstance(log, dict) and not isinstance(status, dict):
        raise SmartUnreadable(_said(data["smartctl"]))
    log = log if isinstance(log, dict) else {}
    passed = status.get("passed") if isinstance(status, dict) else None
    device = data.get("device")
    return SmartHealth(
        passed=passed if isinstance(passed, bool) else None,
        critical_warning=_int(log.get("critical_warning")),
        percentage_used=_int(log.get("percentage_used")),
        media_errors=_int(log.get("media_errors")),
        available_spare=_int(log.get("available_spare")),
        available_spare_threshold=_int(log.get("available_spare_threshold")),
        temperature_c=_int(log.get("temperature")),
        power_on_hours=_int(log.get("power_on_hours")),
        model=str(data.get("model_name") or ""),
        serial=str(data.get("serial_number") or ""),
        device=str(device.get("name") or "") if isinstance(device, dict) else "",
    )


def _said(smartctl: dict[str, Any]) -> str:
    """smartctl's first error message, or its exit status."""
    messages = smartctl.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and isinstance(message.get("string"), str):
                return " ".join(message["string"].split())[:300]
    return f"smartctl exited {smartctl.get('exit_status', '?')} with no health reading"


_OVERALL = re.compile(r"SMART overall-health self-assessment test result:\s*(\S+)")
_FIELDS = {
    "Critical Warning": "critical_warning",
    "Temperature": "temperature_c",
    "Available Spare": "available_spare",
    "Available Spare Threshold": "available_spare_threshold",
    "Percentage Used": "percentage_used",
    "Power On Hours": "power_on_hours",
    "Media and Data Integrity Errors": "media_errors",
}
_NUMBER = re.compile(r"(0x[0-9a-fA-F]+|[\d,]+)")


def parse_smartctl_text(text: str) -> SmartHealth:
    """A drive's health from smartctl's printed ``-H`` / ``-A`` (or ``-a``) text.

    Raises:
        ParseError: neither the overall-health line nor the NVMe health block is there.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        key = _FIELDS.get(name.strip())
        match = _NUMBER.match(rest.strip()) if colon else None
        if key is not None and match is not None:
            number = match.group(1)
            values[key] = (
                int(number, 16) if number.startswith("0x") else int(number.replace(",", ""))
            )
    overall = _OVERALL.search(text)
    if overall is None and not values:
        raise ParseError(
            "no 'SMART overall-health' line and no NVMe 'SMART/Health Information' block"
        )
    passed = None if overall is None else overall.group(1).upper().startswith("PASSED")
    model = re.search(r"^Model Number:\s*(.+)$", text, re.MULTILINE)
    serial = re.search(r"^Serial Number:\s*(.+)$", text, re.MULTILINE)
    return SmartHealth(
        passed=passed,
        model=model.group(1).strip() if model else "",
        serial=serial.group(1).strip() if serial else "",
        critical_warning=values.get("critical_warning"),
        percentage_used=values.get("percentage_used"),
        media_errors=values.get("media_errors"),
        available_spare=values.get("available_spare"),
        available_spare_threshold=values.get("available_spare_threshold"),
        temperature_c=values.get("temperature_c"),
        power_on_hours=values.get("power_on_hours"),
    )


__all__ = ["SmartUnreadable", "parse_smartctl", "parse_smartctl_json", "parse_smartctl_text"]
