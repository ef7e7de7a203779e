"""Pure parsers for gpu_preflight's probes: Secure Boot state and NVLink5 VPD markers.

Ansible loads this file as a role filter plugin; the functions are plain Python so the
tests call them on recorded outputs without Ansible.
"""

from __future__ import annotations

import base64
import binascii
from typing import Callable

# mokutil --sb-state prints one of these (lower-cased here); the last two mean the
# state cannot be read from mokutil at all.
_MOKUTIL_ANSWERS = (
    ("secureboot enabled", "enabled"),
    ("secureboot disabled", "disabled"),
    ("this system doesn't support secure boot", "unsupported"),
)
_SB_NO_EFIVARS = "efi variables are not supported on this system"
# efivarfs files start with the 4-byte attribute word; the SecureBoot variable's value
# is the one byte after it (1 = enabled, 0 = disabled).
_EFIVAR_HEADER = 4

SECURE_BOOT_STATES = ("enabled", "disabled", "unsupported", "legacy_bios", "unknown")


def _b64(content: str | None) -> bytes | None:
    if content is None or content == "":
        return None
    try:
        return base64.b64decode(content, validate=False)
    except (binascii.Error, ValueError):
        return None


def gpu_preflight_secure_boot_state(
    mokutil_output: str | None,
    efi_present: bool,
    firmware_present: bool,
    efivar_b64: str | None = None,
    efivars_listed: bool = False,
) -> str:
    """The host's Secure Boot state from what the probes saw.

    Args:
        mokutil_output: ``mokutil --sb-state`` stdout and stderr together, or None
            where mokutil is not installed or did not run.
        efi_present: ``/sys/firmware/efi`` exists (the host booted through UEFI).
        firmware_present: ``/sys/firmware`` exists (sysfs is visible at all).
        efivar_b64: the ``SecureBoot-*`` efivar as slurp returns it (base64), or None.
        efivars_listed: the efivars directory lists variables (efivarfs is mounted).

    Returns:
        ``enabled``, ``disabled``, ``unsupported`` (UEFI without Secure Boot),
        ``legacy_bios`` (no ``/sys/firmware/efi``: BIOS boot, so no Secure Boot) or
        ``unknown`` (nothing could tell: no sysfs, or EFI without readable variables).
    """
    if not firmware_present:
        # No sysfs (a container, a chroot-like test root): absence of efi/ proves nothing.
        return "unknown"
    if not efi_present:
        # sysfs is there and the kernel exposes no efi/: the host booted through BIOS,
        # and Secure Boot exists only under UEFI.
        return "legacy_bios"
    text = (mokutil_output or "").lower()
    for answer, state in _MOKUTIL_ANSWERS:
        if answer in text:
            return state
    # mokutil absent, or "EFI variables are not supported": read the variable itself.
    return _efivar_state(_b64(efivar_b64), efivars_listed and _SB_NO_EFIVARS not in text)


def _efivar_state(raw: bytes | None, efivars_readable: bool) -> str:
    if raw is not None and len(raw) > _EFIVAR_HEADER:
        return "enabled" if raw[_EFIVAR_HEADER] == 1 else "disabled"
    if raw is None and efivars_readable:
        # Variables are readable and the firmware defines no SecureBoot variable.
        return "unsupported"
    return "unknown"


def gpu_preflight_key_enrolled(test_key_output: str | None) -> bool:
    """Whether ``mokutil --test-key <key>`` says the key is enrolled.

    mokutil answers ``<key> is already enrolled`` for an enrolled key; anything else
    (not enrolled, queued for enrollment at the next boot, an error) is not enrolled.
    """
    return "is already enrolled" in (test_key_output or "").lower()


def gpu_preflight_vpd_has_marker(vpd_b64: str | None, marker: str = "SW_MNG") -> bool:
    """Whether a PCI VPD blob (base64, as slurp returns it) carries ``marker``.

    The VPD is binary: the marker is searched as bytes, not decoded text.
    """
    raw = _b64(vpd_b64)
    return raw is not None and marker.encode("ascii") in raw


def gpu_preflight_vpd_sources_with_marker(
    results: list[dict[str, object]], marker: str = "SW_MNG"
) -> list[str]:
    """The ``source`` of each slurp result (a loop's ``results``) whose content has ``marker``."""
    found = []
    for result in results or []:
        content = result.get("content")
        if isinstance(content, str) and gpu_preflight_vpd_has_marker(content, marker):
            found.append(str(result.get("source", result.get("item", "?"))))
    return found


class FilterModule:
    """gpu_preflight's filters."""

    def filters(self) -> dict[str, Callable[..., object]]:
        """The filters by name."""
        return {
            "gpu_preflight_secure_boot_state": gpu_preflight_secure_boot_state,
            "gpu_preflight_key_enrolled": gpu_preflight_key_enrolled,
            "gpu_preflight_vpd_has_marker": gpu_preflight_vpd_has_marker,
            "gpu_preflight_vpd_sources_with_marker": gpu_preflight_vpd_sources_with_marker,
        }
