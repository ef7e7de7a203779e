"""Tests of validator/drift: each change against the certified baseline, and its outputs."""
