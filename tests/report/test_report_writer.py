"""write_reports: all three files, atomically, or nothing."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.report.test_report_samples import failing_node, fleet_report, healthy_node, sample_report
from validator.error_tree import ReportError, UnsafePathError
from validator.model import Report
from validator.report import writer
from validator.report.html import render_html
from validator.report.writer import write_reports

NAMES = {"report.json", "report.html", "junit.xml"}


def test_writes_three_files_and_creates_the_directory(tmp_path: Path) -> None:
    target = tmp_path / "out" / "run-1"
    paths = write_reports(sample_report(), target)
    assert paths == {
        "json": target / "report.json",
        "html": target / "report.html",
        "junit": target / "junit.xml",
    }
    assert {p.name for p in target.iterdir()} == NAMES
    assert json.loads(paths["json"].read_text())["nodes"][1]["hostname"] == "gpu-node-02"
    assert 'data-verdict="NOT_CERTIFIED"' in paths["html"].read_text()
    root = ET.fromstring(paths["junit"].read_bytes())  # noqa: S314 - our own file
    assert root.get("failures") == "2"
    assert paths["html"].stat().st_mode & 0o777 == 0o644


def test_overwrites_previous_reports(tmp_path: Path) -> None:
    write_reports(sample_report(failing_node()), tmp_path)
    write_reports(sample_report(healthy_node()), tmp_path)
    assert 'data-verdict="CERTIFIED"' in (tmp_path / "report.html").read_text()
    assert {p.name for p in tmp_path.iterdir()} == NAMES


def test_failure_on_second_file_keeps_the_previous_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_reports(sample_report(healthy_node()), tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in NAMES}

    real_replace = os.replace
    calls: list[str] = []

    def flaky_replace(
        src: str | os.PathLike[str], dst: str | os.PathLike[str], **relative: int
    ) -> None:
        calls.append(Path(dst).name)
        if Path(dst).name == "report.html":
            raise OSError(28, "No space left on device")
        real_replace(src, dst, **relative)

    monkeypatch.setattr(os, "replace", flaky_replace)
    with pytest.raises(ReportError, match="No space left on device") as info:
        write_reports(sample_report(failing_node()), tmp_path)

    assert calls[:2] == ["report.json", "report.html"]  # the first file had been replaced
    assert str(tmp_path) in str(info.value)
    after = {name: (tmp_path / name).read_bytes() for name in NAMES}
    assert after == before  # report.json rolled back to its previous content
    assert {p.name for p in tmp_path.iterdir()} == NAMES  # no temp or backup files left


def test_failure_on_first_write_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", no_fsync)
    with pytest.raises(ReportError, match="Input/output error"):
        write_reports(sample_report(), tmp_path / "fresh")
    assert list((tmp_path / "fresh").iterdir()) == []


def test_failure_without_previous_reports_removes_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = os.replace

    def fail_on_junit(
        src: str | os.PathLike[str], dst: str | os.PathLike[str], **relative: int
    ) -> None:
        if Path(dst).name == "junit.xml":
            raise OSError(13, "Permission denied")
        real_replace(src, dst, **relative)

    monkeypatch.setattr(os, "replace", fail_on_junit)
    with pytest.raises(ReportError):
        write_reports(sample_report(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_render_error_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_reports(sample_report(healthy_node()), tmp_path)
    before = (tmp_path / "report.json").read_bytes()

    def broken(report: object) -> str:
        raise ReportError("report template junit line 1: boom; fix the template")

    monkeypatch.setattr(writer, "render_junit", broken)
    with pytest.raises(ReportError, match="boom"):
        write_reports(sample_report(failing_node()), tmp_path)
    assert (tmp_path / "report.json").read_bytes() == before


def test_unwritable_directory_is_one_line_naming_path_and_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")
    with pytest.raises(ReportError) as info:
        write_reports(sample_report(), blocker / "reports")
    message = str(info.value)
    assert "\n" not in message
    assert str(blocker / "reports") in message
    assert "choose a writable output directory" in message


def test_a_fleet_writes_the_summary_and_each_hosts_final_result(tmp_path: Path) -> None:
    report = fleet_report(5, failing=(1,), unknown=())
    # What the fan-out wrote as the host's result arrived, before the fleet was judged.
    stale = tmp_path / "hosts" / "gpu03.json"
    stale.parent.mkdir()
    stale.write_text('{"hostname": "gpu03", "verdict": "UNKNOWN"}\n')
    paths = write_reports(report, tmp_path)
    document = json.loads(paths["json"].read_text())
    assert document["form"] == "summary"
    for node in document["nodes"]:
        full = json.loads((tmp_path / node["result_file"]).read_text())
        assert full["hostname"] == node["hostname"]
        assert full["verdict"] == node["verdict"]
    assert json.loads(stale.read_text())["verdict"] == "CERTIFIED"
    page = paths["html"].read_text()
    assert 'href="hosts/gpu03.json"' in page
    # Asked for the full form, report.json is every field again.
    paths = write_reports(report, tmp_path, json_form="full")
    assert "form" not in json.loads(paths["json"].read_text())


def test_a_render_error_midway_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_reports(sample_report(healthy_node()), tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in NAMES}

    def broken(report: object, files: object = None, details: object = None) -> Iterator[str]:
        yield "<!DOCTYPE html>"
        raise ReportError("report template report.html.j2 line 9: boom; fix the template")

    monkeypatch.setattr(writer, "html_chunks", broken)
    with pytest.raises(ReportError, match="boom"):
        write_reports(sample_report(failing_node()), tmp_path)
    assert {name: (tmp_path / name).read_bytes() for name in NAMES} == before
    assert {p.name for p in tmp_path.iterdir()} == NAMES


def test_host_results_are_readable_like_the_report_that_links_them(tmp_path: Path) -> None:
    write_reports(fleet_report(3, failing=(1,), unknown=()), tmp_path)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "hosts").iterdir()}
    # The failing node's full section is a page of its own, shared like the rest.
    assert modes == {
        "gpu01.json": 0o644,
        "gpu02.json": 0o644,
        "gpu02.html": 0o644,
        "gpu03.json": 0o644,
    }
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o644


def test_a_failing_node_gets_a_page_of_its_own_and_a_certified_one_none(tmp_path: Path) -> None:
    stale = tmp_path / "hosts" / "gpu01.html"
    stale.parent.mkdir(parents=True)
    stale.write_text("<p>gpu01 when it failed</p>")
    report = fleet_report(3, failing=(1,), unknown=())
    write_reports(report, tmp_path)
    assert not stale.exists()  # certified now: that page is not this run's
    assert sorted(p.name for p in (tmp_path / "hosts").glob("*.html")) == ["gpu02.html"]
    detail = (tmp_path / "hosts" / "gpu02.html").read_text()
    # The node's full section, as a report of that node alone shows it.
    (node,) = [n for n in report.nodes if n.hostname == "gpu02"]
    alone = Report(
        generated_at=report.generated_at, tool_version=report.tool_version, nodes=(node,)
    )
    assert detail == render_html(alone)
    assert "<h3>GPUs</h3>" in detail
    page = (tmp_path / "report.html").read_text()
    assert 'href="hosts/gpu02.html"' in page
    assert page.count('class="detail-file"') == 1


def test_a_detail_page_that_cannot_be_written_names_it(tmp_path: Path) -> None:
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "gpu02.html").mkdir()  # a folder in the way: refused, not replaced
    with pytest.raises(UnsafePathError, match=r"hosts/gpu02\.html is a folder, not a regular"):
        write_reports(fleet_report(3, failing=(1,), unknown=()), tmp_path)
    assert not (tmp_path / "report.html").exists()
