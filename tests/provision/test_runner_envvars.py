"""The environment the provisioning runner gives ansible-playbook."""

from __future__ import annotations

from validator.service import provision_service


def test_pipelining_is_on() -> None:
    # One SSH round trip per task: the settled (second) run is mostly per-task overhead.
    assert provision_service._ENVVARS["ANSIBLE_PIPELINING"] == "True"
    assert provision_service._ENVVARS["ANSIBLE_NOCOLOR"] == "1"
