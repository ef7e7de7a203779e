"""``--help`` in sections: each command's options under headings, then examples.

:data:`HELP_SECTIONS` is the one place that says which heading an option is shown
under. A command made with ``cls=SectionedCommand`` shows its options by that table;
one the table leaves out is still shown (under "Other options"), and
tests/cli/test_help_sections.py fails, naming the option and the heading to add it to.
"""

from __future__ import annotations

from collections.abc import Mapping

import click

Sections = tuple[tuple[str, tuple[str, ...]], ...]

_SLURM = (
    "--slurm", "--partition", "--nodelist", "--exclude", "--reservation", "--account", "--qos",
    "--time", "--spool", "--agent-path", "--campaign", "--wait", "--sbatch-option", "--poll",
)  # fmt: skip
_REACH = (
    "--transport", "--parallel", "--deadline", "--accept-new-host-keys", "--connect-timeout",
    "--ssh-config", "--known-hosts",
)  # fmt: skip
_BURN = (
    "--burn", "--burn-backend", "--burn-dtype", "--burn-matrix-size", "--burn-memory-fraction",
)  # fmt: skip

# Command name -> (heading, option names), in the order shown. An option is named by its
# longest flag ("--inventory", not "-i"); hidden options (test hooks) are not listed.
HELP_SECTIONS: Mapping[str, Sections] = {
    "certify": (
        ("What to certify", ("--simulate", "--capture", "--inventory", "--limit",
                             "--inventory-timeout", "--policy", "--gpus", "--allow-busy")),
        ("Burn-in", (*_BURN, "--dcgm-level")),
        ("Interconnect", ("--interconnect",)),
        ("Containers", ("--container-image",)),
        ("Fleet: reaching the hosts", _REACH),
        ("Across nodes", ("--cross-node", "--fabric")),
        ("Slurm", (*_SLURM, "--slurm-drain")),
        ("Output", ("--json", "--json-form", "--report-dir", "--prom-file", "--color",
                    "--quiet")),
        ("History and signing", ("--db", "--sign-key")),
    ),
    "drift": (
        ("What to check", ("--inventory", "--limit", "--inventory-timeout", "--simulate",
                           "--policy")),
        ("Baseline", ("--certificate", "--certificates", "--sign-key", "--public-key", "--db")),
        ("Measure again", ("--burn", "--interconnect")),
        ("Fleet: reaching the hosts", _REACH),
        ("Slurm", (*_SLURM, "--slurm-drain")),
        ("Output", ("--json", "--prom-file", "--nhc")),
    ),
    "provision": (
        ("Which hosts", ("--inventory", "--limit", "--inventory-timeout")),
        ("What to run", ("--tags", "--skip-tags", "--check", "--diff", "--force", "--mirror",
                         "--ask-become-pass", "--extra-vars", "--playbook")),
        ("Rolling", ("--batch", "--max-fail-percentage", "--slurm-drain")),
        ("Certify afterwards", ("--certify", *_BURN, "--dcgm-level", "--interconnect",
                                "--policy", "--report-dir", "--sign-key", "--db")),
        ("Output", ("--json", "--color")),
    ),
    "collect": (
        ("Which submission", ("--spool", "--wait", "--poll")),
        ("Slurm", ("--slurm-drain",)),
        ("Output", ("--json", "--json-form", "--report-dir", "--color")),
        ("History and signing", ("--db", "--sign-key")),
    ),
}  # fmt: skip

EXAMPLES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "certify": (
        ("Certify this machine (5-minute burn):", "gpuready certify"),
        ("A longer burn, reports kept:", "gpuready certify --burn 1h30m --report-dir ./reports"),
        ("Try it without a GPU:", "gpuready certify --simulate healthy-8x-h100-sxm --burn 0"),
        ("Every host of an inventory:", "gpuready certify -i hosts.ini --burn 10m"),
        ("Through Slurm:", "gpuready certify --slurm --partition gpu --no-wait"),
        ("Then across the fabric, pair by pair:", "gpuready certify -i hosts.ini --cross-node "
         "rdma,nccl"),
    ),
    "drift": (
        ("This machine against its certificate:", "gpuready drift"),
        ("As Slurm's health check:", "gpuready drift --nhc"),
        ("Weekly, with a burn and the interconnect:", "gpuready drift --burn 5m --interconnect"),
    ),
    "provision": (
        ("See what would change:", "gpuready provision -i site/hosts.ini --check --diff"),
        ("Install, then certify:", "gpuready provision -i site/hosts.ini --certify"),
        ("Ten percent at a time, draining:", "gpuready provision -i site/hosts.ini --batch 10% "
         "--slurm-drain"),
    ),
    "collect": (
        ("Gather a --no-wait submission:", "gpuready slurm collect 4711"),
    ),
}  # fmt: skip
OTHER = "Other options"
HELP = "--help"


def option_name(param: click.Parameter) -> str:
    """The name the table knows an option by: its longest flag (``--inventory``)."""
    return max(param.opts, key=len)


class SectionedCommand(click.Command):
    """A click command whose ``--help`` shows options under :data:`HELP_SECTIONS`' headings."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The options, heading by heading; any the table misses under "Other options"."""
        records: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and isinstance(param, click.Option):
                records[option_name(param)] = record
        sections = HELP_SECTIONS.get(self.name or "", ())
        placed: set[str] = set()
        for position, (heading, listed) in enumerate(sections):
            # click's own --help closes the last heading, as it closes click's one list
            names = (*listed, HELP) if position == len(sections) - 1 else listed
            rows = [records[name] for name in names if name in records]
            placed.update(names)
            if rows:
                with formatter.section(heading):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if name not in placed]
        if rest:
            with formatter.section(OTHER):
                formatter.write_dl(rest)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The examples, each a line of words and the command under it, unwrapped."""
        super().format_epilog(ctx, formatter)
        examples = EXAMPLES.get(self.name or "", ())
        if not examples:
            return
        with formatter.section("Examples"):
            for words, command in examples:
                formatter.write(f"{'':>{formatter.current_indent}}{words}\n")
                formatter.write(f"{'':>{formatter.current_indent + 2}}$ {command}\n")
