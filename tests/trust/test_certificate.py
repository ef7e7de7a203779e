"""Certificates: issued only to certified nodes, sealed by a digest, optionally signed."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_simulated
from tests.judge.test_judge_healthy import healthy_node, judge, with_gpu, with_gpu_burn
from validator.certificate import (
    BANDWIDTH_SCHEMA_VERSION,
    CERTIFICATE_SCHEMA_VERSION,
    CERTIFIED_ALL_REDUCE_FIELDS,
    CERTIFIED_PEER_FIELDS,
    INTERCONNECT_SCHEMA_VERSION,
    Certificate,
    CertificateError,
    CertifiedAllReduce,
    CertifiedPeer,
    canonical_bytes,
    certificate_from_json,
    certificate_to_json,
    issue_certificate,
    sign,
    verify_certificate,
)
from validator.drift import compare
from validator.error_tree import BadInputError
from validator.judge import Policy, judge_node
from validator.model import (
    AllReduce,
    Bandwidth,
    BurnStatus,
    ErrorCounters,
    Finding,
    Interconnect,
    NodeResult,
    NvLinkErrorCounts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)
from validator.node.burnin.burn_config import BurnConfig
from validator.signing import load_key

ISSUED = datetime.datetime(2025, 3, 1, 12, 30, 5, tzinfo=datetime.timezone.utc)
KEY = b"0123456789abcdef-site-secret"


def certified() -> NodeResult:
    result = judge(with_gpu_burn(healthy_node(), 3, tflops=731.5))
    assert result.verdict is Verdict.CERTIFIED
    return result


def issued() -> Certificate:
    return issue_certificate(certified(), now=ISSUED, tool_version="9.9.9")


def test_certificate_holds_the_defining_facts() -> None:
    cert = issued()
    assert cert.schema_version == CERTIFICATE_SCHEMA_VERSION
    assert cert.hostname == "gpu-node-01"
    assert cert.issued_at == "2025-03-01T12:30:05+00:00"
    assert cert.tool_version == "9.9.9"
    assert cert.sku == "h100-sxm"
    assert cert.policy_digest == certified().policy_digest
    assert len(cert.policy_digest) == 64
    assert (cert.driver_version, cert.cuda_driver_version, cert.kernel_module_version) == (
        "550.90.07",
        "12.4",
        "550.90.07",
    )
    assert (cert.nvcc_version, cert.cudnn_version) == ("12.4.131", "9.1.0")
    assert [gpu.index for gpu in cert.gpus] == list(range(8))
    gpu3 = cert.gpus[3]
    assert gpu3.uuid == "GPU-00000003-aaaa-bbbb-cccc-000000000000"
    assert gpu3.serial == "1652323000003"
    assert gpu3.name == "NVIDIA H100 80GB HBM3"
    assert gpu3.vbios_version == "96.00.99.00.01"
    assert gpu3.memory_total_mib == 81559
    assert (gpu3.power_limit_enforced_w, gpu3.power_limit_default_w) == (700.0, 700.0)
    assert (gpu3.pcie_gen_max, gpu3.pcie_width_current) == (5, 16)
    assert gpu3.burn_tflops == 731.5
    assert cert.gpus[2].burn_tflops == 722.0
    assert gpu3.ecc_volatile_uncorrected == 0
    assert gpu3.remapped_rows_uncorrectable == 0
    assert gpu3.persistence_mode is True
    # H100 has no page retirement: not measured is None, never a made-up 0.
    assert gpu3.retired_pages_sbe is None
    assert gpu3.retired_pages_dbe is None
    assert cert.signature is None


def test_digest_is_sha256_of_canonical_json_without_the_seal() -> None:
    cert = issued()
    body = canonical_bytes(cert)
    assert cert.digest == hashlib.sha256(body).hexdigest()
    data = json.loads(body)
    assert "digest" not in data
    assert "signature" not in data
    assert data["hostname"] == "gpu-node-01"
    assert b" " not in body.replace(b"NVIDIA H100 80GB HBM3", b"")
    assert list(data) == sorted(data)
    # signing adds a seal, it does not change what is sealed
    assert canonical_bytes(sign(cert, KEY)) == body


def test_certificate_of_a_simulated_node_with_burn() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0))
    result = judge_node(facts, Policy(require_burn=False))
    assert result.verdict is Verdict.CERTIFIED
    cert = issue_certificate(result, now=ISSUED)
    assert cert.hostname == result.hostname == facts.hostname
    assert facts.burn is not None
    assert [gpu.burn_tflops for gpu in cert.gpus] == [g.tflops for g in facts.burn.gpus]
    assert all(gpu.burn_tflops is not None and gpu.burn_tflops > 100 for gpu in cert.gpus)
    assert [gpu.uuid for gpu in cert.gpus] == [g.uuid for g in facts.gpus]
    verify_certificate(certificate_from_json(certificate_to_json(cert)), None)


def test_no_burn_gives_no_tflops() -> None:
    result = judge(healthy_node(burn=None), Policy(require_burn=False))
    assert result.verdict is Verdict.CERTIFIED
    cert = issue_certificate(result, now=ISSUED)
    assert {gpu.burn_tflops for gpu in cert.gpus} == {None}


def test_only_a_certified_node_gets_a_certificate() -> None:
    result = judge(with_gpu(healthy_node(), 5, power_limit_enforced_w=500.0))
    assert result.verdict is Verdict.NOT_CERTIFIED
    with pytest.raises(ValueError, match="gpu-node-01 is NOT_CERTIFIED, not CERTIFIED"):
        issue_certificate(result)


def test_naive_time_is_taken_as_utc_and_default_is_now() -> None:
    naive = issue_certificate(certified(), now=datetime.datetime(2025, 1, 2, 3, 4, 5))
    assert naive.issued_at == "2025-01-02T03:04:05+00:00"
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    now = issue_certificate(certified())
    after = datetime.datetime.now(datetime.timezone.utc)
    assert before <= datetime.datetime.fromisoformat(now.issued_at) <= after


def test_json_round_trip_is_exact_and_verifies() -> None:
    for cert in (issued(), sign(issued(), KEY)):
        text = certificate_to_json(cert)
        back = certificate_from_json(text)
        assert back == cert
        assert certificate_to_json(back) == text
        verify_certificate(back, KEY if cert.signature else None)


def test_a_certificate_file_has_a_line_per_field_and_per_gpu() -> None:
    cert = sign(issued(), KEY)
    text = certificate_to_json(cert)
    lines = text.splitlines()
    assert text.endswith("}\n")
    assert lines[0] == "{"
    assert lines[-1] == "}"
    assert json.loads(text)["digest"] == cert.digest
    gpus = lines.index('  "gpus": [')
    rows = lines[gpus + 1 : gpus + 1 + len(cert.gpus)]
    assert [json.loads(row.strip().rstrip(","))["index"] for row in rows] == [
        gpu.index for gpu in cert.gpus
    ]
    assert lines[gpus + 1 + len(cert.gpus)] in ("  ]", "  ],")
    fields = [line for line in lines if line.startswith('  "')]
    names = [line.split('"')[1] for line in fields]
    assert names == sorted(json.loads(text))


def test_digest_is_stable_across_key_order() -> None:
    cert = sign(issued(), KEY)
    data = json.loads(certificate_to_json(cert))
    reordered = {key: data[key] for key in reversed(list(data))}
    reordered["gpus"] = [{k: gpu[k] for k in reversed(list(gpu))} for gpu in data["gpus"]]
    text = json.dumps(reordered, indent=4)
    assert text.index('"signature"') < text.index('"hostname"')  # really reordered
    back = certificate_from_json(text)
    assert canonical_bytes(back) == canonical_bytes(cert)
    verify_certificate(back, KEY)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"power_limit_enforced_w": 700.0', '"power_limit_enforced_w": 650.0'),
        ('"burn_tflops": 731.5', '"burn_tflops": 741.5'),
        ('"burn_tflops": 731.5', '"burn_tflops": 731.50001'),
        ('"memory_total_mib": 81559', '"memory_total_mib": 81560'),
        # the same value written as another JSON number still changes the sealed bytes
        ('"power_limit_enforced_w": 700.0', '"power_limit_enforced_w": 700'),
        ('"driver_version": "550.90.07"', '"driver_version": "550.90.12"'),
        ('"hostname": "gpu-node-01"', '"hostname": "gpu-node-02"'),
        ('"persistence_mode": true', '"persistence_mode": false'),
        ('"retired_pages_dbe": null', '"retired_pages_dbe": 0'),
        ('"issued_at": "2025-03-01T12:30:05+00:00"', '"issued_at": "2026-03-01T12:30:05+00:00"'),
    ],
)
def test_any_edit_fails_verification(old: str, new: str) -> None:
    text = certificate_to_json(issued())
    assert old in text
    edited = certificate_from_json(text.replace(old, new, 1))
    with pytest.raises(CertificateError, match="edited after issue") as caught:
        verify_certificate(edited, None)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, BadInputError)


def test_edited_digest_fails() -> None:
    cert = issued()
    text = certificate_to_json(cert).replace(cert.digest, "0" * 64)
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(certificate_from_json(text), None)


def test_signature_verifies_with_its_key_only() -> None:
    cert = sign(issued(), KEY)
    assert cert.signature is not None
    assert re.fullmatch(r"[0-9a-f]{64}", cert.signature)
    verify_certificate(cert, KEY)
    with pytest.raises(CertificateError, match="signature that does not match the key"):
        verify_certificate(cert, b"another key")


def test_signed_certificate_edited_and_re_digested_fails() -> None:
    # Whoever edits the file can recompute the digest; only the key can re-sign.
    cert = sign(issued(), KEY)
    forged = dataclasses.replace(cert, driver_version="555.42.02")
    forged = dataclasses.replace(forged, digest=hashlib.sha256(canonical_bytes(forged)).hexdigest())
    verify_certificate(dataclasses.replace(forged, signature=None), None)  # digest is consistent
    with pytest.raises(CertificateError, match="does not match the key"):
        verify_certificate(forged, KEY)


def test_signed_certificate_needs_the_key() -> None:
    with pytest.raises(CertificateError, match="is signed: give the key file with --sign-key"):
        verify_certificate(sign(issued(), KEY), None)


def test_unsigned_certificate_checked_with_a_key_fails() -> None:
    with pytest.raises(CertificateError, match="is not signed, but a key was given"):
        verify_certificate(issued(), KEY)


def test_stripping_the_signature_is_caught_when_a_key_is_given() -> None:
    stripped = dataclasses.replace(sign(issued(), KEY), signature=None)
    with pytest.raises(CertificateError, match="not signed"):
        verify_certificate(stripped, KEY)


def test_empty_key_cannot_sign() -> None:
    with pytest.raises(ValueError, match="empty key"):
        sign(issued(), b"")


def test_load_key(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(b"s3cret-value\n")
    assert load_key(key_file).secret == b"s3cret-value"
    assert load_key(str(key_file)).secret == b"s3cret-value"
    # a trailing newline does not make another key
    cert = sign(issued(), load_key(key_file))
    verify_certificate(cert, b"s3cret-value")


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "does not exist"), (b"", "is empty"), (b" \n\n", "is empty"), ("dir", "directory")],
)
def test_load_key_refuses_missing_or_empty(
    tmp_path: Path, content: bytes | str | None, message: str
) -> None:
    key_file = tmp_path / "key"
    if content == "dir":
        key_file.mkdir()
    elif isinstance(content, bytes):
        key_file.write_bytes(content)
    with pytest.raises(BadInputError, match=message) as caught:
        load_key(key_file)
    assert str(key_file) in str(caught.value)
    assert "\n" not in str(caught.value)


def _mutated(change: str) -> str:
    data = json.loads(certificate_to_json(issued()))
    if change == "unknown":
        data["extra"] = 1
    elif change == "missing":
        del data["hostname"]
    elif change == "type":
        data["gpus"][2]["memory_total_mib"] = "81559"
    elif change == "bool_as_int":
        data["gpus"][0]["pcie_gen_max"] = True
    elif change == "null_required":
        data["hostname"] = None
    elif change == "gpus_not_list":
        data["gpus"] = {}
    elif change == "gpu_unknown":
        data["gpus"][1]["colour"] = "green"
    elif change == "newer":
        data["schema_version"] = CERTIFICATE_SCHEMA_VERSION + 1
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "invalid JSON at line 1 column 2"),
        ("[1, 2]", "not an object"),
        (_mutated("unknown"), "unknown field 'extra'"),
        (_mutated("missing"), "lacks the field 'hostname'"),
        (
            _mutated("type"),
            r"certificate: 'gpus\[2\].memory_total_mib' must be a whole number >= 0, "
            r"got '81559' \(str\)$",
        ),
        (_mutated("bool_as_int"), r"'gpus\[0\].pcie_gen_max' must be a whole number >= 0"),
        (_mutated("null_required"), "certificate: 'hostname' must be a string, got null$"),
        (_mutated("gpus_not_list"), r"'gpus' must be a list of GPUs, got \{\} \(dict\)$"),
        (_mutated("gpu_unknown"), r"unknown field 'gpus\[1\].colour'; valid fields: index, "),
        (_mutated("newer"), "written by a newer gpuready"),
    ],
)
def test_bad_certificate_json_is_one_line(text: str, message: str) -> None:
    with pytest.raises(CertificateError, match=message) as caught:
        certificate_from_json(text)
    assert "\n" not in str(caught.value)


def test_unsigned_certificate_json_may_omit_signature() -> None:
    cert = issued()
    data = json.loads(certificate_to_json(cert))
    del data["signature"]
    back = certificate_from_json(json.dumps(data))
    assert back == cert
    verify_certificate(back, None)


# ---------------------------------------------- one validation mechanism (validator.fields)


def _cert_error(text: str) -> str:
    with pytest.raises(CertificateError) as caught:
        certificate_from_json(text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def _edited(**changes: object) -> dict[str, object]:
    data: dict[str, object] = json.loads(certificate_to_json(issued()))
    data.update(changes)
    return data


def _with_gpu(position: int, **changes: object) -> str:
    data = json.loads(certificate_to_json(issued()))
    data["gpus"][position].update(changes)
    return json.dumps(data)


def test_unknown_field_names_the_closest() -> None:
    data = _edited()
    data["hostnme"] = data.pop("hostname")
    assert _cert_error(json.dumps(data)) == (
        "certificate: unknown field 'hostnme' (did you mean 'hostname'?); valid fields: "
        "schema_version, hostname, issued_at, tool_version, policy_digest, sku, driver_version, "
        "cuda_driver_version, kernel_module_version, nvcc_version, cudnn_version, gpus, dcgm, "
        "peers, all_reduce, provenance, certified_gpus, network, gpudirect, host, container, "
        "fabric, digest, signature"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _with_gpu(3, memory_total_mib=-1),
            "certificate: 'gpus[3].memory_total_mib' must be a whole number >= 0, got -1 (int)",
        ),
        (
            _with_gpu(0, index=-2),
            "certificate: 'gpus[0].index' must be a whole number >= 0, got -2 (int)",
        ),
        (
            _with_gpu(1, power_limit_default_w=-700.0),
            "certificate: 'gpus[1].power_limit_default_w' must be a number >= 0, "
            "got -700.0 (float)",
        ),
        (
            json.dumps(_edited(schema_version=0)),
            "certificate: 'schema_version' must be a whole number >= 1, got 0 (int)",
        ),
        (
            json.dumps(_edited(gpus=[1])),
            "certificate: 'gpus[0]' must be a JSON object, got 1 (int)",
        ),
    ],
)
def test_out_of_range_and_wrong_kind(text: str, message: str) -> None:
    assert _cert_error(text) == message


@pytest.mark.parametrize(
    ("literal", "shown"),
    [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("1e999", "inf")],
)
def test_nan_and_infinity_are_refused(literal: str, shown: str) -> None:
    text = certificate_to_json(issued()).replace(
        '"burn_tflops": 731.5', f'"burn_tflops": {literal}'
    )
    assert literal in text
    assert _cert_error(text) == (
        f"certificate: 'gpus[3].burn_tflops' must be a finite number, got {shown} (float)"
    )


def test_duplicate_keys_are_refused() -> None:
    text = certificate_to_json(issued())
    top = text.replace('"hostname": "gpu-node-01"', '"hostname": "gpu-node-01", "hostname": "x"')
    assert _cert_error(top) == "certificate: duplicate key 'hostname'"
    nested = text.replace('"index": 1,', '"index": 1, "index": 2,')
    assert _cert_error(nested) == "certificate: duplicate key 'gpus[1].index'"


def test_a_long_bad_value_is_shown_as_an_excerpt() -> None:
    signature = "0123456789abcdef" * 1000
    message = _cert_error(json.dumps(_edited(signature=[signature])))
    assert message.startswith("certificate: 'signature' must be a string, got ['0123456789")
    assert message.endswith("... (list)")
    assert len(message) < 120


def test_bad_json_keeps_its_line_and_column() -> None:
    assert _cert_error('{\n  "hostname": x\n}') == (
        "not a certificate: invalid JSON at line 2 column 15"
    )
    assert _cert_error("[" * 100_000).startswith("not a certificate: invalid JSON")


def test_the_declarations_cover_every_certificate_field() -> None:
    from validator.certificate import CERTIFICATE_FIELDS, CERTIFIED_GPU_FIELDS, CertifiedGpu

    assert CERTIFICATE_FIELDS.names == tuple(f.name for f in dataclasses.fields(Certificate))
    assert CERTIFIED_GPU_FIELDS.names == tuple(f.name for f in dataclasses.fields(CertifiedGpu))
    required = {f.name for f in dataclasses.fields(Certificate) if f.default is dataclasses.MISSING}
    assert {f.name for f in CERTIFICATE_FIELDS.fields if f.required} == required
    # Schema 2's fields have defaults: a schema-1 certificate lacks them and still reads.
    gpu_required = {
        f.name for f in dataclasses.fields(CertifiedGpu) if f.default is dataclasses.MISSING
    }
    assert {f.name for f in CERTIFIED_GPU_FIELDS.fields if f.required} == gpu_required
    assert {"nvlinks", "nvlink_errors", "pcie_replay_count", "recovery_action"}.isdisjoint(
        gpu_required
    )


# ---------------------------------------------------------------- counters after the burn


def burn_counted(*, index: int = 2, **after: object) -> NodeResult:
    """The healthy node judged, GPU ``index``'s burn reading ``after`` once it ended.

    Before the burn every counter is 0 (as the facts read them); the burn's own errors
    are within the limits, so the node is certified.
    """
    base = healthy_node()
    assert base.burn is not None
    ran = base.burn.gpus[index]
    counters = dataclasses.replace(ran.counters_after, **after)  # type: ignore[arg-type]
    result = judge(with_gpu_burn(base, index, counters_after=counters))
    assert result.verdict is Verdict.CERTIFIED, result.summary
    return result


def crc_on_link_0(count: int) -> tuple[NvLinkErrorCounts, ...]:
    return tuple(
        NvLinkErrorCounts(link=i, crc_flit=count if i == 0 else 0, crc_data=0, replay=0, recovery=0)
        for i in range(18)
    )


def test_the_certificate_holds_the_counters_as_the_burn_left_them() -> None:
    # 70 replays and 60 CRC flit errors during the burn: within 80 and 100, certified.
    result = burn_counted(pcie_replay_count=70, nvlink_errors=crc_on_link_0(60))
    assert result.facts.gpus[2].pcie_replay_count == 0  # read before the burn
    cert = issue_certificate(result, now=ISSUED)
    gpu = cert.gpus[2]
    assert gpu.pcie_replay_count == 70
    assert gpu.nvlink_errors is not None
    assert gpu.nvlink_errors[0].crc_flit == 60
    assert {g.pcie_replay_count for g in cert.gpus if g.index != 2} == {0}
    verify_certificate(certificate_from_json(certificate_to_json(cert)), None)


def test_drift_counts_only_what_came_after_the_certification_burn() -> None:
    cert = issue_certificate(
        burn_counted(pcie_replay_count=70, nvlink_errors=crc_on_link_0(60)), now=ISSUED
    )
    quiet = healthy_node(burn=None)

    def failed(replays: int, crc: int) -> set[str]:
        now = with_gpu(quiet, 2, pcie_replay_count=replays, nvlink_errors=crc_on_link_0(crc))
        return {f.check for f in compare(cert, now, Policy()) if f.severity is Severity.FAIL}

    # 11 replays and 11 CRC errors since: the burn's own 70 and 60 are not drift.
    assert failed(70 + 11, 60 + 11) == set()
    assert failed(70 + 81, 60 + 101) == {"drift.pcie_replay", "drift.nvlink_errors"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"status": BurnStatus.ERROR}, "the burn did not complete"),
        ({"uuid": "GPU-99999999-aaaa-bbbb-cccc-000000000000"}, "another board's burn"),
        (
            {"counters_after": ErrorCounters()},
            "not read after the burn",
        ),
    ],
)
def test_without_a_reading_after_the_burn_the_facts_own_counters_are_certified(
    change: dict[str, object], why: str
) -> None:
    facts = with_gpu(healthy_node(), 2, pcie_replay_count=5, nvlink_errors=crc_on_link_0(4))
    facts = with_gpu_burn(facts, 2, **change)
    result = dataclasses.replace(certified(), facts=facts)  # judged or not: what is recorded
    gpu = issue_certificate(result, now=ISSUED).gpus[2]
    assert gpu.pcie_replay_count == 5, why
    assert gpu.nvlink_errors is not None, why
    assert gpu.nvlink_errors[0].crc_flit == 4, why


def test_without_a_burn_the_facts_own_counters_are_certified() -> None:
    facts = with_gpu(healthy_node(burn=None), 2, pcie_replay_count=5)
    result = judge(facts, Policy(require_burn=False))
    assert issue_certificate(result, now=ISSUED).gpus[2].pcie_replay_count == 5


# ---------------------------------------------------------------- bandwidth figures (schema 3)

SCHEMA_2_FIXTURE = (
    Path(__file__).parent.parent
    / "fixtures"
    / "certificates"
    / ("schema2-h100-node-01-signed.json")
)
SCHEMA_2_KEY = b"schema-2-test-key"  # issued and signed by gpuready at commit c39f72b


@functools.cache
def measured() -> NodeResult:
    """The healthy H100 scenario burned and its interconnect measured, judged CERTIFIED."""
    facts = collect_simulated(
        "healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0), interconnect="on"
    )
    result = judge_node(facts, Policy())
    assert result.verdict is Verdict.CERTIFIED, result.summary
    return result


def measured_interconnect() -> Interconnect:
    interconnect = measured().facts.interconnect
    assert interconnect is not None
    return interconnect


def with_interconnect(**changes: Any) -> NodeResult:
    """The measured node with its interconnect changed (as recorded, whatever was judged)."""
    result = measured()
    changed = dataclasses.replace(measured_interconnect(), **changes)
    return dataclasses.replace(
        result, facts=dataclasses.replace(result.facts, interconnect=changed)
    )


def test_the_certificate_holds_the_bandwidth_figures() -> None:
    cert = issue_certificate(measured(), now=ISSUED)
    assert cert.schema_version == CERTIFICATE_SCHEMA_VERSION  # 4 since provenance (issue 30)
    assert BANDWIDTH_SCHEMA_VERSION == 3
    assert INTERCONNECT_SCHEMA_VERSION == 2  # issue 13's link counters keep their number
    assert cert.holds_bandwidth
    assert cert.holds_interconnect
    copies = measured_interconnect().gpus
    assert isinstance(copies, tuple)
    gpu = cert.gpus[0]
    assert (gpu.h2d_gb_s, gpu.d2h_gb_s, gpu.hbm_gb_s) == (
        copies[0].h2d.gb_s,
        copies[0].d2h.gb_s,
        copies[0].hbm.gb_s,
    )
    assert (gpu.h2d_gb_s, gpu.hbm_gb_s) == (55.22, 2877.73)  # the scenario's GPU 0
    assert cert.peers is not None
    assert len(cert.peers) == 56  # every ordered pair of 8 GPUs
    first = cert.peers[0]
    assert (first.src, first.dst, first.unidirectional_gb_s) == (0, 1, 394.26)
    assert (first.src_uuid, first.dst_uuid) == (cert.gpus[0].uuid, cert.gpus[1].uuid)
    assert cert.all_reduce == CertifiedAllReduce(ranks=8, size_bytes=4 << 30, busbw_gb_s=474.89)
    assert cert.bandwidth_figures == 8 * 3 + 56 + 1


def test_a_certificate_with_figures_round_trips_and_verifies_signed() -> None:
    cert = sign(issue_certificate(measured(), now=ISSUED), KEY)
    text = certificate_to_json(cert)
    again = certificate_from_json(text)
    assert again == cert
    assert certificate_to_json(again) == text
    verify_certificate(again, KEY)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("gpus", 3, "h2d_gb_s"), 60.0),
        (("peers", 7, "unidirectional_gb_s"), 500.0),
        (("peers", 7, "dst_uuid"), "GPU-aaaaaaaa-0000-0000-0000-000000000000"),
        (("all_reduce", "busbw_gb_s"), 300.0),
        (("all_reduce", "size_bytes"), 1 << 30),
    ],
)
def test_an_edited_figure_fails_verification(path: tuple[Any, ...], value: object) -> None:
    data = json.loads(certificate_to_json(sign(issue_certificate(measured(), now=ISSUED), KEY)))
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    target[last] = value
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(certificate_from_json(json.dumps(data)), KEY)


def test_busy_gpus_give_no_figures() -> None:
    # The idle gate gave up on GPU 3: its copies, its pairs and the all-reduce over it.
    cert = issue_certificate(with_interconnect(busy_gpus=(3,)), now=ISSUED)
    assert (cert.gpus[3].h2d_gb_s, cert.gpus[3].hbm_gb_s) == (None, None)
    assert cert.gpus[2].h2d_gb_s is not None
    assert cert.peers is not None
    assert len(cert.peers) == 42
    assert all(3 not in (p.src, p.dst) for p in cert.peers)
    assert cert.all_reduce is None


def test_a_figure_whose_check_did_not_pass_is_no_baseline() -> None:
    # interconnect not required on this node: a failing figure leaves it certified.
    failed = (
        Finding("interconnect.hbm", Severity.FAIL, "slow HBM", gpu_index=5, required=False),
        Finding("interconnect.p2p", Severity.UNKNOWN, "busy", gpu_index=6, required=False),
        Finding("interconnect.all_reduce", Severity.FAIL, "slow", required=False),
    )
    result = dataclasses.replace(measured(), findings=measured().findings + failed)
    cert = issue_certificate(result, now=ISSUED)
    assert cert.gpus[5].hbm_gb_s is None
    assert cert.gpus[5].h2d_gb_s is not None  # its other figures passed
    assert cert.peers is not None
    assert all(6 not in (p.src, p.dst) for p in cert.peers)
    assert cert.all_reduce is None


def test_unmeasured_wrong_or_missing_figures_are_none() -> None:
    copies = measured_interconnect().gpus
    peers = measured_interconnect().peers
    run = measured_interconnect().all_reduce
    assert isinstance(copies, tuple)
    assert isinstance(peers, tuple)
    assert isinstance(run, AllReduce)
    assert isinstance(run.points, tuple)
    failed = Bandwidth(Unavailable(Reason.ERROR, "cudaMemcpy failed"))
    copies = (dataclasses.replace(copies[0], d2h=failed), *copies[1:])
    peers = (dataclasses.replace(peers[0], access=False), *peers[1:])
    wrong = (dataclasses.replace(run.points[0], wrong=3), *run.points[1:])
    cert = issue_certificate(
        with_interconnect(
            gpus=copies, peers=peers, all_reduce=dataclasses.replace(run, points=wrong)
        ),
        now=ISSUED,
    )
    assert (cert.gpus[0].h2d_gb_s, cert.gpus[0].d2h_gb_s) == (55.22, None)
    assert cert.peers is not None
    assert (0, 1) not in {(p.src, p.dst) for p in cert.peers}
    assert cert.all_reduce is None  # a sweep that summed wrong is no baseline
    error = issue_certificate(with_interconnect(error="no libcudart"), now=ISSUED)
    assert error.bandwidth_figures == 0
    assert (error.peers, error.all_reduce, error.gpus[0].h2d_gb_s) == (None, None, None)


def test_a_certificate_without_a_measurement_holds_nulls() -> None:
    unmeasured = with_gpu_burn(healthy_node(interconnect=None), 3, tflops=731.5)
    result = judge_node(unmeasured, Policy(interconnect=False))
    assert result.verdict is Verdict.CERTIFIED, result.summary
    cert = issue_certificate(result, now=ISSUED, tool_version="9.9.9")
    assert cert.holds_bandwidth
    assert cert.bandwidth_figures == 0
    data = json.loads(certificate_to_json(cert))
    assert (data["peers"], data["all_reduce"], data["gpus"][0]["hbm_gb_s"]) == (None, None, None)


def test_a_schema_2_certificate_still_loads_verifies_and_writes_back_as_issued() -> None:
    text = SCHEMA_2_FIXTURE.read_text()
    old = certificate_from_json(text)
    assert old.schema_version == 2
    assert old.holds_interconnect
    assert not old.holds_bandwidth
    assert (old.peers, old.all_reduce, old.bandwidth_figures) == (None, None, 0)
    assert old.gpus[0].nvlinks is not None
    assert old.dcgm is not None
    verify_certificate(old, SCHEMA_2_KEY)
    assert old.digest == json.loads(text)["digest"]
    # Written back as issued: no field it never had, every number in its own form (the
    # file's layout has changed since, not what it says).
    assert _as_written(certificate_to_json(old)) == _as_written(text)


def test_a_schema_2_certificate_given_a_figure_fails_verification() -> None:
    data = json.loads(SCHEMA_2_FIXTURE.read_text())
    data["gpus"][0]["h2d_gb_s"] = 55.0
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(certificate_from_json(json.dumps(data)), SCHEMA_2_KEY)
    del data["gpus"][0]["h2d_gb_s"]
    data["all_reduce"] = {"ranks": 8, "size_bytes": 1 << 32, "busbw_gb_s": 470.0}
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(certificate_from_json(json.dumps(data)), SCHEMA_2_KEY)
    # A null there says nothing the certificate did not: the seal still holds.
    data["all_reduce"] = None
    data["gpus"][0]["h2d_gb_s"] = None
    verify_certificate(certificate_from_json(json.dumps(data)), SCHEMA_2_KEY)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"all_reduce": {"ranks": 0, "size_bytes": 1, "busbw_gb_s": 1.0}},
            "certificate: 'all_reduce.ranks' must be a whole number >= 1, got 0 (int)",
        ),
        (
            {"peers": [{"src": 0, "dst": 1, "src_uuid": None, "dst_uuid": None}]},
            "certificate: lacks the field 'peers[0].unidirectional_gb_s'",
        ),
    ],
)
def test_bad_figures_are_one_line(change: dict[str, object], message: str) -> None:
    assert _cert_error(json.dumps(_edited(**change))) == message


def test_the_figure_declarations_cover_their_fields() -> None:
    assert CERTIFIED_PEER_FIELDS.names == tuple(f.name for f in dataclasses.fields(CertifiedPeer))
    assert CERTIFIED_ALL_REDUCE_FIELDS.names == tuple(
        f.name for f in dataclasses.fields(CertifiedAllReduce)
    )


def _with_figure(path: tuple[Any, ...], value: object) -> str:
    data = json.loads(certificate_to_json(issue_certificate(measured(), now=ISSUED)))
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    target[last] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("path", "value", "shown"),
    [
        (("gpus", 3, "h2d_gb_s"), 0.0, "0.0 (float)"),
        (("gpus", 3, "hbm_gb_s"), 100001.0, "100001.0 (float)"),
        (("peers", 7, "unidirectional_gb_s"), 0, "0 (int)"),
        (("all_reduce", "busbw_gb_s"), -1.0, "-1.0 (float)"),
        (("gpus", 0, "nvlinks", 0, "speed_gb_s"), 0.0, "0.0 (float)"),
    ],
)
def test_a_bandwidth_figure_is_a_gb_s_above_zero_and_below_any_link(
    path: tuple[Any, ...], value: object, shown: str
) -> None:
    # A zero or absurd figure is no baseline: drift would call everything since "as before".
    where = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path)
    assert _cert_error(_with_figure(path, value)) == (
        f"certificate: '{where.lstrip('.')}' must be a number above 0 up to 100000, got {shown}"
    )


def test_a_bandwidth_figure_must_be_finite() -> None:
    text = _with_figure(("all_reduce", "busbw_gb_s"), 474.89).replace(
        '"busbw_gb_s": 474.89', '"busbw_gb_s": NaN'
    )
    assert (
        _cert_error(text)
        == "certificate: 'all_reduce.busbw_gb_s' must be a finite number, got nan (float)"
    )


def test_a_null_bandwidth_figure_still_loads() -> None:
    # Not measured at certification: null, as issued.
    assert (
        certificate_from_json(_with_figure(("gpus", 3, "h2d_gb_s"), None)).gpus[3].h2d_gb_s is None
    )


def test_an_all_reduce_with_a_wrong_total_is_no_baseline() -> None:
    run = measured_interconnect().all_reduce
    assert isinstance(run, AllReduce)
    cert = issue_certificate(
        with_interconnect(all_reduce=dataclasses.replace(run, wrong=3)), now=ISSUED
    )
    assert cert.all_reduce is None
    zero = issue_certificate(
        with_interconnect(all_reduce=dataclasses.replace(run, wrong=0)), now=ISSUED
    )
    assert zero.all_reduce is not None


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_an_implausible_copy_figure_is_not_certified(value: float) -> None:
    copies = measured_interconnect().gpus
    assert isinstance(copies, tuple)
    odd = (dataclasses.replace(copies[0], h2d=Bandwidth(value)), *copies[1:])
    cert = issue_certificate(with_interconnect(gpus=odd), now=ISSUED)
    assert cert.gpus[0].h2d_gb_s is None


def _as_written(text: str) -> str:
    """A certificate file's values, whatever its layout: 700 and 700.0 stay apart."""
    return json.dumps(json.loads(text), indent=2, sort_keys=True)
