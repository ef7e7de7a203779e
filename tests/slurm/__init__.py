"""Tests of validator/slurm and the Slurm transport: commands, nodes, jobs, spool."""
