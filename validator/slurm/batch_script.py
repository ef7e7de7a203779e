"""The two scripts a Slurm submission runs: the batch script and one node's step.

Both are built from quoted parts (:func:`validator.remote.transport.quoted`), never by
pasting text, so a node name or a path with a space stays one argument.

``job.sh`` (bash, run by sbatch on the job's first node) takes the node names it is
to certify as its arguments: all of them for the single job, one for each job of a
campaign. It delivers the agent (``sbcast`` from the spool to each node's /tmp, or
nothing where the operator named a path on a shared filesystem), then starts one
``srun`` step per node in the background and waits for them all: a node that dies
ends its own step, not its neighbours'. ``step.sh`` (POSIX sh, run by srun on the
node) runs the agent and leaves its stdout, stderr and exit status in the spool,
the status last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from validator.remote.transport import quoted
from validator.slurm.submission_spool import AGENT_FILE, OUT_DIR, STEP_FILE

STEP_SCRIPT = """#!/bin/sh
# One node's part of a gpuready Slurm job, started by job.sh through srun: run the
# agent, keep its stdout and stderr in the spool, and write the exit status last,
# which tells the controller this node is done.
out=$1 node=$2
shift 2
"$@" >"$out/$node.stdout.tmp" 2>"$out/$node.stderr"
rc=$?
mv -f "$out/$node.stdout.tmp" "$out/$node.stdout"
printf '%s\\n' "$rc" >"$out/$node.rc.tmp"
mv -f "$out/$node.rc.tmp" "$out/$node.rc"
"""


@dataclass(frozen=True)
class AgentDelivery:
    """How the agent reaches the nodes.

    Attributes:
        node_path: where each node runs it from.
        sbcast: copy it there from the spool with ``sbcast`` first; False: the path is
            on a shared filesystem the operator named (``--agent-path``).
    """

    node_path: str
    sbcast: bool


def batch_script(
    spool_dir: str,
    delivery: AgentDelivery,
    commands: Mapping[str, Sequence[str]],
    default: Sequence[str] | None = None,
) -> str:
    """``job.sh``: deliver the agent, then one srun step per node named as an argument.

    Args:
        spool_dir: the submission's folder, as every node sees it.
        delivery: how the agent gets to the nodes.
        commands: each node's agent command line (its python, the agent, its arguments);
            nodes whose line equals ``default`` may be left out.
        default: the line for nodes not in ``commands``; None: every node is listed.
    """
    out = f"{spool_dir}/{OUT_DIR}"
    lines = [
        "#!/bin/bash",
        "# A gpuready certification job, written by gpuready and run by sbatch: it delivers",
        "# the agent, then runs one srun step per node named as an argument, each in the",
        "# background, so a node that fails ends its own step only.",
        "set -u",
        f"out={quoted([out])}",
        "done_with() {  # node, status, message: a node that cannot run, told in the spool",
        '    printf \'%s\\n\' "$3" >"$out/$1.stderr"',
        '    printf \'%s\\n\' "$2" >"$out/$1.rc.tmp" && mv -f "$out/$1.rc.tmp" "$out/$1.rc"',
        "}",
    ]
    source = f"{spool_dir}/{AGENT_FILE}"
    lines.append("from_spool=0")
    if delivery.sbcast:
        # A node sbcast cannot reach runs the spool's copy instead of failing.
        lines += [
            f"if ! said=$(sbcast --force {quoted([source, delivery.node_path])} 2>&1); then",
            '    echo "gpuready: sbcast could not deliver the agent ($said): the nodes run '
            'it from the spool" >&2',
            "    from_spool=1",
            "fi",
        ]
    lines.append("command_for() {")
    lines.append('    case "$1" in')
    for node, argv in commands.items():
        if default is not None and list(argv) == list(default):
            continue
        lines.append(f"    {quoted([node])}) agent=({quoted(argv)}) ;;")
    if default is not None:
        lines.append(f"    *) agent=({quoted(default)}) ;;")
    else:
        lines.append("    *) agent=() ;;")
    lines += [
        "    esac",
        "}",
        'for node in "$@"; do',
        '    command_for "$node"',
        '    if [ "$from_spool" -eq 1 ]; then',
        '        for i in "${!agent[@]}"; do',
        f'            [ "${{agent[$i]}}" = {quoted([delivery.node_path])} ] && '
        f"agent[$i]={quoted([source])}",
        "        done",
        "    fi",
        '    if [ "${#agent[@]}" -eq 0 ]; then',
        '        done_with "$node" 2 "gpuready: this job was not asked to certify $node"',
        "        continue",
        "    fi",
        '    srun --nodes=1 --ntasks=1 --nodelist="$node" --kill-on-bad-exit=0 \\',
        f"        --job-name=gpuready-agent /bin/sh {quoted([f'{spool_dir}/{STEP_FILE}'])} "
        '"$out" "$node" "${agent[@]}" &',
        "done",
        "wait",
        "",
    ]
    return "\n".join(lines)


__all__ = ["STEP_SCRIPT", "AgentDelivery", "batch_script"]
