"""No test sees the machine's settings: /etc/gpuready, the user's config, GPUREADY_* variables.

conftest's autouse fixture gives every test a private config home and /etc file and takes
the GPUREADY_* variables away, keeping only those the test harness itself reads. Checked
in a pytest run of its own, started with such variables set, as a developer's shell has them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from validator.cli import settings
from validator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
INNER = "ISOLATION_INNER"  # set only for the inner run: the check the outer one starts


@pytest.mark.skipif(not os.environ.get(INNER), reason="run by the test below, in its own pytest")
def test_no_setting_of_the_machine_reaches_a_test(capsys: pytest.CaptureFixture[str]) -> None:
    assert Path("/etc/gpuready/config.yaml") != settings.SYSTEM_CONFIG
    for name in ("GPUREADY_TRANSPORT", "GPUREADY_DB", "GPUREADY_LOG_FILE"):
        assert name not in os.environ
    assert main(["config", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["setting"]: row["source"] for row in rows} == {
        setting.key: "default" for setting in settings.SETTINGS
    }
    print("kept:", os.environ.get("GPUREADY_SCREENSHOT_DIR"))


def test_the_machines_settings_stay_outside(tmp_path: Path) -> None:
    home = tmp_path / "config"
    (home / "gpuready").mkdir(parents=True)
    (home / "gpuready" / "config.yaml").write_text("transport: local\nparallel: 3\n")
    env = {
        **os.environ,
        INNER: "1",
        "XDG_CONFIG_HOME": str(home),
        "GPUREADY_TRANSPORT": "ssh",
        "GPUREADY_DB": str(tmp_path / "machine.db"),
        "GPUREADY_LOG_FILE": str(tmp_path / "machine.log"),
        "GPUREADY_SCREENSHOT_DIR": str(tmp_path / "shots"),  # the harness's: kept
    }
    name = f"{Path(__file__).relative_to(REPO)}::test_no_setting_of_the_machine_reaches_a_test"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", name],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert f"kept: {tmp_path / 'shots'}" in done.stdout
    assert not (tmp_path / "machine.log").exists()
