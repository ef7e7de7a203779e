"""The shipped agent: one reproducible zipapp that runs anywhere Python 3.9+ is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from validator.remote import bundle
from validator.remote.bundle import AgentBundle, build_agent, clear_agent_cache, write_agent


def run_agent(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(
        [sys.executable, str(path), *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


def test_bundle_is_reproducible_and_named_by_its_hash() -> None:
    clear_agent_cache()
    first = build_agent()
    clear_agent_cache()
    second = build_agent()
    assert first.data == second.data
    assert first.filename == f"gpuready-agent-{first.sha256[:16]}.pyz"
    names = zipfile.ZipFile(__import__("io").BytesIO(first.data)).namelist()
    assert "__main__.py" in names
    assert "pynvml.py" in names
    assert "validator/node/scenarios/healthy-8x-h100-sxm.json" in names
    assert not any(
        name.startswith(("validator/judge", "validator/cli", "validator/report")) for name in names
    )


def test_threads_asking_at_once_build_the_agent_once(monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[int] = []
    real_entries = bundle._entries

    def slow_entries(root: Path) -> list[tuple[str, bytes]]:
        builds.append(threading.get_ident())
        time.sleep(0.2)  # long enough that every thread asks while the first builds
        return real_entries(root)

    monkeypatch.setattr(bundle, "_entries", slow_entries)
    clear_agent_cache()
    start = threading.Barrier(8)
    got: list[AgentBundle] = []

    def ask() -> None:
        start.wait()
        got.append(build_agent())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    clear_agent_cache()  # the next test builds from the real entries again
    assert len(builds) == 1
    assert len(got) == 8
    assert all(one is got[0] for one in got)


def test_agent_unpacks_once_and_runs_from_bytecode(tmp_path: Path) -> None:
    path = write_agent(tmp_path)
    first = run_agent(path, "--simulate", "healthy-8x-h100-sxm")
    assert first.returncode == 0, first.stderr
    unpacked = tmp_path / path.name[: -len(".pyz")]
    assert (unpacked / "validator" / "node" / "agent.py").is_file()
    assert list(unpacked.rglob("__pycache__"))
    second = run_agent(path, "--simulate", "healthy-8x-h100-sxm")
    assert json.loads(second.stdout)["gpus"] == json.loads(first.stdout)["gpus"]


def test_agent_runs_from_the_zip_where_it_cannot_unpack(tmp_path: Path) -> None:
    path = write_agent(tmp_path)
    tmp_path.chmod(0o555)
    try:
        if os.access(tmp_path, os.W_OK):  # root ignores directory modes: use a read-only copy path
            (tmp_path / path.name[: -len(".pyz")]).write_text("not a directory")
        done = run_agent(path, "--simulate", "one-gpu-power-capped")
    finally:
        tmp_path.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["source_detail"] == "one-gpu-power-capped"


def test_agent_bad_scenario_is_exit_2_with_one_line(tmp_path: Path) -> None:
    done = run_agent(write_agent(tmp_path), "--simulate", "no-such-node")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "unknown scenario 'no-such-node'" in done.stderr
