"""One certify run reads its policy file once: one node, or every host of an inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.remote.test_deadline import write_inventory
from validator.judge import policy as policy_module
from validator.judge.policy import Policy
from validator.model import TransportName
from validator.service import collect_and_judge
from validator.service.certify_service import CertifyRequest, run_certify
from validator.service.collect_and_judge import Reach
from validator.store import Store

SCENARIO = "healthy-8x-h100-sxm"


def _counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each policy file the run loads, in order (the real loader does the loading)."""
    loaded: list[str] = []
    real = policy_module.load_policy

    def counted(path: Any) -> Policy:
        loaded.append(str(path))
        return real(path)

    monkeypatch.setattr(collect_and_judge, "load_policy", counted)
    return loaded


@pytest.mark.parametrize("fleet", [False, True], ids=["one node", "a fleet"])
def test_certify_reads_the_policy_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fleet: bool
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("nvcc_version: '12.4'\n")
    loaded = _counting_loads(monkeypatch)
    if fleet:
        inventory = write_inventory(
            tmp_path / "hosts.yml",
            {name: {"gpuready_simulate": SCENARIO} for name in ("gpu-a", "gpu-b")},
        )
        request = CertifyRequest(
            reach=Reach(inventories=(str(inventory),), transport=TransportName.LOCAL),
            policy_path=str(policy),
        )
    else:
        request = CertifyRequest(simulate=SCENARIO, policy_path=str(policy))
    with Store.open(tmp_path / "history.db") as store:
        outcome = run_certify(request, store)
    assert loaded == [str(policy)]
    # The policy that was read is the one every node was judged by.
    nodes = outcome.report.nodes
    assert len(nodes) == (2 if fleet else 1)
    for node in nodes:
        (nvcc,) = [f for f in node.findings if f.check == "versions.nvcc"]
        assert "12.4" in nvcc.expected, nvcc
