"""The simulation: scenarios (a simulated host with its GPUs, burn and interconnect), NVML's double.

One of the agent's three sources of facts, beside the live host and a capture bundle.
"""
