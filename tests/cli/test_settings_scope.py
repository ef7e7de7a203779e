"""Settings (config files, GPUREADY_* variables) where they do not apply, and the run's log.

A setting fills an option only where the invocation can use it: the command-line rules
that refuse combinations (drift's "--transport ssh needs an inventory", provision's
"--policy needs --certify") are about what was typed, never about a config file.
Everything is run as typed, through ``main``, with a private /etc file and user config.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.cli.main import main
from validator.error_tree import ExitCode

HEALTHY = "healthy-8x-h100-sxm"
HOST = "h100-node-01"




def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def certified(capsys: pytest.CaptureFixture[str], root: Path) -> Path:
    """A certified simulated node's certificate file (certify --report-dir's certificates/)."""
    reports = root / "reports"
    code, _, err = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "2s", "--report-dir", str(reports),
        "--db", str(root / "certify.db"),
    )  # fmt: skip
    assert code == ExitCode.OK, err
    path = reports / "certificates" / f"{HOST}.json"
    assert path.is_file()
    return path


# ------------------------------------------------------------------------------- drift


@pytest.mark.parametrize("how", ["file", "env"])
@pytest.mark.parametrize("extra", [(), ("--nhc",)])
def test_a_transport_setting_does_not_break_drift_on_a_node(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    places: dict[str, Path],
    how: str,
    extra: tuple[str, ...],
) -> None:
    """`transport: ssh` is for fleets; a node's drift (the NHC's) simply does not use it."""
    if how == "file":
        places["system"].write_text("transport: ssh\n")
    else:
        monkeypatch.setenv("GPUREADY_TRANSPORT", "ssh")
    db = places["root"] / "drift.db"
    code, out, err = run(capsys, "drift", "--simulate", HEALTHY, "--db", str(db), *extra)
    assert "needs an inventory" not in err
    # never certified: 3 (none checked), and 1 for NHC, which reads any non-zero as failed
    assert code == (ExitCode.NOT_CERTIFIED if extra else ExitCode.COULD_NOT_RUN)
    assert out.startswith("gpuready: ") if extra else HOST in out


def test_a_typed_transport_still_needs_an_inventory(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    db = places["root"] / "drift.db"
    code, _, err = run(
        capsys, "drift", "--simulate", HEALTHY, "--transport", "ssh", "--db", str(db)
    )
    assert code == ExitCode.BAD_INPUT
    assert "--transport ssh needs an inventory (-i)" in err


def test_a_typed_certificate_overrides_the_certificates_setting(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    root = places["root"]
    path = certified(capsys, root)
    places["user"].write_text(f"certificates: {path.parent}\n")
    db = root / "drift.db"
    code, out, err = run(capsys, "drift", "--simulate", HEALTHY, "--certificate", str(path),
                         "--db", str(db))  # fmt: skip
    assert "not both" not in err
    assert code == ExitCode.OK, err  # no drift from its own certificate
    assert out.startswith(f"{HOST}  NO DRIFT")


def test_a_typed_certificate_and_typed_certificates_still_clash(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    path = certified(capsys, places["root"])
    code, _, err = run(capsys, "drift", "--simulate", HEALTHY, "--certificate", str(path),
                       "--certificates", str(path.parent))  # fmt: skip
    assert code == ExitCode.BAD_INPUT
    assert "give --certificate FILE or --certificates DIR, not both" in err


# --------------------------------------------------------------------------- provision


def inventory(root: Path) -> Path:
    path = root / "hosts.ini"
    path.write_text("[gpu]\nnode1 ansible_connection=local\n")
    return path


@pytest.mark.parametrize(
    "setting", ["policy: p.yaml", "report_dir: reports", "sign_key: /etc/gpuready/sign.key"]
)
def test_provision_without_certify_ignores_certify_settings(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path], setting: str
) -> None:
    """The settings are certify's; provision without --certify does not refuse them.

    A secret on the command line is refused next, before anything runs: that it is
    the refusal shown proves the settings were passed over.
    """
    places["system"].write_text(setting + "\n")
    hosts = inventory(places["root"])
    code, _, err = run(capsys, "provision", "-i", str(hosts), "-e", "ansible_become_pass=x")
    assert code == ExitCode.BAD_INPUT
    assert "needs --certify" not in err
    assert "-e ansible_become_pass=...: ansible_become_pass holds a secret" in err


def test_provision_refuses_a_typed_certify_option_without_certify(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    places["system"].write_text("report_dir: reports\n")
    hosts = inventory(places["root"])
    code, _, err = run(capsys, "provision", "-i", str(hosts), "--policy", "p.yaml")
    assert code == ExitCode.BAD_INPUT
    assert "--policy needs --certify" in err


# ----------------------------------------------------------------------------- history


def test_history_show_and_certificate_read_the_db_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, places: dict[str, Path]
) -> None:
    db = places["root"] / "set.db"
    places["user"].write_text(f"db: {db}\n")
    code, _, err = run(capsys, "certify", "--simulate", HEALTHY, "--burn", "2s")
    assert code == ExitCode.OK, err
    assert db.is_file()
    code, out, err = run(capsys, "history", "show", "1")
    assert (code, err) == (0, "")
    assert f"{HOST}  CERTIFIED" in out
    code, out, err = run(capsys, "history", "certificate", HOST)
    assert (code, err) == (0, "")
    assert f'"hostname": "{HOST}"' in out
    # The variable stands over the file, here as for every command.
    monkeypatch.setenv("GPUREADY_DB", str(places["root"] / "other.db"))
    code, _, err = run(capsys, "history", "show", "1")
    assert code == ExitCode.BAD_INPUT
    assert f"no history yet at {places['root'] / 'other.db'}" in err


# ----------------------------------------------------------------------------- the log


@pytest.mark.parametrize("verbose", [(), ("-v",)])
def test_a_secret_on_the_command_line_never_reaches_the_log(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path], verbose: tuple[str, ...]
) -> None:
    log = places["root"] / "gpuready.log"
    hosts = inventory(places["root"])
    code, out, err = run(
        capsys, "--log-file", str(log), *verbose, "provision", "-i", str(hosts),
        "-e", "ansible_become_pass=hunter2", "--extra-vars=token=hunter2",
    )  # fmt: skip
    assert code == ExitCode.BAD_INPUT
    text = log.read_text()
    for where in (text, out, err):
        assert "hunter2" not in where
    assert "started: --log-file" in text  # the line is there, without the values
    assert " provision -i -e --extra-vars" in text


def test_with_verbose_an_error_is_printed_once(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    log = places["root"] / "gpuready.log"
    code, _, err = run(capsys, "--log-file", str(log), "-v", "certify", "--simulate", "no-such")
    assert code == ExitCode.BAD_INPUT
    assert sum("unknown scenario" in line for line in err.splitlines()) == 1, err
    assert any(line.startswith("gpuready: error: unknown scenario") for line in err.splitlines())
    # The log file still has it, once.
    assert sum(" ERROR " in line for line in log.read_text().splitlines()) == 1


def test_a_typed_public_key_overrides_the_sign_key_setting(
    capsys: pytest.CaptureFixture[str], places: dict[str, Path]
) -> None:
    """The drift timer's typed --public-key stands over a sign_key setting, not beside it."""
    import shutil

    keys = Path(__file__).resolve().parents[1] / "fixtures" / "keys"
    root = places["root"]
    key = root / "signer"
    shutil.copyfile(keys / "signer", key)
    key.chmod(0o600)
    reports = root / "reports"
    code, _, err = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "2s", "--report-dir", str(reports),
        "--sign-key", str(key), "--db", str(root / "certify.db"),
    )  # fmt: skip
    assert code == ExitCode.OK, err
    places["user"].write_text(f"sign_key: {key}\n")
    cert = reports / "certificates" / f"{HOST}.json"
    code, out, err = run(
        capsys, "drift", "--simulate", HEALTHY, "--certificate", str(cert),
        "--public-key", str(keys / "signer.pub"), "--db", str(root / "drift.db"),
    )  # fmt: skip
    assert "not both" not in err
    assert code == ExitCode.OK, err
    assert out.startswith(f"{HOST}  NO DRIFT")
    code, _, err = run(
        capsys, "drift", "--simulate", HEALTHY, "--certificate", str(cert), "--sign-key",
        str(key), "--public-key", str(keys / "signer.pub"), "--db", str(root / "drift.db"),
    )  # fmt: skip
    assert code == ExitCode.BAD_INPUT
    assert "give --sign-key or --public-key, not both" in err
