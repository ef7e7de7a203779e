"""Start-up imports only what the command uses: subcommands load on demand, rich only to draw."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from rich.console import Console

from validator.cli.burn_display import BurnDisplay
from validator.cli.main import COMMANDS, LazyCommands, LazyGroup, cli, load_command
from validator.cli.progress import LiveDisplay

HEALTHY = "healthy-8x-h100-sxm"

# Never needed by one simulated node's certify --json (packages cover their submodules).
NOT_FOR_SIMULATED_JSON = (
    "rich",
    "validator.service.provision_service",
    "validator.remote.fanout",
    "validator.remote.ssh",
    "paramiko",
    "ansible_runner",
    "validator.drift",
    "validator.service.drift_service",
)

# Everything a simulated single-node certify --json may import of ours: whole packages
# where judging or recording needs all of them, else each module by name. A new import
# on this road costs every run its start-up time (bench/startup.py), so it is named here.
MAY_IMPORT_PACKAGES = ("validator.model", "validator.judge", "validator.store")
MAY_IMPORT = frozenset(
    {
        "validator",
        "validator.certificate",
        "validator.certified_network",
        "validator.codec",
        "validator.error_tree",
        "validator.fields",
        "validator.files",
        "validator.limits",
        "validator.packed",
        "validator.safe_text",
        "validator.signing",
        "validator.trace",
        "validator.cli",
        "validator.cli.burn_display",
        "validator.cli.certify",
        "validator.cli.main",
        "validator.cli.options",
        "validator.cli.help_sections",
        "validator.cli.log_tap",
        "validator.cli.settings",
        "validator.cli.progress",
        "validator.cli.slurm_options",
        "validator.node",
        "validator.node.agent",
        "validator.node.bandwidth",
        "validator.node.bandwidth.bandwidth_config",
        "validator.node.burnin",
        "validator.node.burnin.backend",
        "validator.node.burnin.backend_choice",
        "validator.node.burnin.burn_config",
        "validator.node.burnin.burn_progress",
        "validator.node.burnin.burn_request",
        "validator.node.burnin.devices",
        "validator.node.burnin.numpy_backend",
        "validator.node.burnin.run",
        "validator.node.burnin.sampler",
        "validator.node.busy_gate",
        "validator.node.collect",
        "validator.node.container_probe",
        "validator.node.gpu_choice",
        # GPUDirect RDMA readiness: collected by every certify (validator.node.collect).
        "validator.node.gpudirect_probe",
        "validator.node.parsers.lspci_acs",
        "validator.node.parsers.smi_topo",
        "validator.node.host",
        # The host around the GPUs: every collector reads it (issue 34's host family).
        "validator.node.host_probe",
        "validator.node.parsers.host_proc",
        "validator.node.parsers.smartctl",
        "validator.node.network_probe",
        "validator.node.nvml",
        "validator.node.parsers",
        "validator.node.parsers.base",
        "validator.node.parsers.cudnn",
        "validator.node.parsers.ib_link_flaps",
        "validator.node.parsers.ib_sysfs",
        "validator.node.parsers.ibstat",
        "validator.node.parsers.ibv_devinfo",
        "validator.node.parsers.kernel_log",
        "validator.node.parsers.kernel_log_shape",
        "validator.node.parsers.nvcc",
        "validator.node.parsers.nvidia_ctk",
        "validator.node.parsers.proc_version",
        "validator.node.parsers.smi_banner",
        "validator.node.parsers.smi_common",
        "validator.node.parsers.smi_csv_log",
        "validator.node.parsers.smi_errors",
        "validator.node.physical_ranges",
        "validator.node.scenarios",
        "validator.node.sim",
        "validator.node.sim.fake_nvml",
        "validator.node.sim.fake_processes",
        "validator.node.sim.scenario",
        "validator.node.sim.simulated_bandwidth",
        "validator.node.sim.simulated_burn",
        "validator.node.sim.simulated_container",
        "validator.node.sim.simulated_source",
        "validator.node.sparing_gc",
        "validator.node.stop_request",
        "validator.node.system",
        "validator.node.system_facts",
        "validator.remote",
        "validator.remote.deadline",
        "validator.remote.per_host",
        "validator.remote.transport",
        "validator.report",
        "validator.report.json_report",
        "validator.report.shared",
        "validator.service",
        "validator.service.certify_service",
        "validator.service.collect_and_judge",
        "validator.service.outcome",
        "validator.service.signals",
    }
)


def beyond_the_road(modules: set[str]) -> list[str]:
    """Our modules among ``modules`` that a simulated single-node certify may not import."""
    ours = (m for m in modules if m == "validator" or m.startswith("validator."))
    return sorted(
        m
        for m in ours
        if m not in MAY_IMPORT
        and not any(m == p or m.startswith(p + ".") for p in MAY_IMPORT_PACKAGES)
    )


# The child runs the real entry point and writes sys.modules as it stands at exit.
_DUMPING_MAIN = textwrap.dedent(
    """
    import atexit, json, sys

    def _dump() -> None:
        with open(sys.argv[1], "w", encoding="utf-8") as out:
            json.dump(sorted(sys.modules), out)

    atexit.register(_dump)
    from validator.cli.main import main
    sys.exit(main(sys.argv[2:]))
    """
)


def run_dumping(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``gpuready argv`` in a child off any terminal; its result and the modules it imported."""
    dump = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")  # never the user's history
    done = subprocess.run(
        [sys.executable, "-c", _DUMPING_MAIN, str(dump), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert dump.exists(), done.stderr
    return done, set(json.loads(dump.read_text(encoding="utf-8")))


def unwanted(modules: set[str], names: tuple[str, ...]) -> dict[str, list[str]]:
    """Those of ``names`` (with their submodules) that are among ``modules``."""
    found = {name: imported(modules, name) for name in names}
    return {name: hits for name, hits in found.items() if hits}


def imported(modules: set[str], name: str) -> list[str]:
    """``name`` and its submodules among ``modules``."""
    return sorted(m for m in modules if m == name or m.startswith(name + "."))


def test_simulated_certify_json_imports_no_fleet_drift_provisioning_or_rich(
    tmp_path: Path,
) -> None:
    done, modules = run_dumping(
        tmp_path,
        "certify",
        "--simulate",
        HEALTHY,
        "--json",
        "--burn",
        "2s",
        "--db",
        str(tmp_path / "history.db"),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"][0]["verdict"] == "CERTIFIED"
    # The burn's progress still reached stderr, as plain lines drawn without rich.
    assert "burn 1/2 s: gpu0 " in done.stderr
    assert "validator.cli.certify" in modules  # the dump is of a run that did certify
    assert unwanted(modules, NOT_FOR_SIMULATED_JSON) == {}
    assert beyond_the_road(modules) == []


def test_the_named_road_is_kept_to_what_is_imported() -> None:
    """The allow list names only real modules, and refuses one that is not on it."""
    import importlib.util

    assert all(importlib.util.find_spec(name) is not None for name in MAY_IMPORT)
    assert beyond_the_road({"validator.judge.catalog", "validator.node.agent"}) == []
    assert beyond_the_road({"validator.drift.inventory_drift", "validator.node.capture"}) == [
        "validator.drift.inventory_drift",
        "validator.node.capture",
    ]


def test_help_lists_every_command_and_imports_none(tmp_path: Path) -> None:
    done, modules = run_dumping(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("Commands:\n", 1)[1].splitlines()
    names = [line.split()[0] for line in listed if line.startswith("  ")]
    assert names == sorted(COMMANDS)
    for name, entry in COMMANDS.items():
        assert entry.module not in modules, f"--help imported {name}'s module"
    assert imported(modules, "rich") == []


def test_the_tables_short_help_is_each_commands_own() -> None:
    for name, entry in COMMANDS.items():
        command = load_command(entry)
        assert command.name == name
        assert entry.short_help == command.get_short_help_str(limit=10**6), name


@pytest.mark.parametrize("width", [50, 80, 120])
def test_lazy_help_reads_as_the_eager_groups(width: int) -> None:
    """The listing from the table is what click writes with every command imported."""
    eager = click.Group(
        name="gpuready",
        commands={name: load_command(entry) for name, entry in COMMANDS.items()},
        params=cli.params,
        callback=cli.callback,
        help=cli.help,
        context_settings=cli.context_settings,
    )
    lazy = LazyGroup(
        name="gpuready",
        table=COMMANDS,
        params=cli.params,
        callback=cli.callback,
        help=cli.help,
        context_settings=cli.context_settings,
    )
    texts = []
    for group in (eager, lazy):
        ctx = click.Context(group, info_name="gpuready", terminal_width=width)
        texts.append(group.get_help(ctx))
    assert "verify-cert" in texts[0]
    assert texts[1] == texts[0]
    assert all(name not in lazy.commands._loaded for name in COMMANDS)


def test_the_commands_mapping_loads_on_access_and_takes_replacements() -> None:
    commands = LazyCommands(COMMANDS)
    assert list(commands) == list(COMMANDS)
    assert commands.lazy_entry("scenarios") is COMMANDS["scenarios"]
    assert commands["scenarios"].name == "scenarios"
    assert commands.lazy_entry("scenarios") is None  # imported now

    @click.command(name="scenarios", help="A stand-in.")
    def stand_in() -> None:
        """Unused."""

    commands["scenarios"] = stand_in
    assert commands["scenarios"] is stand_in
    commands["extra"] = stand_in
    assert len(commands) == len(COMMANDS) + 1
    del commands["extra"]
    del commands["history"]
    assert "history" not in commands
    assert commands.get("nonesuch") is None
    with pytest.raises(KeyError):
        del commands["nonesuch"]


def test_an_unknown_command_is_still_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from validator.cli.main import main

    assert main(["certfy"]) == 2
    assert "No such command 'certfy'" in capsys.readouterr().err


def test_plain_lines_are_what_rich_would_have_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off a terminal the display writes its lines itself, as rich's console writes them."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    line = "[3/9] node\r07 [bold]FAILED[/] \x07burn: 12 % \x1b[31mlow"
    ours = BurnDisplay()
    assert not ours.interactive
    assert ours._console is None  # no rich console made
    ours.print_line(line)
    rich_out = io.StringIO()
    LiveDisplay(Console(file=rich_out, width=20)).print_line(line)
    assert capsys.readouterr().err == rich_out.getvalue()
    # Controls a node sent are shown, not obeyed nor dropped, whichever writes the line.
    shown = r"[3/9] node\x0d07 [bold]FAILED[/] \x07burn: 12 % \x1b[31mlow"
    assert rich_out.getvalue() == shown + "\n"


def test_forced_colour_still_draws_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """FORCE_COLOR makes rich take stderr for a terminal: the live view is kept."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert BurnDisplay().interactive


# Never needed by a fleet's certify --json over SSH: one node's collector, paramiko's
# `Match exec` runner (invoke, unittest.mock), drift, provisioning, rich.
NOT_FOR_A_FLEET = (
    "validator.node.system_facts",
    "validator.node.live",
    "validator.node.sim.scenario",
    "validator.node.collect",
    "invoke.collection",
    "unittest.mock",
    "rich",
    "validator.service.provision_service",
    "validator.drift",
    "validator.service.drift_service",
)


def test_a_fleet_certify_imports_no_single_node_collector_nor_invoke(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    # Port 1 on loopback refuses at once: the fan-out runs and judges the host UNKNOWN.
    inventory.write_text("node01 ansible_host=127.0.0.1 ansible_port=1 ansible_user=root\n")
    done, modules = run_dumping(
        tmp_path,
        "certify",
        "-i",
        str(inventory),
        "--burn",
        "0",
        "--json",
        "--db",
        str(tmp_path / "history.db"),
    )
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["nodes"][0]["verdict"] == "UNKNOWN"
    assert "paramiko" in modules  # the dump is of a run that went over SSH
    assert unwanted(modules, NOT_FOR_A_FLEET) == {}


def test_paramiko_imports_invoke_only_when_a_match_exec_runs() -> None:
    """The stand-in keeps paramiko's `Match exec` working: the real invoke runs it."""
    probe = textwrap.dedent(
        """
        import sys
        import validator.remote.ssh
        from paramiko import SSHConfig
        before = "invoke" in sys.modules or "invoke.collection" in sys.modules
        config = SSHConfig.from_text("Match exec true\\n  User matched\\n")
        print(before, config.lookup("h").get("user"), "invoke.collection" in sys.modules)
        config = SSHConfig.from_text("Match exec false\\n  User matched\\n")
        print(config.lookup("h").get("user"))
        import invoke.context  # the real package, one copy of each module
        print(invoke.Context is invoke.context.Context)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False matched True", "None", "True"]
