"""Tests of validator/cli: the commands end to end, their inputs, exits and signals."""
