"""This host as a source of facts: NVML, its commands and files, a real burn-in and copies."""
