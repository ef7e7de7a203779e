"""Helpers for the provisioning tests: a signed apt repository of stub NVIDIA packages."""

from __future__ import annotations
