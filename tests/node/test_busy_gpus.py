"""Busy GPUs and --gpus on the node: NVML's processes, their names, Slurm's jobs, selectors."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import pytest

from validator.error_tree import BadInputError
from validator.model import (
    GpuFacts,
    GpuProcess,
    NodeFacts,
    Reason,
    Unavailable,
    busy_reasons,
)
from validator.node.busy_gate import observe, parse_listpids, process_name, slurm_jobs
from validator.node.gpu_choice import parse_gpus, resolve_gpus
from validator.node.nvml import read_nvml
from validator.node.sim.fake_nvml import FakeNvml
from validator.node.sim.scenario import load_scenario
from validator.node.system import CommandResult

# scontrol listpids as Slurm 23.02 prints it on a node running job 5123 (two steps) and ours.
LISTPIDS = (
    "PID      JOBID    STEPID   LOCALID GLOBALID\n"
    "1002127  5123     0        0       0\n"
    "1002130  5123     batch    0       0\n"
    "4242     7001     extern   -       -\n"
)


class _Host:
    """A System stand-in: a few files, one command."""

    def __init__(self, files: dict[str, str], commands: dict[str, CommandResult]) -> None:
        self.files = files
        self.commands = commands
        self.ran: list[tuple[tuple[str, ...], float]] = []

    def hostname(self) -> str:
        return "node-a"

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def glob(self, pattern: str) -> list[str]:
        return []

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if any(c.split()[0] == name for c in self.commands) else None

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        self.ran.append((tuple(argv), timeout_s))
        return self.commands.get(" ".join(argv), CommandResult(127, "", "not found"))

    def now(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def test_listpids_jobs_are_read_by_their_header_column() -> None:
    assert parse_listpids(LISTPIDS) == ("5123", "7001")
    reordered = "JOBID PID STEPID\n88 1 0\nwarning: something\n"
    assert parse_listpids(reordered) == ("88",)
    assert parse_listpids("") == ()


def test_slurm_jobs_leave_out_our_own_job_and_ask_under_a_timeout() -> None:
    host = _Host({}, {"scontrol listpids": CommandResult(0, LISTPIDS, "")})
    assert slurm_jobs(host, own="7001") == ("5123",)
    assert host.ran == [(("scontrol", "listpids"), 10.0)]


def test_no_slurm_is_not_supported_and_a_failing_scontrol_is_an_error() -> None:
    none = slurm_jobs(_Host({}, {}), own="")
    assert isinstance(none, Unavailable)
    assert none.reason is Reason.NOT_SUPPORTED
    down = _Host({}, {"scontrol listpids": CommandResult(1, "", "slurmd not running")})
    failed = slurm_jobs(down, own="")
    assert isinstance(failed, Unavailable)
    assert failed.reason is not Reason.NOT_SUPPORTED


def test_a_process_name_is_comm_first_line_bounded() -> None:
    host = _Host({"/proc/7/comm": "py\x1b[31mthon\nsecond\n", "/proc/8/comm": "x" * 500}, {})
    assert process_name(host, 7) == "py\x1b[31mthon"
    assert process_name(host, 8) == "x" * 64
    gone = process_name(host, 9)
    assert isinstance(gone, Unavailable)


def _facts(*gpus: GpuFacts, jobs: Any = ()) -> NodeFacts:
    return NodeFacts(hostname="n", source="simulate", gpus=gpus, slurm_jobs=jobs)


def test_busy_reasons_name_the_gpu_pid_and_escaped_name() -> None:
    busy = GpuFacts(index=3, compute_processes=(GpuProcess(4711, "py\x1bthon", 10),))
    reasons = busy_reasons(_facts(GpuFacts(index=0, compute_processes=()), busy))
    assert [(r.gpu_index, r.text) for r in reasons] == [(3, "GPU 3 is busy (pid 4711 py\\x1bthon)")]
    node = busy_reasons(_facts(GpuFacts(index=0, compute_processes=()), jobs=("5123",)))
    assert [(r.gpu_index, r.text) for r in node] == [(None, "Slurm job 5123 running on this node")]


def test_a_gpu_not_chosen_is_not_busy_and_unknown_lists_are_no_reason() -> None:
    busy = GpuFacts(index=3, compute_processes=(GpuProcess(4711),))
    facts = _facts(GpuFacts(index=0, compute_processes=()), busy)
    assert busy_reasons(observe(_Host({}, {}), facts, chosen=(0,))) == ()
    unknown = GpuFacts(index=0, compute_processes=Unavailable(Reason.NOT_SUPPORTED, "x"))
    assert busy_reasons(_facts(unknown, jobs=Unavailable(Reason.ERROR, "down"))) == ()


def test_nvml_processes_come_from_v3_else_v2_with_memory_in_mib() -> None:
    scenario = load_scenario("busy-gpu-8x-h100-sxm")
    reading = read_nvml(scenario.nvml())
    assert reading.gpus[2].compute_processes == (GpuProcess(1002127, used_memory_mib=9212),)
    assert reading.gpus[0].compute_processes == ()

    class OldDriver(FakeNvml):
        """A driver before the v3 call: FUNCTION_NOT_FOUND; v2 answers."""

        def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: object) -> Any:
            raise self.NVMLError(13)

        def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: object) -> Any:
            return FakeNvml.nvmlDeviceGetComputeRunningProcesses_v3(self, handle)

    old = read_nvml(OldDriver(scenario.data["nvml"]))
    assert old.gpus[2].compute_processes == (GpuProcess(1002127, used_memory_mib=9212),)


def test_a_gpu_whose_driver_cannot_list_processes_says_not_supported() -> None:
    nvml = dict(load_scenario("healthy-8x-h100-sxm").data["nvml"])
    nvml["gpu"] = {k: v for k, v in nvml["gpu"].items() if k != "compute_processes"}
    processes = read_nvml(FakeNvml(nvml)).gpus[0].compute_processes
    assert isinstance(processes, Unavailable)
    assert processes.reason is Reason.NOT_SUPPORTED


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("0,3", ("0", "3")),
        (" 3 ", ("3",)),
        ("18:00.0,GPU-62092570-d6c2", ("18:00.0", "GPU-62092570-d6c2")),
    ],
)
def test_gpus_selectors_parse(text: str, wanted: tuple[str, ...]) -> None:
    assert parse_gpus(text) == wanted


@pytest.mark.parametrize("text", ["", "0,,3", "three", "-1", "GPU-", "0;3"])
def test_bad_gpus_selectors_are_one_line(text: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_gpus(text)
    assert "\n" not in str(caught.value)
    assert "--gpus" in str(caught.value)


def test_selectors_resolve_by_index_bus_id_and_uuid() -> None:
    gpus = read_nvml(load_scenario("healthy-8x-h100-sxm").nvml()).gpus
    uuid = str(gpus[5].uuid)
    assert resolve_gpus(("3", "5d:00.0", "GPU-" + uuid[4:].upper()), gpus) == (3, 5)
    assert resolve_gpus(("0000:19:00.0",), gpus) == (0,)
    with pytest.raises(BadInputError) as caught:
        resolve_gpus(("9",), gpus)
    line = str(caught.value)
    assert "\n" not in line
    assert "7 00000000:DB:00.0" in line
    assert str(gpus[7].uuid) in line


# squeue as Slurm prints it with --noheader --format=%i: a plain job, an array task, a
# heterogeneous job's component, and ours.
SQUEUE = "5130\n5131_7\n5132+0\n7001\n"
SQUEUE_ARGV = (
    "squeue --noheader --nodelist node-a --states=RUNNING,CONFIGURING,COMPLETING,SUSPENDED "
    "--format=%i"
)
NO_PROCESSES = "PID      JOBID    STEPID   LOCALID GLOBALID\n"


def test_an_allocation_with_no_process_yet_is_busy_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # A job still in its prolog, or an salloc that has started nothing, has no pid here.
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    host = _Host(
        {},
        {
            "scontrol listpids": CommandResult(0, NO_PROCESSES, ""),
            SQUEUE_ARGV: CommandResult(0, SQUEUE, ""),
        },
    )
    assert slurm_jobs(host, own="7001") == ("5130", "5131_7", "5132+0")
    assert (tuple(SQUEUE_ARGV.split()), 10.0) in host.ran


def test_slurmd_names_the_node_and_a_failing_squeue_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    argv = SQUEUE_ARGV.replace("node-a", "gpu07")
    both = {"scontrol listpids": CommandResult(0, LISTPIDS, ""), argv: CommandResult(0, "", "")}
    assert slurm_jobs(_Host({}, both), own="") == ("5123", "7001")
    down = {**both, argv: CommandResult(1, "", "slurm_load_jobs error: Unable to contact")}
    failed = slurm_jobs(_Host({}, down), own="")
    assert isinstance(failed, Unavailable)
    assert failed.reason is not Reason.NOT_SUPPORTED
