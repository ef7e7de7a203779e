"""Tests of validator/node: parsers, captures, burn-in, bandwidth, NVML, DCGM, scenarios."""
