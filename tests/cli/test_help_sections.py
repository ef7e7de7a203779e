"""``--help`` in sections: every option under exactly one heading, and examples that run."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from validator.cli.help_sections import (
    EXAMPLES,
    HELP,
    HELP_SECTIONS,
    OTHER,
    SectionedCommand,
    option_name,
)
from validator.cli.main import cli


def sectioned() -> dict[str, click.Command]:
    """Every command that shows its help in sections, by the name the table uses."""
    found = {name: cli.commands[name] for name in ("certify", "drift", "provision")}
    slurm = cli.commands["slurm"]
    assert isinstance(slurm, click.Group)
    found["collect"] = slurm.commands["collect"]
    return found


def test_every_sectioned_command_uses_the_table() -> None:
    for name, command in sectioned().items():
        assert isinstance(command, SectionedCommand), name
        assert name in HELP_SECTIONS, name
    assert set(HELP_SECTIONS) == set(sectioned())


@pytest.mark.parametrize("name", sorted(HELP_SECTIONS))
def test_every_option_is_in_exactly_one_section(name: str) -> None:
    command = sectioned()[name]
    options = {
        option_name(param)
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
    }
    listed: dict[str, list[str]] = {}
    for heading, names in HELP_SECTIONS[name]:
        for option in names:
            listed.setdefault(option, []).append(heading)
    table = "HELP_SECTIONS in validator/cli/help_sections.py"
    missing = sorted(options - set(listed))
    assert not missing, (
        f"{name}'s {', '.join(missing)} under no heading of --help: add each to {table}"
        f"['{name}'], under the heading it belongs to "
        f"({', '.join(heading for heading, _ in HELP_SECTIONS[name])})"
    )
    twice = {option: headings for option, headings in listed.items() if len(headings) > 1}
    assert not twice, f"{name}: listed under more than one heading in {table}: {twice}"
    stale = sorted(set(listed) - options)
    assert not stale, f"{name} has no option {', '.join(stale)}: take it out of {table}"
    assert HELP not in listed  # click's own, always shown last


@pytest.mark.parametrize("name", sorted(HELP_SECTIONS))
def test_help_shows_the_headings_in_order_and_every_option(name: str) -> None:
    path = ["slurm", "collect"] if name == "collect" else [name]
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    headings = [heading for heading, _ in HELP_SECTIONS[name]]
    positions = [lines.index(f"{heading}:") for heading in headings]
    assert positions == sorted(positions)
    assert f"{OTHER}:" not in lines
    for param in sectioned()[name].params:
        if isinstance(param, click.Option) and not param.hidden:
            assert option_name(param) in result.output, option_name(param)
    if name in EXAMPLES:
        assert lines.index("Examples:") > positions[-1]


def test_an_option_left_out_of_the_table_still_shows() -> None:
    """A new option nobody placed is under "Other options", never missing from --help."""

    @click.command("certify", cls=SectionedCommand)
    @click.option("--simulate")
    @click.option("--brand-new-option", help="Nobody placed me.")
    def command(**_: object) -> None:
        """A stand-in."""

    result = CliRunner().invoke(command, ["--help"])
    assert f"{OTHER}:\n  --brand-new-option TEXT  Nobody placed me." in result.output
    assert result.output.index("What to certify:") < result.output.index(f"{OTHER}:")


@pytest.mark.parametrize(
    "example", [command for commands in EXAMPLES.values() for _, command in commands]
)
def test_each_example_parses(example: str) -> None:
    """Each example is a command line click accepts (no option renamed under it)."""
    words = shlex.split(example)
    assert words[0] == "gpuready"
    command = cli.commands[words[1]]
    rest = words[2:]
    if isinstance(command, click.Group):
        command, rest = command.commands[rest[0]], rest[1:]
    with command.make_context(words[1], rest):
        pass
