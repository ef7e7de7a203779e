"""``certify --slurm``, ``drift --slurm`` and ``slurm collect``: bad options and spools.

Nothing here reaches a Slurm cluster: every case is refused before a job could be
submitted (exit 2, one line naming the option and the fix), or finds that Slurm cannot
be asked (exit 3).
"""

from __future__ import annotations

import json

from tests.hostile.cases import Case, case
from tests.hostile.data_files import write

DB = ("--db", "{tmp}/history.db")
SPOOL = ("--spool", "{tmp}/spool")


def _request(data: object) -> str:
    return json.dumps(data)


CASES: tuple[Case, ...] = (
    case("slurm-collect-odd-name", "slurm", "collect", "../etc", *SPOOL, *DB, exit=2,
         err="neither a job id nor"),
    case("slurm-collect-unknown-job", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="no gpuready submission 4711"),
    case("slurm-collect-not-json", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="request.json", setup=write("spool/4711/request.json", "{half")),
    case("slurm-collect-wrong-version", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="not a version 1 gpuready submission",
         setup=write("spool/4711/request.json", _request({"spool_version": 7, "nodes": []}))),
    case("slurm-collect-bad-hosts", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="its hosts do not fit",
         setup=write("spool/4711/request.json", _request(
             {"spool_version": 1, "nodes": ["n1"], "jobs": {"n1": "4711"},
              "options": {"hosts": [{"name": 5}]}}))),
    case("slurm-collect-bad-burn", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="burn_s is not a number",
         setup=write("spool/4711/request.json", _request(
             {"spool_version": 1, "nodes": ["n1"], "jobs": {"n1": "4711"},
              "options": {"burn_s": "long"}}))),
    case("slurm-collect-someone-elses-job", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="is a submission of other jobs",
         setup=write("spool/4711/request.json", _request(
             {"spool_version": 1, "nodes": ["n1"], "jobs": {"n1": "12"}}))),
    case("slurm-collect-a-drift-run", "slurm", "collect", "4711", *SPOOL, *DB, exit=2,
         err="submitted by drift --slurm",
         setup=write("spool/4711/request.json", _request(
             {"spool_version": 1, "nodes": ["n1"], "jobs": {"n1": "4711"},
              "options": {"drift": True}}))),
    case("slurm-collect-spool-is-a-file", "slurm", "collect", "4711", "--spool",
         "{tmp}/file", *DB, exit=2, err="--spool", setup=write("file", "")),
    case("slurm-collect-no-job", "slurm", "collect", *DB, exit=2, err="JOBID"),
    case("slurm-collect-bad-json-form", "slurm", "collect", "1", "--json-form", "all", *DB,
         exit=2, err="'--json-form': 'all' is not one of 'auto', 'full', 'summary'"),
    case("slurm-collect-bad-poll", "slurm", "collect", "1", "--poll", "0", *DB, exit=2,
         err="--poll"),
    case("certify-partition-without-slurm", "certify", "--partition", "gpu", *DB, exit=2,
         err="--partition shapes Slurm jobs: give --slurm"),
    case("certify-no-wait-without-slurm", "certify", "--no-wait", *DB, exit=2,
         err="--no-wait shapes Slurm jobs"),
    case("certify-campaign-without-slurm", "certify", "--campaign", *DB, exit=2,
         err="--campaign shapes Slurm jobs"),
    case("certify-sbatch-option-without-slurm", "certify", "--sbatch-option", "--gres=gpu:8",
         *DB, exit=2, err="--sbatch-option shapes Slurm jobs"),
    case("certify-slurm-and-simulate", "certify", "--slurm", "--simulate",
         "healthy-8x-h100-sxm", *DB, exit=2, err="set gpuready_simulate per host"),
    case("certify-slurm-empty-nodelist", "certify", "--slurm", "--nodelist", "", *SPOOL, *DB,
         exit=2, err="--nodelist"),
    case("certify-slurm-bad-poll", "certify", "--slurm", "--poll", "nan", *DB, exit=2,
         err="--poll"),
    case("drift-slurm-no-wait", "drift", "--slurm", "--no-wait", *DB, exit=2,
         err="leave out --no-wait"),
    case("drift-slurm-and-certificate", "drift", "--slurm", "--certificate", "{tmp}/c.json",
         *DB, exit=2, err="--slurm checks the cluster's nodes", setup=write("c.json", "{}")),
)  # fmt: skip
