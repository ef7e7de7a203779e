"""Slurm through its own commands: drains and resumes, nodes, jobs, host-lists, reservations.

The drain/resume API (validator.slurm.drain) is re-exported here, where drift and
provisioning have always taken it from; what certify and drift tell Slurm about the
nodes they judged is validator.slurm.judged_nodes.
"""

from validator.slurm.commands import CommandResult, Runner, SlurmError
from validator.slurm.drain import (
    PREFIX,
    Action,
    NodeState,
    drain,
    node_state,
    parse_show_node,
    resume_if_ours,
    run_scontrol,
)

__all__ = [
    "PREFIX",
    "Action",
    "CommandResult",
    "NodeState",
    "Runner",
    "SlurmError",
    "drain",
    "node_state",
    "parse_show_node",
    "resume_if_ours",
    "run_scontrol",
]
