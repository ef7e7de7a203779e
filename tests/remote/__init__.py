"""Tests of validator/remote: the agent bundle, the transports, fan-out and deadlines."""
