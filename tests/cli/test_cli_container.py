"""The container checks as a user runs them: certify --simulate, terminal, JSON, the image."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.cli.test_cli import SCHEMA, run
from validator.error_tree import ExitCode

IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
REGENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


def test_a_stale_cdi_spec_shows_its_finding_and_action_in_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "certify", "--simulate", "cdi-spec-stale", "--burn", "2s")
    assert code == ExitCode.NOT_CERTIFIED
    line = next(line for line in out.splitlines() if "container.cdi" in line)
    assert "FAIL" in line
    assert "gpu7" in line
    assert REGENERATE in line
    assert "fix the software stack" in line


def test_a_stale_cdi_spec_in_the_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "certify", "--simulate", "cdi-spec-stale", "--burn", "2s", "--json",
        "--container-image", IMAGE,
    )  # fmt: skip
    document = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(document)
    node = document["nodes"][0]
    assert node["verdict"] == "NOT_CERTIFIED"
    failed = {(f["check"], f["gpu_index"]): f for f in node["findings"] if f["severity"] == "FAIL"}
    assert set(failed) == {("container.cdi", 7), ("container.gpus_visible", None)}
    assert failed["container.cdi", 7]["action"] == "fix_software_stack"
    assert "listed 7 of the node's 8 GPUs" in failed["container.gpus_visible", None]["message"]
    argv = node["facts"]["container"]["run"]["argv"]
    assert argv[:4] == ["docker", "run", "--rm", "--name"]
    assert argv[5:7] == ["--device", "nvidia.com/gpu=all"]
    assert code == ExitCode.NOT_CERTIFIED


def test_a_healthy_node_certifies_with_the_container_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "2s", "--json",
        "--container-image", IMAGE,
    )  # fmt: skip
    node = json.loads(out)["nodes"][0]
    assert node["verdict"] == "CERTIFIED", [f for f in node["findings"] if f["severity"] != "PASS"]
    visible = next(f for f in node["findings"] if f["check"] == "container.gpus_visible")
    assert visible["severity"] == "PASS"
    assert code == ExitCode.OK


def test_the_policys_image_is_run_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"container:\n  required: true\n  image: {IMAGE}\n")
    _, out, _ = run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "0", "--json",
        "--policy", str(policy),
    )  # fmt: skip
    checks = {f["check"] for f in json.loads(out)["nodes"][0]["findings"]}
    assert "container.gpus_visible" in checks


@pytest.mark.parametrize("image", ["--privileged", "-v/:/host", "bad image", ""])
def test_an_image_that_is_no_reference_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], image: str
) -> None:
    code, out, err = run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", f"--container-image={image}"
    )
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert "--container-image" in err
    assert "Traceback" not in err


def test_a_policy_image_that_is_no_reference_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("container:\n  image: --privileged\n")
    code, _, err = run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--policy", str(policy)
    )
    assert code != ExitCode.OK
    assert "container.image" in err
    assert len(err.strip().splitlines()) == 1
