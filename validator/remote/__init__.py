"""Reaching hosts: transports (local, ssh, ansible), the shipped agent, the fan-out."""
