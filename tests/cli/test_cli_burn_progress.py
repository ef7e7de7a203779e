"""Live burn progress of `gpuready certify` on one node; Ctrl-C; a simulated node's short burn."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import validator.cli.certify as certify_command
from validator.cli.burn_display import BurnDisplay, plain_line, render_burn, time_line
from validator.cli.main import main
from validator.model import Reason, TelemetrySample, Unavailable
from validator.node import collect as collector
from validator.node.burnin.burn_progress import BurnProgress, GpuProgress
from validator.node.collect import CollectRequest
from validator.store import Store

HEALTHY = "healthy-8x-h100-sxm"


def sample(
    power: float = 688.0, temperature: float = 71.0, clock: int = 1830, reasons: Any = ()
) -> TelemetrySample:
    return TelemetrySample(
        t_s=40.0,
        power_w=power,
        temperature_gpu_c=temperature,
        sm_clock_mhz=clock,
        clock_event_reasons=reasons,
    )


def progress(elapsed: float = 42.4, duration: float = 300.0, gpus: int = 8) -> BurnProgress:
    return BurnProgress(
        elapsed_s=elapsed,
        duration_s=duration,
        gpus=tuple(
            GpuProgress(
                index=index,
                state="running",
                tflops=712.0 + index,
                power_limit_w=700.0,
                sample=sample(power=680.0 + index, reasons=("sw_power_cap",) if index == 3 else ()),
            )
            for index in range(gpus)
        ),
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------ without a terminal


def test_plain_line_names_every_gpu_briefly() -> None:
    burn = BurnProgress(
        elapsed_s=40.7,
        duration_s=300.0,
        gpus=(
            GpuProgress(0, "running", 712.4, 700.0, sample()),
            GpuProgress(1, "running", 705.0, 700.0, sample(690.0, 68.0, 1815, ("sw_power_cap",))),
        ),
    )
    assert plain_line(burn) == (
        "burn 40/300 s: gpu0 712 TFLOPS 688/700 W 71 C 1830 MHz; "
        "gpu1 705 TFLOPS 690/700 W 68 C 1815 MHz sw_power_cap"
    )


def test_plain_line_shows_what_is_known_and_skips_the_rest() -> None:
    missing = Unavailable(Reason.NOT_MEASURED)
    burn = BurnProgress(
        elapsed_s=0.9,
        duration_s=10.0,
        gpus=(
            GpuProgress(0, "setup", None, None, None),  # no sample, no window yet
            GpuProgress(
                1,
                "running",
                None,
                None,
                TelemetrySample(t_s=1.0, power_w=300.0, clock_event_reasons=missing),
            ),
            GpuProgress(2, "failed", 0.012, 700.0, sample(reasons=("none",))),
        ),
    )
    assert plain_line(burn) == (
        "burn 0/10 s: gpu0 setup; gpu1 300 W; gpu2 failed 0.012 TFLOPS 688/700 W 71 C 1830 MHz"
    )


def test_a_plain_line_every_10_s_however_the_ticks_jitter() -> None:
    now = [0.0]
    out = io.StringIO()
    display = BurnDisplay(console=Console(file=out, width=80), clock=lambda: now[0])
    assert not display.interactive
    # The burn ticks about once a second, never exactly: a little early or late.
    # Ticks 10, 20 and 30 land a little before their line's 10 s are up.
    jitter = [0.01, 0.02, -0.03, -0.02, 0.04, 0.0, -0.01]
    printed_at = []
    for tick in range(36):
        now[0] = 1.0 + tick + jitter[tick % len(jitter)]
        before = out.getvalue().count("\n")
        display(progress(elapsed=now[0], duration=300.0, gpus=2))
        if out.getvalue().count("\n") > before:
            printed_at.append(tick)
    assert printed_at == [0, 10, 20, 30]
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("burn 1/300 s: gpu0 712 TFLOPS 680/700 W")
    assert lines[3].startswith("burn 30/300 s: ")  # 30.97 s into the burn
    assert all("\x1b" not in line for line in lines)


# ------------------------------------------------------------ on a terminal


def test_the_terminal_view_has_every_gpu_and_the_time_left() -> None:
    console = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    console.print(render_burn(progress(elapsed=42.4, duration=300.0, gpus=8)))
    text = console.export_text()
    assert "burn 0:42 / 5:00, 4:18 left" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("gpu")]
    assert [row[0] for row in rows] == [f"gpu{index}" for index in range(8)]
    assert rows[0][:5] == ["gpu0", "running", "712", "680/700", "W"]
    assert rows[3][-1] == "sw_power_cap"
    header = next(line for line in text.splitlines() if "GPU" in line).split()
    assert header == ["GPU", "state", "TFLOPS", "power", "temp", "SM", "clock", "clock", "events"]


def test_the_terminal_view_survives_missing_fields() -> None:
    console = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    burn = BurnProgress(
        elapsed_s=301.0, duration_s=300.0, gpus=(GpuProgress(5, "not run", None, None, None),)
    )
    console.print(render_burn(burn))
    console.print(render_burn(None))
    text = console.export_text()
    assert "burn 5:01 / 5:00, finishing" in text
    assert "gpu5" in text
    assert "not run" in text
    assert "collecting facts" in text


def test_time_line_over_an_hour() -> None:
    assert time_line(progress(elapsed=61.0, duration=3600.0 * 2)) == (
        "burn 1:01 / 2:00:00, 1:58:59 left"
    )


def test_on_a_terminal_the_display_is_live_and_prints_no_plain_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with BurnDisplay(console=console) as display:
        assert display.live is not None
        display(progress(elapsed=42.0, gpus=2))
        display.live.refresh()
    written = out.getvalue()
    assert "4:18 left" in written
    assert "gpu1" in written
    assert "burn 42/300 s:" not in written


# ------------------------------------------------------------ the command


def test_json_is_alone_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "certify", "--simulate", HEALTHY, "--burn", "2s", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["nodes"][0]["facts"]["burn"]["duration_s"] == 2.0
    assert out.lstrip().startswith("{")
    assert "simulated node" not in err  # --burn was given
    # Progress goes to stderr only: at least the first plain line got there.
    assert err.startswith("burn 1/2 s: gpu0 ")


def test_ctrl_c_during_the_burn_still_judges_reports_and_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = []

    def interrupting(self: BurnDisplay, burn: BurnProgress) -> None:
        calls.append(burn.elapsed_s)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(BurnDisplay, "__call__", interrupting)
    report_dir = tmp_path / "reports"
    db = tmp_path / "history.db"
    code, out, err = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "5s", "--no-color",
        "--report-dir", str(report_dir), "--db", str(db),
    )  # fmt: skip
    assert code == 130, err
    assert len(calls) == 2
    assert "Traceback" not in err
    document = json.loads((report_dir / "report.json").read_text())
    node = document["nodes"][0]
    burn = node["facts"]["burn"]
    assert burn["interrupted"] is True
    assert burn["elapsed_s"] < 5.0
    (run_finding,) = [f for f in node["findings"] if f["check"] == "burn.run"]
    assert run_finding["severity"] == "UNKNOWN"
    assert node["verdict"] != "CERTIFIED"
    assert "interrupted" in out  # the terminal report says so
    with Store.open(db, readonly=True) as store:
        (row,) = store.history()
    assert row.hostname == node["hostname"]
    assert row.verdict == node["verdict"]
    assert row.status == "interrupted"  # the run, too, says it was cut short


def test_ctrl_c_before_the_burn_is_one_line_and_exit_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(collector, "collect", interrupted)
    db = tmp_path / "history.db"
    code, out, err = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "5s", "--json", "--db", str(db)
    )
    assert code == 130
    assert out == ""
    assert err.splitlines() == ["gpuready: interrupted: nothing was judged"]
    with Store.open(db, readonly=True) as store:
        (row,) = store.history()
    assert row.status == "interrupted"
    assert row.hostname is None


class _Recorded:
    """The collector, recording the burn it was asked for and running a quick one instead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, burn_s: float | None) -> None:
        self.asked: list[Any] = []
        self.real = collector.collect
        self.burn_s = burn_s
        monkeypatch.setattr(collector, "collect", self)

    def __call__(self, source: Any, request: CollectRequest, *rest: Any) -> Any:
        burn = request.burn
        self.asked.append(burn)
        quick = dataclasses.replace(burn, duration_s=self.burn_s) if burn and self.burn_s else None
        return self.real(source, dataclasses.replace(request, burn=quick), *rest)


def test_a_simulated_node_burns_10_s_without_burn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = _Recorded(monkeypatch, burn_s=1.5)  # asked for 10 s, runs 1.5 s
    code, out, err = run(capsys, "certify", "--simulate", HEALTHY, "--json")
    assert code in (0, 1, 3), err
    json.loads(out)
    (burn,) = recorded.asked
    assert burn.duration_s == 10.0
    lines = err.splitlines()
    assert lines[0] == "simulated node: burning 10 s (give --burn to change)"
    assert lines[1].startswith("burn 1/2 s: gpu0 ")  # the note comes as the burn starts


def test_bad_input_on_a_simulated_node_stays_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("- 1\n")
    code, out, err = run(capsys, "certify", "--simulate", HEALTHY, "--policy", str(policy))
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "simulated node" not in err


def test_the_simulated_default_reaches_the_burn_result(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(certify_command, "SIMULATED_BURN_DEFAULT", "1s")
    code, out, err = run(capsys, "certify", "--simulate", HEALTHY, "--json")
    assert "simulated node: burning 1 s (give --burn to change)" in err.splitlines()
    burn = json.loads(out)["nodes"][0]["facts"]["burn"]
    assert burn["duration_s"] == 1.0
    assert burn["interrupted"] is False
    assert code in (0, 1), err


def test_an_explicit_burn_on_a_simulated_node_is_kept(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = _Recorded(monkeypatch, burn_s=None)
    code, _, err = run(capsys, "certify", "--simulate", HEALTHY, "--burn", "5m", "--json")
    assert code in (0, 1, 3), err
    (burn,) = recorded.asked
    assert burn.duration_s == 300.0
    assert "simulated node" not in err


def test_a_real_node_keeps_the_5_minute_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.node.sysfs_tree import H100, make_proc, make_sysfs
    from validator.node.live import pci_bus

    # A GPU node as the first-run check sees it: a GPU on the bus, the driver loaded.
    monkeypatch.setattr(pci_bus, "SYSFS_ROOT", str(make_sysfs(tmp_path, {"0000:18:00.0": H100})))
    monkeypatch.setattr(pci_bus, "PROC_ROOT", str(make_proc(tmp_path, nvidia_loaded=True)))
    recorded = _Recorded(monkeypatch, burn_s=None)
    code, _, err = run(capsys, "certify", "--json")
    assert code in (0, 1, 3), err
    (burn,) = recorded.asked
    assert burn.duration_s == 300.0
    assert "simulated node" not in err
