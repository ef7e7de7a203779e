"""Settings from /etc, the user's config and GPUREADY_* variables, beneath the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from validator.cli.main import cli, main
from validator.error_tree import ExitCode

HEALTHY = "healthy-8x-h100-sxm"
REPO = Path(__file__).resolve().parents[2]




def shown(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict[str, object]]:
    code = main(["config", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return {row["setting"]: row for row in json.loads(out)}


# Which layers set --policy, and which one wins: command line > variable > user > /etc > default.
PRECEDENCE = [
    ((), "default", None),
    (("system",), "/etc file", "system.yaml"),
    (("user",), "user file", "user.yaml"),
    (("system", "user"), "user file", "user.yaml"),
    (("system", "env"), "env var", "env.yaml"),
    (("system", "user", "env"), "env var", "env.yaml"),
    (("user", "cli"), "command line", "cli.yaml"),
    (("system", "user", "env", "cli"), "command line", "cli.yaml"),
]


@pytest.mark.parametrize(("layers", "source", "winner"), PRECEDENCE)
def test_precedence(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    places: dict[str, Path],
    layers: tuple[str, ...],
    source: str,
    winner: str | None,
) -> None:
    if "system" in layers:
        places["system"].write_text("policy: system.yaml\n")
    if "user" in layers:
        places["user"].write_text("policy: user.yaml\n")
    if "env" in layers:
        monkeypatch.setenv("GPUREADY_POLICY", "env.yaml")
    args = ("--policy", "cli.yaml") if "cli" in layers else ()
    row = shown(capsys, *args)["policy"]
    assert (row["value"], row["source"]) == (winner, source)


@pytest.mark.parametrize("layer", ["system", "user", "env", "cli"])
def test_each_layer_reaches_a_real_certify(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    places: dict[str, Path],
    layer: str,
) -> None:
    """The report directory each layer names is where certify writes; the higher layer wins."""
    root = places["root"]
    places["system"].write_text(f"report_dir: {root / 'system'}\ndb: {root / 'system.db'}\n")
    args = ["certify", "--simulate", HEALTHY, "--burn", "0", "--json"]
    if layer in ("user", "env", "cli"):
        places["user"].write_text(f"report_dir: {root / 'user'}\n")
    if layer in ("env", "cli"):
        monkeypatch.setenv("GPUREADY_REPORT_DIR", str(root / "env"))
    if layer == "cli":
        args += ["--report-dir", str(root / "cli")]
    code = main(args)
    capsys.readouterr()
    assert code == ExitCode.NOT_CERTIFIED  # no burn: measured, not certified
    written = sorted(name for name in ("system", "user", "env", "cli") if (root / name).exists())
    assert written == [layer]
    assert (root / layer / "report.json").is_file()
    assert (root / "system.db").is_file()  # the /etc file's db, set nowhere else


def test_config_prints_every_setting_and_its_source(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    places: dict[str, Path],
) -> None:
    places["system"].write_text("transport: local\nparallel: 16\n")
    places["user"].write_text("sign_key: /etc/gpuready/sign.key\n")
    monkeypatch.setenv("GPUREADY_DB", "/srv/gpuready/history.db")
    code = main(["config", "--spool", "/shared/spool"])
    out, _ = capsys.readouterr()
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line and " " in line}
    assert rows["transport"].split()[1:] == ["local", "/etc", "file", str(places["system"])]
    assert rows["parallel"].split()[1] == "16"
    assert rows["sign_key"].split()[1:4] == ["/etc/gpuready/sign.key", "user", "file"]
    assert rows["db"].split()[1:] == ["/srv/gpuready/history.db", "env", "var", "GPUREADY_DB"]
    assert rows["spool"].split()[1:] == ["/shared/spool", "command", "line", "--spool"]
    assert rows["report_dir"].split()[1:] == ["(none)", "default"]
    assert rows["connect_timeout"].split()[1:] == ["10.0", "default"]
    assert f"{places['user']} (read)" in out
    assert f"{places['system']} (read)" in out


def test_defaults_live_under_xdg_state(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path], private_state_dir: Path
) -> None:
    rows = shown(capsys)
    assert rows["db"]["value"] == str(private_state_dir / "gpuready" / "history.db")
    assert rows["spool"]["value"] == str(private_state_dir / "gpuready" / "spool")
    assert {row["source"] for row in rows.values()} == {"default"}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("dbb: /tmp/x.db\n", "unknown setting 'dbb': the settings are db, spool,"),
        ("sign_key: |\n  -----BEGIN OPENSSH PRIVATE KEY-----\n  b3Blbn\n", "key material"),
        ("sign_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB\n", "key material"),
        ("sign_key: " + "9f" * 32 + "\n", "key material"),
        ("sign_key: " + "7" * 64 + "\n", "sign_key must be text (a path)"),
        ("parallel: 0\n", "parallel must be a whole number from 1"),
        ("parallel: 2.5\n", "parallel must be a whole number"),
        ("connect_timeout: .inf\n", "connect_timeout must be a number of seconds"),
        ("transport: telnet\n", "transport must be one of ssh, local, ansible"),
        ("db: ''\n", "db is empty"),
        ("db: [1, 2]\n", "db must be text"),
        ("- db\n", "must be a mapping of settings"),
        ("db: [unclosed\n", "fix the YAML"),
        ("a: &a [*a]\n", "fix the YAML"),
        ("db: x\n" + "#" * (70 * 1024) + "\n", "a config file holds a few settings"),
    ],
)
def test_a_bad_user_file_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path], text: str, words: str
) -> None:
    places["user"].write_text(text)
    code = main(["history"])
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"gpuready: error: {places['user']}")
    assert words in err
    assert "BEGIN" not in err
    assert "AAAAC3" not in err
    assert "9f9f" not in err
    assert "7777" not in err


def test_a_timeout_setting_takes_a_duration(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    places["user"].write_text("connect_timeout: 1m30s\n")
    assert shown(capsys)["connect_timeout"]["value"] == 90.0
    monkeypatch.setenv("GPUREADY_CONNECT_TIMEOUT", "2m")
    assert shown(capsys)["connect_timeout"]["value"] == 120.0


def test_a_bad_variable_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    monkeypatch.setenv("GPUREADY_PARALLEL", "\u0663")  # a digit to Python, not to the operator
    code = main(["history"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert err.startswith("gpuready: error: $GPUREADY_PARALLEL: parallel must be a whole number")


def test_a_linked_config_file_is_refused_with_the_fix(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    real = places["root"] / "elsewhere.yaml"
    real.write_text("db: /tmp/x.db\n")
    places["user"].symlink_to(real)
    code = main(["config"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert "is a symbolic link" in err
    assert "cp --remove-destination" in err


def test_as_root_a_world_writable_file_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    places["system"].write_text("db: /tmp/x.db\n")
    places["system"].chmod(0o666)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    code = main(["config"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    fix = f"chmod o-w {places['system']}"
    assert f"is world-writable, so anyone could change what root runs: {fix}" in err


def test_as_root_a_file_in_a_world_writable_folder_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    places["system"].write_text("db: /tmp/x.db\n")
    places["system"].chmod(0o644)
    places["system"].parent.chmod(0o777)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    code = main(["config"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert f"chmod o-w {places['system'].parent}" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_as_root_a_file_another_user_owns_is_refused(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    places["system"].write_text("db: /tmp/x.db\n")
    os.chown(places["system"], 65534, 65534)
    code = main(["config"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert "belongs to uid 65534, not root" in err
    assert "chown root" in err


def test_a_spool_setting_does_not_demand_slurm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    """A spool set for --slurm runs is no "--spool shapes Slurm jobs" error on the others."""
    monkeypatch.setenv("GPUREADY_SPOOL", str(places["root"] / "spool"))
    assert main(["certify", "--simulate", HEALTHY, "--burn", "0", "--json"]) == 1
    _, err = capsys.readouterr()
    assert "error" not in err
    assert main(["certify", "--simulate", HEALTHY, "--spool", "/x"]) == ExitCode.BAD_INPUT
    assert "--spool shapes Slurm jobs" in capsys.readouterr().err


def test_help_shows_a_setting_as_the_default(places: dict[str, Path]) -> None:
    places["user"].write_text("parallel: 7\n")
    result = CliRunner().invoke(cli, ["certify", "--help"])
    assert result.exit_code == 0
    assert "[default: 7; x>=1]" in result.output


def test_config_in_a_real_process(tmp_path: Path) -> None:
    """As a user types it: the user file and a variable, in a fresh interpreter."""
    user = tmp_path / "config" / "gpuready" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("db: /srv/history.db\nreport_dir: /srv/reports\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GPUREADY_") and key != "NO_COLOR"
    }
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        GPUREADY_REPORT_DIR="/from/env",
    )
    done = subprocess.run(
        [sys.executable, "-m", "validator.cli.main", "config", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["setting"]: row for row in json.loads(done.stdout)}
    assert (rows["db"]["value"], rows["db"]["source"]) == ("/srv/history.db", "user file")
    assert (rows["report_dir"]["value"], rows["report_dir"]["where"]) == (
        "/from/env",
        "GPUREADY_REPORT_DIR",
    )


def test_a_certificates_folder_setting_reaches_drift(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    """A node-local drift finds its baseline in the folder GPUREADY_CERTIFICATES names."""
    root = places["root"]
    code = main(
        ["certify", "--simulate", HEALTHY, "--burn", "3s", "--db", str(root / "controller.db"),
         "--report-dir", str(root / "reports")]
    )  # fmt: skip
    assert code == ExitCode.OK, capsys.readouterr()
    capsys.readouterr()
    drift = ["drift", "--simulate", HEALTHY, "--db", str(root / "node.db")]
    assert main(drift) == ExitCode.COULD_NOT_RUN  # the node's own history holds none
    capsys.readouterr()
    monkeypatch.setenv("GPUREADY_CERTIFICATES", str(root / "reports" / "certificates"))
    code = main(drift)
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, (out, err)
    assert "NO DRIFT" in out
