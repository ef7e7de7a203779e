"""Capture bundles: writing a host's outputs to a folder, replaying them, and checking them.

One of the agent's three sources of facts, beside the live host and the simulation.
"""
