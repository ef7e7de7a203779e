"""Hostile inputs and faults: every command, every documented bad input."""
