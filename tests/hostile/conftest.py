"""Fixtures of the hostile table: one certified baseline for the whole session."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.cases_certify import BURN_OK
from tests.hostile.data_files import BASELINE_HOSTS, HEALTHY_SCENARIO


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def hostile_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where ``certify`` certified two simulated hosts once, signed with ``key``.

    Holds ``history.db`` (both certificates), ``key``, ``inv.yml`` and ``rep/``
    (``certificates/<host>.json``). Cases copy what they need; nothing edits it.
    """
    from validator.cli.main import main

    where = tmp_path_factory.mktemp("hostile-baseline")
    hosts = "".join(
        f"    {host}:\n      gpuready_simulate: {HEALTHY_SCENARIO}\n" for host in BASELINE_HOSTS
    )
    (where / "inv.yml").write_text(f"all:\n  hosts:\n{hosts}", encoding="utf-8")
    (where / "key").write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
    argv = [
        "certify", "-i", str(where / "inv.yml"), "--transport", "local", "--burn", BURN_OK,
        "--db", str(where / "history.db"), "--report-dir", str(where / "rep"),
        "--sign-key", str(where / "key"),
    ]  # fmt: skip
    # Text streams that can be reconfigured, as a terminal's can (ansible asks).
    out, err = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())
    with (
        _environment(XDG_STATE_HOME=str(where / "state")),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(argv)
    if code != 0:
        raise RuntimeError(
            f"the baseline certify run exited {code}, not 0:\n{_text(out)}\n{_text(err)}"
        )
    for host in BASELINE_HOSTS:
        if not (where / "rep" / "certificates" / f"{host}.json").is_file():
            raise RuntimeError(f"the baseline run wrote no certificate file for {host}")
    return where


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    stream.seek(0)
    return stream.read()[-2000:]
