"""End-to-end tests against real SSH test hosts (see tests/hosts/README.md)."""

from __future__ import annotations
