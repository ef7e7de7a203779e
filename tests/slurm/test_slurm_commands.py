"""Slurm's command layer: the runner, errors on one line, host-lists and reservations.

Every Slurm answer here was recorded from a real single-node Slurm 22.05.8
(tests/fixtures/slurm/single-*.json, see SOURCES-single.md; re-record with
record-single.sh). :class:`FakeSlurm` answers argument lists with those recordings and
refuses any it was not told about, so each test also pins the commands sent.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from validator.error_tree import BadInputError
from validator.slurm import CommandResult, SlurmError
from validator.slurm.commands import checked, run_slurm, said, slurm_environment
from validator.slurm.hostlist import expand_hostlist
from validator.slurm.reservation import create_reservation, delete_reservation

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"


def recorded(name: str) -> CommandResult:
    """The recorded answer ``single-NAME.json``."""
    data = json.loads((FIXTURES / f"single-{name}.json").read_text(encoding="utf-8"))
    return CommandResult(data["returncode"], data["stdout"], data["stderr"])


def recorded_argv(name: str) -> list[str]:
    """The argument list ``single-NAME.json`` was recorded with."""
    argv: list[str] = json.loads((FIXTURES / f"single-{name}.json").read_text("utf-8"))["argv"]
    return argv


class FakeSlurm:
    """A runner answering each expected argument list with a recorded answer, in order.

    ``answers`` maps an argument list (space-joined) to one answer or a list of answers
    given in turn (the last one repeats). Any other argument list fails the test.
    """

    def __init__(self, answers: Mapping[str, CommandResult | Sequence[CommandResult]]) -> None:
        self.answers = {key: [v] if isinstance(v, CommandResult) else list(v)
                        for key, v in answers.items()}  # fmt: skip
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        key = " ".join(argv)
        assert key in self.answers, f"unexpected Slurm command: {key}"
        queue = self.answers[key]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def commands(self) -> list[str]:
        """Every command run, space-joined."""
        return [" ".join(call) for call in self.calls]


# ------------------------------------------------------------------ run_slurm, said, checked


def test_a_missing_program_says_to_install_the_client(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError, match=r"^sbatch not found: --slurm needs Slurm's client tools"):
        run_slurm(["sbatch", "--parsable", "job.sh"])


def test_a_command_that_hangs_is_stopped_naming_slurmctld() -> None:
    with pytest.raises(SlurmError, match=r"^.*python.* did not answer within 0.2 s: is slurmctld"):
        run_slurm([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.2)


def test_the_runner_gives_what_the_command_printed() -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    assert run_slurm([sys.executable, "-c", code]) == CommandResult(3, "out\n", "err\n")


def test_squeue_and_sinfo_settings_do_not_reach_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # SQUEUE_STATES=PD would hide running jobs from squeue; SINFO_PARTITION would hide nodes.
    monkeypatch.setenv("SQUEUE_STATES", "PD")
    monkeypatch.setenv("SINFO_PARTITION", "debug")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/other.conf")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    seen = json.loads(run_slurm([sys.executable, "-c", code]).stdout)
    assert "SQUEUE_STATES" not in seen
    assert "SINFO_PARTITION" not in seen
    assert seen["SLURM_CONF"] == "/etc/slurm/other.conf"
    assert slurm_environment({"SQUEUE_FORMAT": "%i", "SBATCH_ACCOUNT": "a"}) == {
        "SBATCH_ACCOUNT": "a"
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sinfo-unknown-option", "sinfo: unrecognized option '--jsonx'"),
        ("sbatch-bad-node", "sbatch: error: Batch job submission failed: Invalid node name "
         "specified"),
        ("show-job-invalid", "slurm_load_jobs error: Invalid job id specified"),
        ("sacct-disabled", "Slurm accounting storage is disabled"),
        ("sinfo-no-controller-text", "slurm_load_partitions: Unable to contact slurm controller "
         "(connect failure)"),
    ],
)  # fmt: skip
def test_what_slurm_said_is_its_error_line(name: str, expected: str) -> None:
    assert said(recorded(name)) == expected


def test_said_without_words_gives_the_exit_code() -> None:
    assert said(CommandResult(7)) == "exit 7"


def test_checked_gives_slurms_error_line_naming_the_command() -> None:
    fake = FakeSlurm({"sbatch --parsable -w nosuch": recorded("sbatch-bad-node")})
    with pytest.raises(SlurmError) as caught:
        checked(["sbatch", "--parsable", "-w", "nosuch"], fake)
    assert str(caught.value) == (
        "sbatch --parsable -w failed: sbatch: error: Batch job submission failed: Invalid node "
        "name specified"
    )


def test_checked_passes_a_success_through() -> None:
    fake = FakeSlurm({"scontrol show hostnames n[01-03],x": recorded("hostnames")})
    assert checked(["scontrol", "show", "hostnames", "n[01-03],x"], fake).stdout.split() == [
        "n01",
        "n02",
        "n03",
        "x",
    ]


# ------------------------------------------------------------------ host-lists


def test_slurm_expands_the_host_list() -> None:
    assert recorded_argv("hostnames") == ["scontrol", "show", "hostnames", "n[01-03],x"]
    fake = FakeSlurm({"scontrol show hostnames n[01-03],x": recorded("hostnames")})
    assert expand_hostlist(" n[01-03],x ", fake) == ["n01", "n02", "n03", "x"]
    assert fake.commands() == ["scontrol show hostnames n[01-03],x"]


def test_host_lists_expand_without_slurmctld() -> None:
    fake = FakeSlurm({"scontrol show hostnames n[1-2]": recorded("hostnames-no-controller")})
    assert expand_hostlist("n[1-2]", fake) == ["n1", "n2"]


def test_an_unclosed_range_is_bad_input_though_scontrol_exits_0() -> None:
    # scontrol 22.05 prints "n]" for "n[01-" and exits 0.
    assert recorded("hostnames-invalid") == CommandResult(0, "n]\n", "")
    fake = FakeSlurm({"scontrol show hostnames n[01-": recorded("hostnames-invalid")})
    with pytest.raises(BadInputError) as caught:
        expand_hostlist("n[01-", fake)
    assert str(caught.value) == (
        "'n[01-' is not a Slurm host-list (Slurm reads it as n]): give node names or a Slurm "
        "host-list such as gpu[001-064],login1"
    )


@pytest.mark.parametrize("expression", ["", "   ", "-o", "n1 n2"])
def test_an_empty_or_option_like_host_list_never_reaches_slurm(expression: str) -> None:
    fake = FakeSlurm({})
    with pytest.raises(BadInputError, match=r"host-list"):
        expand_hostlist(expression, fake)
    assert fake.calls == []


def test_a_host_list_slurm_expands_to_nothing_is_bad_input() -> None:
    fake = FakeSlurm({"scontrol show hostnames ,": recorded("hostnames-empty")})
    with pytest.raises(BadInputError, match=r"^',' is not a Slurm host-list \(it names no node\)"):
        expand_hostlist(",", fake)


def test_a_host_list_scontrol_refuses_is_bad_input_with_its_words() -> None:
    refused = CommandResult(1, "", "scontrol: error: Invalid hostlist: n[")
    fake = FakeSlurm({"scontrol show hostnames n[": refused})
    with pytest.raises(BadInputError, match=r"cannot expand the host-list 'n\[' \(scontrol: erro"):
        expand_hostlist("n[", fake)


# ------------------------------------------------------------------ reservations

CREATE = (
    "scontrol create reservation ReservationName=gpuready-q1 Nodes=n1 StartTime=now "
    "Duration=10 Users=root Flags=MAINT,IGNORE_JOBS"
)


def test_the_recorded_reservation_commands_are_the_ones_sent() -> None:
    assert " ".join(recorded_argv("reservation-create")) == CREATE
    assert recorded_argv("reservation-delete") == [
        "scontrol",
        "delete",
        "ReservationName=gpuready-q1",
    ]


def test_a_quarantine_reservation_is_created_for_whole_minutes() -> None:
    fake = FakeSlurm({CREATE: recorded("reservation-create")})
    create_reservation("gpuready-q1", ["n1"], 541.0, ["root"], fake)  # 9 min 1 s: 10 min
    assert fake.commands() == [CREATE]


def test_a_reservation_of_several_nodes_and_users_lists_them_with_commas() -> None:
    argv = (
        "scontrol create reservation ReservationName=q Nodes=gpu01,gpu02 StartTime=now "
        "Duration=1 Users=alice,bob Flags=MAINT,IGNORE_JOBS"
    )
    fake = FakeSlurm({argv: recorded("reservation-create")})
    create_reservation("q", ["gpu01", "gpu02"], 5.0, ["alice", "bob"], fake)
    assert fake.commands() == [argv]


def test_a_reservation_slurm_refuses_says_why() -> None:
    argv = CREATE.replace("gpuready-q1", "gpuready-q2").replace("Nodes=n1", "Nodes=nosuch")
    assert " ".join(recorded_argv("reservation-create-bad-node")) == argv
    fake = FakeSlurm({argv: recorded("reservation-create-bad-node")})
    with pytest.raises(SlurmError) as caught:
        create_reservation("gpuready-q2", ["nosuch"], 600, ["root"], fake)
    assert str(caught.value) == (
        "scontrol create reservation failed: Error creating the reservation: Invalid node name "
        "specified"
    )


@pytest.mark.parametrize(
    ("name", "nodes", "users", "expected"),
    [
        ("q,x", ["n1"], ["root"], "'q,x' is not a Slurm node name"),
        ("q", ["n[1-2]"], ["root"], "'n[1-2]' is not a Slurm node name"),
        ("q", [], ["root"], "reservation q: no nodes to reserve"),
        ("q", ["n1"], [], "reservation q: no user to reserve the nodes for"),
        ("q", ["n1"], ["alice,bob"], "'alice,bob' is not a user name"),
    ],
)
def test_a_reservation_of_bad_names_never_reaches_slurm(
    name: str, nodes: list[str], users: list[str], expected: str
) -> None:
    fake = FakeSlurm({})
    with pytest.raises(BadInputError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        create_reservation(name, nodes, 60, users, fake)
    assert fake.calls == []


def test_a_reservation_is_deleted() -> None:
    fake = FakeSlurm(
        {"scontrol delete ReservationName=gpuready-q1": recorded("reservation-delete")}
    )
    delete_reservation("gpuready-q1", fake)
    assert fake.commands() == ["scontrol delete ReservationName=gpuready-q1"]


def test_a_reservation_already_gone_is_fine() -> None:
    gone = recorded("reservation-delete-missing")
    assert "Requested reservation is invalid" in gone.stderr
    fake = FakeSlurm({"scontrol delete ReservationName=gpuready-q1": gone})
    delete_reservation("gpuready-q1", fake)


def test_a_reservation_that_cannot_be_deleted_says_why() -> None:
    down = CommandResult(1, "", "delete_reservation: Unable to contact slurm controller")
    fake = FakeSlurm({"scontrol delete ReservationName=q": down})
    with pytest.raises(SlurmError, match=r"^scontrol delete reservation q failed: delete_res"):
        delete_reservation("q", fake)
