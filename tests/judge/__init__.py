"""Tests of validator/judge: the checks, their actions, the catalog, policy and verdict."""
