"""Burn-in: every GPU under a sustained matrix-multiply load, checked for speed and correctness."""
