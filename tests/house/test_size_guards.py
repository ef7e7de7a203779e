"""Size guards: a file of ``validator/`` holds at most 600 lines, a function at most 60.

A file or function over its limit is listed below with the size it had when the guard came
(its ceiling: it may shrink, never grow) and why it is that long. Splitting one below the
limit fails the test until its entry goes: the list only gets shorter.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGE = REPO / "validator"
FILE_LIMIT = 600
FUNCTION_LIMIT = 60

_SPLIT = "one idea per file, issue 32"
# path -> (ceiling in lines, why it is over the limit today).
FILE_CEILINGS: dict[str, tuple[int, str]] = {
    "validator/service/provision_service.py": (
        1250,
        f"plan, runner events and the closing table: {_SPLIT}",
    ),
    "validator/judge/checks/interconnect.py": (1224, f"copies, peers and NCCL checks: {_SPLIT}"),
    "validator/node/sim/scenario.py": (1103, f"scenario schema and the simulated host: {_SPLIT}"),
    "validator/certificate.py": (1075, f"issue, seal, verify and revoke: {_SPLIT}"),
    "validator/report/html.py": (1057, f"the fleet page and the node pages: {_SPLIT}"),
    "validator/remote/ssh.py": (1010, f"connection, agent shipping and output: {_SPLIT}"),
    "validator/report/svg.py": (985, f"line and bar charts with their axes: {_SPLIT}"),
    "validator/node/capture/capture_replay.py": (
        1108,
        f"writing and reading capture bundles: {_SPLIT}",
    ),
    "validator/node/sim/fake_nvml.py": (863, "the NVML double: kept whole"),
    "validator/node/bandwidth/measure.py": (833, f"copies and peers through CUDA: {_SPLIT}"),
    "validator/report/shared.py": (803, f"shared report figures: {_SPLIT}"),
    "validator/node/burnin/cublas.py": (803, "the cuBLAS bindings and their worker, one unit"),
    "validator/node/nvml.py": (772, "the one NVML gate (nvitop's nvmlQuery): kept whole"),
    "validator/slurm/job_fanout.py": (763, f"submit, follow and quarantine: {_SPLIT}"),
    "validator/node/parsers/nvbandwidth.py": (754, "nvbandwidth's text and JSON forms, one parser"),
    "validator/ansible_inventory.py": (718, f"inventory reading and per-host policy: {_SPLIT}"),
    "validator/judge/checks/burn.py": (688, f"burn status, speed, power and counters: {_SPLIT}"),
    "validator/judge/checks/errors.py": (652, f"ECC, retired pages, remaps and Xids: {_SPLIT}"),
    "validator/fields.py": (685, f"document validation and its messages: {_SPLIT}"),
    "validator/node/sim/simulated_bandwidth.py": (
        684,
        f"schema and the simulation: {_SPLIT}",
    ),
    "validator/node/bandwidth/live.py": (672, f"the live measurement's orchestration: {_SPLIT}"),
    "validator/node/burnin/cuda_libs.py": (671, "the CUDA runtime bindings, one unit"),
    "validator/node/capture/recorded_bandwidth.py": (
        632,
        f"nvbandwidth's and nccl-tests' files read into the model: {_SPLIT}",
    ),
    "validator/report/rma.py": (614, f"the RMA packet and its evidence: {_SPLIT}"),
}
# "path:function" -> (ceiling in lines, why).
FUNCTION_CEILINGS: dict[str, tuple[int, str]] = {
    "validator/node/burnin/run.py:run_burn": (156, "the burn's one loop: workers, pacing, samples"),
    "validator/report/svg.py:line_chart": (124, "axes, series and labels of one chart"),
    "validator/report/svg.py:bar_chart": (116, "axes, bars and labels of one chart"),
    "validator/slurm/job_fanout.py:submit_run": (90, "spool, script, quarantine and sbatch"),
    "validator/node/nvml.py:_read_fields": (89, "every NVML field, one table of calls"),
    "validator/service/provision_service.py:run_provision": (88, "plan, run and the closing table"),
    "validator/judge/checks/inventory.py:_model": (88, "every way a model can fail to match"),
    "validator/judge/checks/errors.py:_ecc_counters": (87, "each ECC counter's rule"),
    "validator/store/history_store.py:open": (
        85,
        "refusals before and after SQLite opens the file",
    ),
    "validator/ansible_inventory.py:load_inventory": (
        82,
        "every inventory source ansible-core reads",
    ),
    "validator/service/collect_and_judge.py:certify_fleet": (
        80,
        "the fleet's plan, transport and judging",
    ),
    "validator/judge/checks/inventory.py:_count": (80, "every way a GPU count can fail"),
    "validator/node/capture/capture_replay.py:write_capture": (
        73,
        "every file of a bundle, in order",
    ),
    "validator/slurm/batch_script.py:batch_script": (72, "one sbatch script, line by line"),
    "validator/store/housekeeping.py:prune": (71, "plan, hold the latest, delete in batches"),
    "validator/slurm/job_fanout.py:follow": (71, "poll, read and judge as results come"),
    "validator/judge/checks/state.py:_fabric": (71, "each fabric state's finding"),
    "validator/remote/ssh.py:run_agent": (
        70,
        "ship, run, bound and read the agent and its progress lines",
    ),
    "validator/node/burnin/cublas.py:setup": (69, "allocate, multiply and check the first product"),
    "validator/node/sim/simulated_burn.py:simulated_burn": (67, "the simulated boards' burn"),
    "validator/judge/checks/burn.py:_status": (67, "each way a burn can end"),
    "validator/judge/checks/versions.py:_pinned_tool": (64, "found, missing or unreadable tools"),
    "validator/service/provision_service.py:parse_extra_vars": (
        63,
        "YAML values, files and secrets",
    ),
    "validator/judge/checks/burn.py:_counters": (63, "each error counter's growth"),
    "validator/judge/fleet.py:judge_fleet": (62, "medians, outliers and the fleet findings"),
    "validator/report/shared.py:burn_stats": (61, "every burn figure a report shows"),
}


def _files() -> dict[str, int]:
    return {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                key = f"{name}:{node.name}"
                found[key] = max(found.get(key, 0), length)
    return found


def _judge(sizes: dict[str, int], ceilings: dict[str, tuple[int, str]], limit: int) -> list[str]:
    problems = []
    for name, size in sorted(sizes.items()):
        ceiling = ceilings.get(name)
        if ceiling is None and size > limit:
            problems.append(f"{name}: {size} lines, over {limit}: split it")
        elif ceiling is not None and size > ceiling[0]:
            problems.append(f"{name}: {size} lines, over its ceiling {ceiling[0]}: split it")
        elif ceiling is not None and size <= limit:
            problems.append(f"{name}: {size} lines now, within {limit}: drop its ceiling")
    problems += [f"{name}: listed, but no longer exists" for name in ceilings if name not in sizes]
    return problems


def test_the_judge_catches_growth_and_stale_entries() -> None:
    ceilings = {"a.py": (700, "why"), "gone.py": (900, "why")}
    sizes = {"a.py": 701, "b.py": 601, "c.py": 600}
    assert _judge(sizes, ceilings, 600) == [
        "a.py: 701 lines, over its ceiling 700: split it",
        "b.py: 601 lines, over 600: split it",
        "gone.py: listed, but no longer exists",
    ]
    assert _judge({"a.py": 600}, {"a.py": (700, "why")}, 600) == [
        "a.py: 600 lines now, within 600: drop its ceiling"
    ]


def test_every_file_is_within_600_lines_or_its_ceiling() -> None:
    problems = _judge(_files(), FILE_CEILINGS, FILE_LIMIT)
    assert not problems, "\n".join(problems)


def test_every_function_is_within_60_lines_or_its_ceiling() -> None:
    problems = _judge(_functions(), FUNCTION_CEILINGS, FUNCTION_LIMIT)
    assert not problems, "\n".join(problems)


def test_every_ceiling_says_why() -> None:
    for name, (_, why) in {**FILE_CEILINGS, **FUNCTION_CEILINGS}.items():
        assert len(why) >= 20, name
