"""state.busy when the run could not tell whether the GPUs were free: never a silent PASS."""

from __future__ import annotations

import dataclasses

from tests.judge.test_judge_healthy import healthy_node, judge, only, with_gpu
from validator.judge import Policy
from validator.model import GpuProcess, NodeFacts, Reason, Severity, Unavailable, Verdict

FREE: tuple[GpuProcess, ...] = ()


def _all_free() -> NodeFacts:
    facts = healthy_node()
    gpus = tuple(dataclasses.replace(g, compute_processes=FREE) for g in facts.gpus)
    return dataclasses.replace(facts, gpus=gpus)


def test_free_gpus_and_no_slurm_say_nothing_more() -> None:
    facts = dataclasses.replace(
        _all_free(), slurm_jobs=Unavailable(Reason.NOT_SUPPORTED, "scontrol not found")
    )
    result = judge(facts)
    assert result.verdict is Verdict.CERTIFIED
    assert only(result, "state.busy") == []


def test_a_process_list_nvml_failed_to_give_blocks_the_certificate() -> None:
    # The defect: NVML's query failed, the GPU was burned as if free and certified.
    why = Unavailable(Reason.ERROR, "nvmlDeviceGetComputeRunningProcesses: Unknown Error")
    result = judge(with_gpu(_all_free(), 4, compute_processes=why))
    busy = only(result, "state.busy")
    assert [(f.severity, f.gpu_index, f.required) for f in busy] == [(Severity.UNKNOWN, 4, True)]
    assert "could not tell whether" in busy[0].message
    assert "Unknown Error" in busy[0].message
    assert result.verdict is Verdict.NOT_CERTIFIED
    # It is not "busy": the node is judged, not "wait for its jobs".
    assert "could not be judged: state.busy" in result.summary


def test_a_gpu_without_the_query_says_not_supported_and_does_not_block() -> None:
    why = Unavailable(Reason.NOT_SUPPORTED, "nvmlDeviceGetComputeRunningProcesses")
    result = judge(with_gpu(_all_free(), 1, compute_processes=why))
    busy = only(result, "state.busy")
    assert [(f.severity, f.gpu_index, f.required) for f in busy] == [(Severity.UNKNOWN, 1, False)]
    assert "does not support" in busy[0].message
    assert result.verdict is Verdict.CERTIFIED
    assert "optional could not be judged: state.busy" in result.summary


def test_a_failing_scontrol_blocks_the_certificate() -> None:
    why = Unavailable(Reason.ERROR, "scontrol listpids timed out after 10 s")
    result = judge(dataclasses.replace(_all_free(), slurm_jobs=why))
    busy = only(result, "state.busy")
    assert [(f.severity, f.gpu_index, f.required) for f in busy] == [
        (Severity.UNKNOWN, None, True)
    ]
    assert "Slurm" in busy[0].message
    assert "timed out" in busy[0].message
    assert result.verdict is Verdict.NOT_CERTIFIED


def test_with_allow_busy_an_unreadable_list_is_a_warning() -> None:
    # --allow-busy: the operator accepted burning beside others' work, so not knowing
    # whether there was any changes nothing; the report still says so.
    why = Unavailable(Reason.ERROR, "scontrol listpids failed")
    facts = dataclasses.replace(_all_free(), slurm_jobs=why, allow_busy=True)
    result = judge(facts, Policy())
    busy = only(result, "state.busy")
    assert [(f.severity, f.required) for f in busy] == [(Severity.WARN, False)]
    assert result.verdict is Verdict.CERTIFIED
