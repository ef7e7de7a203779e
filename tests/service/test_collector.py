"""A fleet run collects garbage sparingly, and puts the process's setting back (issue 16)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli_drift import certify_into, run
from tests.cli.test_cli_drift import write_inventory as write_drift_inventory
from tests.remote.test_deadline import write_inventory
from validator.model import TransportName, Verdict
from validator.node.sparing_gc import FLEET_YOUNG_THRESHOLD, sparing_collector
from validator.service.collect_and_judge import Reach
from validator.store import Store


@pytest.fixture(autouse=True)
def default_threshold() -> Any:
    """Each test starts from CPython's default and leaves it as it found it."""
    before = gc.get_threshold()
    gc.set_threshold(700, *before[1:])
    yield
    gc.set_threshold(*before)


def test_the_young_threshold_is_raised_inside_and_put_back_after() -> None:
    before = gc.get_threshold()
    with sparing_collector():
        assert gc.get_threshold() == (FLEET_YOUNG_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before


def test_an_exception_puts_the_setting_back_too() -> None:
    before = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt), sparing_collector():
        raise KeyboardInterrupt
    assert gc.get_threshold() == before


@pytest.mark.parametrize("young", [0, 2 * FLEET_YOUNG_THRESHOLD])
def test_a_callers_own_setting_is_kept(young: int) -> None:
    """Collection turned off, or already rarer, is the caller's choice: left as it is."""
    gc.set_threshold(young, 10, 10)
    with sparing_collector():
        assert gc.get_threshold() == (young, 10, 10)
    assert gc.get_threshold() == (young, 10, 10)


def _seen_while_collecting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """``module.name`` wrapped to note the young threshold each time it runs."""
    seen: list[int] = []
    real = getattr(module, name)

    def noting(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, noting)
    return seen


def test_a_fleet_certify_collects_sparingly_and_one_node_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import validator.service.collect_and_judge
    from validator.service.certify_service import CertifyRequest, run_certify

    seen = _seen_while_collecting(monkeypatch, validator.service.collect_and_judge, "judge_node")
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {name: {"gpuready_simulate": "healthy-8x-h100-sxm"} for name in ("gpu-a", "gpu-b")},
    )
    fleet = CertifyRequest(
        reach=Reach(inventories=(str(inventory),), transport=TransportName.LOCAL)
    )
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(fleet, store)
        assert [node.verdict for node in outcome.report.nodes] == [Verdict.NOT_CERTIFIED] * 2
        assert seen == [FLEET_YOUNG_THRESHOLD] * 2
        assert gc.get_threshold()[0] == 700
        import validator.judge  # one node judges in certify_service, as the package names it

        one = _seen_while_collecting(monkeypatch, validator.judge, "judge_node")
        run_certify(CertifyRequest(simulate="healthy-8x-h100-sxm"), store)
    assert one == [700]  # one node: the default
    assert gc.get_threshold()[0] == 700


def test_a_fleet_drift_collects_sparingly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.remote import fanout

    db = tmp_path / "history.db"
    certify_into(db, "gpu01")
    inventory = write_drift_inventory(tmp_path, {"gpu01": "healthy-8x-h100-sxm"})
    seen = _seen_while_collecting(monkeypatch, fanout, "run_fanout")
    code, out, _ = run(capsys, "-i", str(inventory), "--transport", "local", "--db", str(db))
    assert (code, out.split()[:3]) == (0, ["gpu01", "NO", "DRIFT"])
    assert seen == [FLEET_YOUNG_THRESHOLD]
    assert gc.get_threshold()[0] == 700
