"""Slurm jobs: sbatch, squeue (JSON and text), scontrol show job, sacct and scancel.

The recordings (Slurm 22.05.8, one node, see SOURCES-single.md) hold jobs 1 (tmo:
``--time=1``, timed out), 2 (run: running, then cancelled), 3 (pend: pending on
Resources, cancelled), 4 (arr: an array 0-1, pending, cancelled), 5 (ok: completed),
6 (bad: exit 3) and 7 (lost: its node died, NODE_FAIL). 23.02's JSON is read from a
public real ``squeue --json``.
"""

from __future__ import annotations

import json

import pytest

from tests.slurm.test_slurm_commands import FIXTURES, FakeSlurm, recorded, recorded_argv
from validator.error_tree import BadInputError
from validator.slurm import CommandResult, SlurmError
from validator.slurm.jobs import (
    JobState,
    cancel,
    checked_job_id,
    job_states,
    node_parts,
    parse_sacct,
    parse_sbatch,
    parse_show_job,
    parse_show_jobs,
    parse_squeue_json,
    parse_squeue_text,
    submit,
)

FORMAT = "%i|%T|%r|%N|%j"
SACCT = "JobID,State,Reason,NodeList,ExitCode"
NO_JSON = CommandResult(1, "", "squeue: unrecognized option '--json'\nTry \"squeue --help\"\n")


def squeue_json(ids: str) -> str:
    return f"squeue --json -t all -j {ids}"


def squeue_text(ids: str) -> str:
    return f"squeue -h -r -t all -j {ids} -o {FORMAT}"


def sacct(ids: str) -> str:
    return f"sacct -X -P -n -j {ids} -o {SACCT}"


def summary(job: JobState | None) -> tuple[object, ...] | None:
    if job is None:
        return None
    return (job.job_id, job.words, job.nodes, job.exit_code, job.name, job.finished)


# ------------------------------------------------------------------ scontrol -o show job

SHOWN = {
    "running": ("2", "RUNNING", ("n1",), "0:0", "run", False),
    "pending": ("3", "PENDING (Resources)", (), "0:0", "pend", False),
    "array": ("4_[0-1]", "PENDING (Priority)", (), "0:0", "arr", False),
    "completed": ("5", "COMPLETED", ("n1",), "0:0", "ok", True),
    "failed": ("6", "FAILED (NonZeroExitCode)", ("n1",), "3:0", "bad", True),
    "timeout": ("1", "TIMEOUT (TimeLimit)", ("n1",), "0:15", "tmo", True),
    "cancelled": ("2", "CANCELLED", ("n1",), "0:15", "run", True),
    "cancelled-pending": ("3", "CANCELLED (Resources)", (), "0:0", "pend", True),
    "node-fail": ("7", "NODE_FAIL (NodeDown)", ("n1",), "0:0", "lost", True),
}


@pytest.mark.parametrize("name", sorted(SHOWN))
def test_each_recorded_job_from_scontrol(name: str) -> None:
    assert recorded_argv(f"show-job-{name}")[:4] == ["scontrol", "-o", "show", "job"]
    assert summary(parse_show_job(recorded(f"show-job-{name}").stdout)) == SHOWN[name]


def test_a_job_scontrol_no_longer_knows_is_none() -> None:
    answer = recorded("show-job-invalid")
    assert (answer.returncode, answer.stderr) == (1, "slurm_load_jobs error: Invalid job id "
                                                     "specified\n")  # fmt: skip
    assert parse_show_job(answer.stdout) is None
    assert parse_show_job(answer.stderr) is None
    assert parse_show_jobs("") == []


def test_every_line_of_scontrol_is_a_job() -> None:
    lines = recorded("show-job-completed").stdout + recorded("show-job-failed").stdout
    assert [job.job_id for job in parse_show_jobs(lines)] == ["5", "6"]


def test_a_job_name_with_spaces_stays_whole() -> None:
    line = recorded("show-job-running").stdout.replace("JobName=run ", "JobName=my long run ")
    job = parse_show_job(line)
    assert job is not None
    assert job.name == "my long run"


# ------------------------------------------------------------------ squeue --json

LIVE = [
    ("1", "RUNNING", ("n1",), "0:0", "tmo", False),
    ("2", "RUNNING", ("n1",), "0:0", "run", False),
    ("3", "PENDING (Resources)", (), "0:0", "pend", False),
    ("4_[0-1]", "PENDING", (), "0:0", "arr", False),
]
ENDED = [
    ("1", "TIMEOUT (TimeLimit)", ("n1",), "0:15", "tmo", True),
    ("2", "CANCELLED", ("n1",), "0:15", "run", True),
    ("3", "CANCELLED (Resources)", (), "0:0", "pend", True),
    ("4_[0-1]", "CANCELLED (Priority)", (), "0:0", "arr", True),
]
DONE = [
    *ENDED,
    ("5", "COMPLETED", ("n1",), "0:0", "ok", True),
    ("6", "FAILED (NonZeroExitCode)", ("n1",), "3:0", "bad", True),
]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("squeue-live", LIVE),
        ("squeue-finished", ENDED),
        ("squeue-done", DONE),
        ("squeue-done-json-filtered", DONE),  # 22.05's --json ignores -j
        ("squeue-node-fail", [*DONE, ("7", "NODE_FAIL (NodeDown)", ("n1",), "0:0", "lost", True)]),
        ("squeue-empty-json", []),
        ("squeue-invalid-job-json", []),
    ],
)
def test_each_recorded_squeue_json(name: str, expected: list[tuple[object, ...]]) -> None:
    assert recorded_argv(name)[:2] == ["squeue", "--json"]
    assert [summary(job) for job in parse_squeue_json(recorded(name).stdout)] == expected


def test_22_05_json_exit_codes_are_wait_statuses() -> None:
    entries = json.loads(recorded("squeue-done").stdout)["jobs"]
    assert {e["job_id"]: e["exit_code"] for e in entries if e["job_id"] in (1, 6)} == {
        1: 15,  # killed by SIGTERM: scontrol says 0:15
        6: 768,  # exit 3: scontrol says 3:0
    }


def test_23_02_json_jobs_with_number_objects() -> None:
    text = (FIXTURES / "single-public-squeue-23.02.json").read_text(encoding="utf-8")
    assert [summary(job) for job in parse_squeue_json(text)] == [
        ("52173767_1470", "PENDING (JobHeldUser)", (), "0:0", "id_3508:dtu_rng_regress:sim", False),
        ("52173767_2000", "COMPLETED", ("cs66",), "0:0", "id_3508:dtu_rng_regress:sim", True),
        ("52409104_1078", "PENDING (JobHeldUser)", (), "0:0", "id_5120:dtu_rng_regress:sim", False),
    ]


def test_23_11_state_lists_and_exit_objects() -> None:
    # 23.11 changed these two fields (job_state a list, exit_code an object); the
    # recorded 22.05 entry of job 2 rewritten to that shape.
    data = json.loads(recorded("squeue-finished").stdout)
    entry = next(e for e in data["jobs"] if e["job_id"] == 2)
    number = {"set": True, "infinite": False}
    entry["job_state"] = ["CANCELLED", "COMPLETING"]
    entry["exit_code"] = {
        "status": ["SIGNALED"],
        "return_code": {**number, "number": 0},
        "signal": {"id": {**number, "number": 15}, "name": "TERM"},
    }
    entry["array_job_id"] = {**number, "number": 0}
    entry["array_task_id"] = {"set": False, "infinite": False, "number": 0}
    data["jobs"] = [entry]
    job = parse_squeue_json(json.dumps(data))[0]
    assert summary(job) == ("2", "COMPLETING", ("n1",), "0:15", "run", False)
    entry["job_state"] = ["CANCELLED"]
    assert parse_squeue_json(json.dumps(data))[0].finished


def test_no_controller_is_an_error_though_squeue_exits_0() -> None:
    answer = recorded("squeue-no-controller")
    assert answer.returncode == 0
    with pytest.raises(SlurmError) as caught:
        parse_squeue_json(answer.stdout)
    assert str(caught.value) == (
        "squeue --json failed: Failed while looking for jobs: Unspecified error: "
        "slurm_load_jobs (is slurmctld up and reachable?)"
    )


def test_an_invalid_job_id_error_in_json_is_no_job() -> None:
    text = json.dumps({"jobs": [], "errors": [{"error": "Invalid job id specified"}]})
    assert parse_squeue_json(text) == []


@pytest.mark.parametrize("text", ["", "not json", "{}", '{"jobs": 3}'])
def test_json_that_is_not_squeues_is_an_error_or_empty(text: str) -> None:
    if text == '{"jobs": 3}':
        assert parse_squeue_json(text) == []
        return
    with pytest.raises(SlurmError, match=r"^squeue --json gave no job list"):
        parse_squeue_json(text)


# ------------------------------------------------------------------ squeue text


def test_squeue_text_lists_array_tasks_one_by_one_with_r() -> None:
    assert " ".join(recorded_argv("squeue-live-text")).endswith(f"-o {FORMAT}")
    jobs = parse_squeue_text(recorded("squeue-live-text").stdout)
    assert [(j.job_id, j.words, j.nodes, j.name) for j in jobs] == [
        ("3", "PENDING (Resources)", (), "pend"),
        ("4_0", "PENDING (Priority)", (), "arr"),
        ("4_1", "PENDING (Priority)", (), "arr"),
        ("1", "RUNNING", ("n1",), "tmo"),
        ("2", "RUNNING", ("n1",), "run"),
    ]
    unexpanded = parse_squeue_text(recorded("squeue-live-text-unexpanded").stdout)
    assert [j.job_id for j in unexpanded] == ["3", "4_[0-1]", "1", "2"]


def test_squeue_text_shows_ended_jobs_only_with_t_all() -> None:
    assert recorded("squeue-done-text") == CommandResult(0, "", "")
    jobs = parse_squeue_text(recorded("squeue-all-states-text").stdout)
    assert [(j.job_id, j.words, j.finished) for j in jobs] == [
        ("2", "CANCELLED", True),
        ("3", "CANCELLED (Resources)", True),
        ("4_0", "CANCELLED (Priority)", True),
        ("4_1", "CANCELLED (Priority)", True),
        ("5", "COMPLETED", True),
        ("6", "FAILED (NonZeroExitCode)", True),
        ("1", "TIMEOUT (TimeLimit)", True),
    ]


def test_a_job_name_with_a_bar_stays_whole() -> None:
    assert parse_squeue_text("12|RUNNING|None|gpu[01-02],x|a|b\n") == [
        JobState("12", "RUNNING", None, ("gpu[01-02]", "x"), None, "a|b")
    ]


def test_node_lists_split_outside_brackets() -> None:
    assert node_parts("gpu[01-02,05],login1") == ("gpu[01-02,05]", "login1")
    assert node_parts("") == ()
    assert node_parts("(null)") == ()


# ------------------------------------------------------------------ sbatch


def test_sbatch_parsable_prints_the_id() -> None:
    assert recorded_argv("sbatch-parsable")[:2] == ["sbatch", "--parsable"]
    assert parse_sbatch(recorded("sbatch-parsable").stdout) == "1"
    # sbatch(1): "--parsable: the job id number and the cluster name if present".
    assert parse_sbatch("123;cluster2\n") == "123"


@pytest.mark.parametrize("text", ["", "Submitted batch job\n", "abc;x"])
def test_sbatch_without_an_id_is_an_error(text: str) -> None:
    with pytest.raises(SlurmError, match=r"^sbatch printed no job id"):
        parse_sbatch(text)


def test_submit_puts_the_script_and_its_arguments_after_the_options() -> None:
    argv = "sbatch --parsable --exclusive --nodes=2 /spool/t/job.sh gpu01 gpu02"
    fake = FakeSlurm({argv: recorded("sbatch-parsable")})
    options = ["--exclusive", "--nodes=2", "--", "gpu01", "gpu02"]
    assert submit("/spool/t/job.sh", options, fake) == "1"
    assert submit("/spool/t/job.sh", options[:2], fake, args=["gpu01", "gpu02"]) == "1"
    assert fake.commands() == [argv, argv]


def test_a_refused_job_says_slurms_words() -> None:
    fake = FakeSlurm({"sbatch --parsable -w nosuch job.sh": recorded("sbatch-bad-node")})
    with pytest.raises(SlurmError) as caught:
        submit("job.sh", ["-w", "nosuch"], fake)
    assert str(caught.value) == (
        "sbatch refused the job: sbatch: error: Batch job submission failed: Invalid node name "
        "specified; check --partition, --account, --qos, --reservation and --time"
    )


def test_a_missing_script_says_so() -> None:
    fake = FakeSlurm({"sbatch --parsable /nonexistent/job.sh": recorded("sbatch-missing-script")})
    with pytest.raises(SlurmError, match=r"Unable to open file /nonexistent/job.sh"):
        submit("/nonexistent/job.sh", [], fake)


@pytest.mark.parametrize("path", ["", "-o"])
def test_a_script_path_that_is_no_path_never_reaches_sbatch(path: str) -> None:
    fake = FakeSlurm({})
    with pytest.raises(BadInputError, match=r"is not a batch script path"):
        submit(path, [], fake)
    assert fake.calls == []


# ------------------------------------------------------------------ job_states


def test_live_jobs_come_from_squeue_json() -> None:
    fake = FakeSlurm({squeue_json("1,3,4_1"): recorded("squeue-live")})
    states = job_states(["1", "3", "4_1"], fake)
    assert {k: v.words for k, v in states.items()} == {
        "1": "RUNNING",
        "3": "PENDING (Resources)",
        "4_1": "PENDING",  # the array's pending tasks are one record, 4_[0-1]
    }
    assert not any(state.finished for state in states.values())
    assert fake.commands() == [squeue_json("1,3,4_1")]


def test_ended_jobs_squeue_still_lists_need_nothing_more() -> None:
    fake = FakeSlurm({squeue_json("5,6,7"): recorded("squeue-node-fail")})
    states = job_states(["5", "6", "7"], fake)
    assert [states[j].words for j in ("5", "6", "7")] == [
        "COMPLETED",
        "FAILED (NonZeroExitCode)",
        "NODE_FAIL (NodeDown)",
    ]
    assert states["6"].exit_code == "3:0"


def test_a_job_slurm_forgot_without_accounting_is_unknown() -> None:
    fake = FakeSlurm(
        {
            squeue_json("5,999999"): recorded("squeue-done"),
            "scontrol -o show job 999999": recorded("show-job-invalid"),
            sacct("999999"): recorded("sacct-disabled"),
        }
    )
    states = job_states(["5", "999999"], fake)
    assert states["5"].words == "COMPLETED"
    assert states["999999"] == JobState(
        "999999",
        "UNKNOWN",
        "Slurm no longer knows job 999999 (finished more than MinJobAge ago and no accounting)",
    )
    assert states["999999"].finished
    assert fake.commands() == [
        squeue_json("5,999999"),
        "scontrol -o show job 999999",
        sacct("999999"),
    ]


def test_a_job_squeue_misses_is_asked_of_scontrol() -> None:
    fake = FakeSlurm(
        {
            squeue_json("5"): recorded("squeue-invalid-job-json"),
            "scontrol -o show job 5": recorded("show-job-completed"),
        }
    )
    assert job_states(["5"], fake)["5"].words == "COMPLETED"


def test_accounting_answers_for_jobs_slurmctld_forgot() -> None:
    # sacct's -P -n form (sacct(1)); not recorded here: the test cluster has no slurmdbd.
    answer = CommandResult(0, "6|FAILED|NonZeroExitCode|n1|3:0\n8|CANCELLED by 0|None|None "
                              "assigned|0:15\n")  # fmt: skip
    fake = FakeSlurm(
        {
            squeue_json("6,8"): recorded("squeue-empty-json"),
            "scontrol -o show job 6": recorded("show-job-invalid"),
            "scontrol -o show job 8": recorded("show-job-invalid"),
            sacct("6,8"): answer,
        }
    )
    states = job_states(["6", "8"], fake)
    assert summary(states["6"]) == ("6", "FAILED (NonZeroExitCode)", ("n1",), "3:0", None, True)
    assert summary(states["8"]) == ("8", "CANCELLED", (), "0:15", None, True)
    assert parse_sacct(answer.stdout) == [states["6"], states["8"]]


def test_a_failing_sacct_is_named_in_the_unknown_reason() -> None:
    fake = FakeSlurm(
        {
            squeue_json("9"): recorded("squeue-empty-json"),
            "scontrol -o show job 9": recorded("show-job-invalid"),
            sacct("9"): CommandResult(1, "", "sacct: error: slurmdbd: Connection refused\n"),
        }
    )
    assert job_states(["9"], fake)["9"].reason == (
        "Slurm no longer knows job 9 (finished more than MinJobAge ago; sacct: sacct: error: "
        "slurmdbd: Connection refused)"
    )


def test_slurm_without_json_is_asked_in_text_with_all_states() -> None:
    ids = "1,2,3,4_0,4_1,5,6"
    fake = FakeSlurm(
        {squeue_json(ids): NO_JSON, squeue_text(ids): recorded("squeue-all-states-text")}
    )
    states = job_states(ids.split(","), fake)
    assert [states[j].words for j in ("1", "4_0", "5")] == [
        "TIMEOUT (TimeLimit)",
        "CANCELLED (Priority)",
        "COMPLETED",
    ]
    assert fake.commands() == [squeue_json(ids), squeue_text(ids)]


def test_text_squeue_of_one_forgotten_id_exits_1_and_scontrol_is_asked() -> None:
    assert recorded("squeue-invalid-job").returncode == 1
    fake = FakeSlurm(
        {
            squeue_json("999999"): NO_JSON,
            squeue_text("999999"): recorded("squeue-invalid-job"),
            "scontrol -o show job 999999": recorded("show-job-invalid"),
            sacct("999999"): recorded("sacct-disabled"),
        }
    )
    assert job_states(["999999"], fake)["999999"].state == "UNKNOWN"


@pytest.mark.parametrize(
    "answers",
    [
        {squeue_json("1"): recorded("squeue-no-controller")},
        {squeue_json("1"): NO_JSON, squeue_text("1"): recorded("squeue-no-controller-text")},
        {squeue_json("1"): recorded("squeue-no-controller-text")},
        {
            squeue_json("1"): recorded("squeue-empty-json"),
            "scontrol -o show job 1": recorded("squeue-no-controller-text"),
        },
    ],
    ids=["json", "text", "json-rc1", "scontrol"],
)
def test_slurmctld_down_is_an_error_never_a_forgotten_job(
    answers: dict[str, CommandResult],
) -> None:
    with pytest.raises(SlurmError, match=r"Unspecified error|Unable to contact slurm controller"):
        job_states(["1"], FakeSlurm(answers))


def test_no_ids_ask_nothing() -> None:
    assert job_states([], FakeSlurm({})) == {}


@pytest.mark.parametrize("job_id", ["", "12,13", "-j", "12 13", "abc", "12_"])
def test_a_bad_job_id_never_reaches_slurm(job_id: str) -> None:
    fake = FakeSlurm({})
    with pytest.raises(BadInputError, match=r"is not a Slurm job id"):
        job_states(["1", job_id], fake)
    with pytest.raises(BadInputError, match=r"is not a Slurm job id"):
        cancel([job_id], fake)
    assert fake.calls == []


@pytest.mark.parametrize("job_id", ["1", "123_4", "123_[0-7]", "123+0", "123_[1,3,5-9:2%4]"])
def test_job_ids_as_slurm_prints_them(job_id: str) -> None:
    assert checked_job_id(job_id) == job_id


def test_many_ids_go_in_batches() -> None:
    ids = [str(n) for n in range(1, 1202)]
    answers = {
        squeue_json(",".join(ids[:500])): recorded("squeue-done"),
        squeue_json(",".join(ids[500:1000])): recorded("squeue-empty-json"),
        squeue_json(",".join(ids[1000:])): recorded("squeue-empty-json"),
    }
    # squeue lists 1-6 of them; the array 4 only as its tasks 4_[0-1], not as "4".
    forgotten = [n for n in ids if n not in ("1", "2", "3", "5", "6")]
    answers[sacct(",".join(forgotten))] = recorded("sacct-disabled")
    for n in forgotten:
        answers[f"scontrol -o show job {n}"] = recorded("show-job-invalid")
    states = job_states(ids, FakeSlurm(answers))
    assert [states[n].state for n in ("1", "4", "5", "6", "7", "1201")] == [
        "TIMEOUT",
        "UNKNOWN",
        "COMPLETED",
        "FAILED",
        "UNKNOWN",
        "UNKNOWN",
    ]
    assert list(states) == ids


# ------------------------------------------------------------------ the states themselves


@pytest.mark.parametrize(
    ("state", "finished"),
    [
        ("PENDING", False),
        ("RUNNING", False),
        ("CONFIGURING", False),
        ("COMPLETING", False),
        ("SUSPENDED", False),
        ("REQUEUED", False),
        ("COMPLETED", True),
        ("CANCELLED", True),
        ("FAILED", True),
        ("TIMEOUT", True),
        ("NODE_FAIL", True),
        ("PREEMPTED", True),
        ("BOOT_FAIL", True),
        ("DEADLINE", True),
        ("OUT_OF_MEMORY", True),
        ("UNKNOWN", True),
    ],
)
def test_which_states_are_finished(state: str, finished: bool) -> None:
    assert JobState("1", state).finished is finished


# ------------------------------------------------------------------ scancel


def test_jobs_are_cancelled_in_batches() -> None:
    ids = [str(n) for n in range(1, 1002)]
    calls = ["scancel " + " ".join(ids[:500]), "scancel " + " ".join(ids[500:1000]), "scancel 1001"]
    fake = FakeSlurm({call: recorded("scancel") for call in calls})
    cancel(ids, fake)
    assert fake.commands() == calls
    assert recorded_argv("scancel")[0] == "scancel"


def test_cancelling_jobs_already_ended_or_gone_is_fine() -> None:
    # 22.05's scancel exits 0 for both (recorded); older ones say so and exit 1.
    assert recorded("scancel-finished") == CommandResult(0, "", "")
    assert recorded("scancel-invalid") == CommandResult(0, "", "")
    said = (
        "scancel: error: Kill job error on job id 5: Job/step already completing or completed\n"
        "scancel: error: Kill job error on job id 999999: Invalid job id specified\n"
    )
    cancel(["5", "999999"], FakeSlurm({"scancel 5 999999": CommandResult(1, "", said)}))


def test_a_cancel_slurm_refuses_is_an_error() -> None:
    said = "scancel: error: Kill job error on job id 5: Access/permission denied\n"
    fake = FakeSlurm({"scancel 5": CommandResult(1, "", said)})
    with pytest.raises(SlurmError, match=r"^scancel failed: scancel: error: Kill job error on job"):
        cancel(["5"], fake)
