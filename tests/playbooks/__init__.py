"""Tests of playbooks/: static checks, roles, the converged probe, the stub repositories."""
