r"""Parse ``dcgmi diag`` output: the JSON of ``-j`` (DCGM 3.x and 4.x) and the text table.

Three shapes are read:

* DCGM 4.x JSON (``dcgmi/Diag.cpp``): top key ``"DCGM Diagnostic"``, ``test_categories``
  > ``tests`` > ``results`` with ``entity_group``/``entity_id``/``status`` per entity
  and a ``test_summary``; the version in the top-level ``metadata``; a run that could
  not start is ``{"DCGM Diagnostic": {"runtime_error": "..."}}``.
* DCGM 3.x JSON: top key ``"DCGM GPU Diagnostic"``, results keyed by ``gpu_ids``
  (``"0,1,2,3"``), capitalised test names ("Memory", "SM Stress"), the version inside
  the diagnostic object (3.0) or in a ``Metadata`` section (3.3).
* The text table (``dcgmi diag -r 2`` without ``-j``): ``| Memory | Pass - GPU: 1 |``
  rows, ``Warning``/``Info``/``Error`` rows below a test, their 48-column cells wrapped
  mid-word (``Rese`` / ``t GPU``).

Test names are normalised as DCGM 4 names its plugins: lower snake case (``"SM Stress"``
-> ``sm_stress``, ``"PCIe"`` -> ``pcie``, ``"GPU Memory"`` -> ``memory``). The DCGM 3
deployment checks ("Denylist", "Persistence Mode", ...) are what DCGM 4 runs as its one
``software`` test, so each becomes ``software.<name>`` (``software.denylist``,
``software.persistence_mode``); DCGM 4's own result stays ``software``. A result for
several GPUs (``gpu_ids: "0,1"``, ``Pass - GPUs: 1, 2``) becomes one result per GPU,
except a failure or warning whose every warning names GPUs of the row ("GPU 3 has
uncorrectable memory errors ..."): it is those GPUs' alone, as the table's notes say;
one for the whole node (``Pass``, ``Skip - All``) has no GPU.

Fail closed: text that holds no test result, JSON that is not a DCGM diagnostic, a
status this module does not know: each is a :class:`ParseError`, never an empty pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from validator.model import DcgmOutcome, DcgmTestResult
from validator.node.parsers.base import ParseError

_TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")

_STATUS = {
    "pass": DcgmOutcome.PASS,
    "fail": DcgmOutcome.FAIL,
    "warn": DcgmOutcome.WARN,
    "warning": DcgmOutcome.WARN,
    "skip": DcgmOutcome.SKIP,
    "not run": DcgmOutcome.NOT_RUN,
    "not_run": DcgmOutcome.NOT_RUN,
}

# DCGM 3 names whose DCGM 4 plugin is called otherwise ("GPU Memory" in the table), and
# spellings that differ between the table and the JSON ("Environment Variables" and
# "Permissions and OS Blocks" in 3.0's table, "Environmental Variables" and
# "Permissions and OS-related Blocks" in 3.1's JSON).
_ALIASES = {
    "gpu_memory": "memory",
    "environmental_variables": "environment_variables",
    "permissions_and_os_related_blocks": "permissions_and_os_blocks",
}

# The one deployment result DCGM 4 gives (its checks' names are in its messages).
SOFTWARE = "software"

# A GPU index has a few digits; a longer run is not one (and int() refuses 4300+ digits).
_MAX_INDEX_DIGITS = 6

_SECTION = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+\+")
_GPU_LIST = re.compile(r"^(?P<status>[A-Za-z][A-Za-z ]*?)\s*-\s*(?P<who>GPUs?:\s*[\d,\s]+|All)\s*$")
_MESSAGE_GPU = re.compile(r"^GPU\s*(\d+)\b")
# Anywhere in a DCGM 3 warning: "GPU 3 has uncorrectable memory errors ...".
_NAMED_GPU = re.compile(r"\bGPU\s*(\d+)\b")
# DCGM 4's table gives each entity its line under the test's own: "GPU0: Pass".
_ENTITY_LINE = re.compile(
    r"^(?P<group>GPU|CPU)\s*(?P<id>\d+)\s*:\s*(?P<status>[A-Za-z][A-Za-z ]*)$"
)
_NOTE_ROWS = ("warning", "info", "error")
_METADATA_VERSION = ("dcgm version",)


@dataclass(frozen=True)
class DcgmParsed:
    """What one ``dcgmi diag`` output says.

    Attributes:
        results: every test's result, per GPU where DCGM gives one.
        version: DCGM's version where the output states it, else None.
        runtime_error: DCGM's words when it could not run the diagnostic at all
            (DCGM 4's ``runtime_error``); the results are then empty.
    """

    results: tuple[DcgmTestResult, ...]
    version: str | None = None
    runtime_error: str | None = None


def dcgm_test_name(name: str, category: str = "") -> str:
    """A DCGM test's name as DCGM 4 spells its plugins (see the module docstring)."""
    snake = re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")
    snake = _ALIASES.get(snake, snake)
    if category == "deployment" and snake != SOFTWARE:
        return f"{SOFTWARE}.{snake}"
    return snake


def _outcome(status: object, where: str) -> DcgmOutcome:
    text = " ".join(str(status).split()).lower()
    outcome = _STATUS.get(text)
    if outcome is None:
        raise ParseError(f"DCGM diagnostic {where}: unknown status {str(status)[:40]!r}")
    return outcome


def _one_line(parts: Iterable[str]) -> str:
    return " ".join(" ".join(str(part).split()) for part in parts if str(part).strip())


# ---------------------------------------------------------------- JSON


def parse_dcgm_json(text: str) -> DcgmParsed:
    """Parse ``dcgmi diag -j`` output (DCGM 3.x or 4.x).

    Raises:
        ParseError: not JSON, no DCGM diagnostic object, a malformed test or result,
            an unknown status, or no test result at all.
    """
    preamble, body = _split_preamble(text)
    try:
        data = json.loads(body)
    except RecursionError:
        # json.loads recurses once per nesting level: "[[[[..." deeper than the stack.
        raise ParseError("dcgmi diag output is not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise ParseError(f"dcgmi diag output is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ParseError("dcgmi diag JSON is not an object")
    key = next((k for k in _TOP_KEYS if k in data), None)
    if key is None:
        raise ParseError(
            "dcgmi diag JSON has no 'DCGM Diagnostic' (DCGM 4) or 'DCGM GPU Diagnostic' "
            "(DCGM 3) object"
        )
    diag = data[key]
    if not isinstance(diag, dict):
        raise ParseError(f"dcgmi diag JSON: {key!r} is not an object")
    version = _json_version(data, diag)
    runtime_error = diag.get("runtime_error")
    if isinstance(runtime_error, str) and runtime_error.strip():
        return DcgmParsed((), version, _one_line([runtime_error]))
    categories = diag.get("test_categories")
    if not isinstance(categories, list):
        said = f": dcgmi said {preamble!r}" if preamble else ""
        raise ParseError(f"dcgmi diag JSON has no test_categories list{said}")
    results = tuple(
        result
        for category in categories
        if category is not None
        for result in _json_category(category)
    )
    if not results:
        raise ParseError("dcgmi diag JSON lists no test result")
    return DcgmParsed(results, version)


def _split_preamble(text: str) -> tuple[str, str]:
    """(dcgmi's words before the JSON, the JSON): dcgmi may print a line before it.

    ("Error: Unable to run diagnostic on unsupported GPU 0." and NVVS's own warnings
    precede the document in recorded outputs.)
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "", stripped
    start = re.search(r"^\s*\{", text, re.M)
    if start is None:
        return "", text
    return _one_line(text[: start.start()].splitlines()), text[start.start() :]


def _json_version(data: Mapping[str, Any], diag: Mapping[str, Any]) -> str | None:
    for section in (data.get("metadata"), data.get("Metadata"), diag.get("Metadata"), diag):
        if isinstance(section, dict):
            version = section.get("version", section.get("DCGM Version"))
            if isinstance(version, str) and version.strip():
                return version.strip()
    return None


def _json_category(category: object) -> list[DcgmTestResult]:
    if not isinstance(category, dict) or not isinstance(category.get("tests", []), list):
        raise ParseError("dcgmi diag JSON: a test category is not an object with a tests list")
    name = " ".join(str(category.get("category", "")).split()).lower()
    if name == "metadata":
        return []
    found: list[DcgmTestResult] = []
    for test in category.get("tests", []):
        if test is not None:  # NVVS 3.x leaves nulls between its tests
            found.extend(_json_test(test, name))
    return found


def _json_test(test: object, category: str) -> list[DcgmTestResult]:
    if not isinstance(test, dict) or not isinstance(test.get("name"), str):
        raise ParseError(f"dcgmi diag JSON: a test in {category or 'a category'} has no name")
    name = dcgm_test_name(test["name"], category)
    rows = test.get("results", [])
    if not isinstance(rows, list):
        raise ParseError(f"dcgmi diag JSON: test {test['name']!r} results is not a list")
    found = [result for row in rows for result in _json_result(row, name, category)]
    summary = test.get("test_summary")
    if not found and isinstance(summary, dict):
        found = list(_json_result(summary, name, category))
    if not found:
        # DCGM 4 leaves a test it did not run without results or summary.
        found = [DcgmTestResult(name, DcgmOutcome.NOT_RUN, category)]
    return found


def _json_result(row: object, name: str, category: str) -> list[DcgmTestResult]:
    if not isinstance(row, dict) or "status" not in row:
        raise ParseError(f"dcgmi diag JSON: a result of test {name!r} has no status")
    outcome = _outcome(row["status"], f"test {name!r}")
    message, error_id = _json_message(row, outcome)
    base = DcgmTestResult(name, outcome, category, None, message, error_id)
    group = row.get("entity_group")
    if "entity_id" in row:
        entity = _whole(row["entity_id"], name)
        if group is None or str(group).upper() == "GPU":
            return [replace(base, gpu_index=entity)]
        # A CPU or switch result: the node's, named in the message.
        label = f"{group} {entity}"
        return [replace(base, message=f"{label}: {message}" if message else label)]
    if "gpu_ids" in row or "gpu_id" in row:
        gpus = _gpu_ids(row.get("gpu_ids", row.get("gpu_id")), name)
        pinned = _pinned(row, gpus, outcome)
        if pinned:
            return [
                replace(base, gpu_index=gpu, message=text, error_id=code)
                for gpu, text, code in pinned
            ]
        return [replace(base, gpu_index=gpu) for gpu in gpus] or [base]
    return [base]


def _pinned(
    row: Mapping[str, Any], gpus: list[int], outcome: DcgmOutcome
) -> list[tuple[int, str, int | None]]:
    """(GPU, its warnings, their first error id) where a several-GPU FAIL or WARN names them.

    DCGM 3 gives its deployment checks one row for all GPUs (``gpu_ids: "0,1,2,3"``)
    and names the GPU in the warning ("GPU 3 has uncorrectable memory errors ..."): the
    fault is that GPU's alone, as the text table's notes say. The GPUs not named get no
    result for the test, as in the table: DCGM stated no per-GPU pass for them, so none
    is made up. A warning that names no GPU of the row cannot be pinned: then every GPU
    listed keeps the result (fail closed), and an empty list says so.
    """
    if outcome not in (DcgmOutcome.FAIL, DcgmOutcome.WARN) or len(gpus) < 2:
        return []
    warnings = _warning_texts(row)
    owners = [_named_gpus(text) for text, _ in warnings]
    if not warnings or any(not named or not named <= set(gpus) for named in owners):
        return []
    pinned: list[tuple[int, str, int | None]] = []
    for gpu in sorted(set().union(*owners)):
        mine = [warning for warning, named in zip(warnings, owners) if gpu in named]
        codes = [code for _, code in mine if code is not None]
        pinned.append((gpu, _joined(text for text, _ in mine), codes[0] if codes else None))
    return pinned


def _named_gpus(text: str) -> set[int]:
    return {int(n) for n in _NAMED_GPU.findall(text) if len(n) <= _MAX_INDEX_DIGITS}


def _warning_texts(row: Mapping[str, Any]) -> list[tuple[str, int | None]]:
    """Each of a row's warnings as (one line, its error id)."""
    warnings = row.get("warnings", row.get("warning", []))
    if isinstance(warnings, (str, dict)):
        warnings = [warnings]
    found: list[tuple[str, int | None]] = []
    for warning in warnings if isinstance(warnings, list) else []:
        code = warning.get("error_id") if isinstance(warning, dict) else None
        said = warning.get("warning", "") if isinstance(warning, dict) else warning
        text = _one_line([str(said)])
        if text:
            whole = isinstance(code, int) and not isinstance(code, bool)
            found.append((text, code if whole else None))
    return found


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ParseError(f"dcgmi diag JSON: test {name!r} names an entity {value!r}")
    try:
        if len(str(value).strip()) > _MAX_INDEX_DIGITS:
            raise ValueError("too many digits for a GPU index")
        number = int(value)
    except ValueError:
        raise ParseError(f"dcgmi diag JSON: test {name!r} names an entity {value!r}") from None
    if number < 0:
        raise ParseError(f"dcgmi diag JSON: test {name!r} names an entity {value!r}")
    return number


def _gpu_ids(value: object, name: str) -> list[int]:
    if isinstance(value, list):
        return [_whole(item, name) for item in value]
    if isinstance(value, str):
        return [_whole(part.strip(), name) for part in value.split(",") if part.strip()]
    return [_whole(value, name)]


def _json_message(row: Mapping[str, Any], outcome: DcgmOutcome) -> tuple[str, int | None]:
    """DCGM's warnings (with the first error id), else its info lines, as one line."""
    warnings = row.get("warnings", row.get("warning", []))
    if isinstance(warnings, (str, dict)):
        warnings = [warnings]
    texts: list[str] = []
    error_id: int | None = None
    for warning in warnings if isinstance(warnings, list) else []:
        if isinstance(warning, dict):
            texts.append(str(warning.get("warning", "")))
            code = warning.get("error_id")
            if error_id is None and isinstance(code, int) and not isinstance(code, bool):
                error_id = code
        else:
            texts.append(str(warning))
    info = row.get("info", [])
    if isinstance(info, str):
        info = [info]
    notes = [str(line) for line in info] if isinstance(info, list) else []
    # A pass is told by its info (bandwidths, stress levels); anything else by its warnings.
    ordered = texts + notes if outcome is not DcgmOutcome.PASS else notes + texts
    return _joined(_one_line([t]) for t in ordered), error_id


def _joined(parts: Iterable[str]) -> str:
    """DCGM's messages as one line: a sentence ends itself, anything else gets "; "."""
    text = ""
    for part in parts:
        if part:
            text = f"{text}{' ' if text.endswith('.') else '; '}{part}" if text else part
    return text


# ---------------------------------------------------------------- text table


@dataclass
class _Row:
    """One test row being read: its name, category, results and notes (wrapped pieces)."""

    name: str
    category: str
    results: list[tuple[DcgmOutcome, int | None]]
    notes: list[list[str]]


def _cells(line: str) -> tuple[str, str] | None:
    """(left cell, right cell raw) of a ``| a | b |`` row; None for rules and others."""
    if not line.startswith("|") or line.startswith("|-") or line.startswith("|="):
        return None
    left, bar, right = line[1:].partition("|")
    if not bar:
        return None
    return left.strip(), right[:-1] if right.endswith("|") else right


# DCGM's result column: one space, 45 characters of text, two spaces.
_CELL_WIDTH = 48
_TEXT_WIDTH = 45


def _chunk(right: str) -> str:
    """One wrapped piece of a note.

    DCGM cuts the text every 45 columns, not at a word, so the pieces join without a
    space ("Rese" + "t GPU"), and a space at a cut stays in its piece (" remappings").
    A cell of other width (a re-typed excerpt) loses its padding instead.
    """
    piece = right[1:] if right.startswith(" ") else right
    return piece[:_TEXT_WIDTH] if len(right) == _CELL_WIDTH else piece.rstrip()


def _index(digits: str) -> int:
    """A GPU index the table names; a run of digits too long for one is bad input."""
    if len(digits) > _MAX_INDEX_DIGITS:
        raise ParseError(
            f"dcgmi diag table names GPU {digits[:12]}... ({len(digits)} digits): not a GPU index"
        )
    return int(digits)


def _status_line(text: str) -> tuple[DcgmOutcome, list[int | None]] | None:
    """``Pass - GPUs: 1, 2`` -> (PASS, [1, 2]); ``Skip - All`` / ``Pass`` -> node-wide."""
    cell = " ".join(text.split())
    status = _STATUS.get(cell.lower())
    if status is not None:
        return status, [None]
    entity = _ENTITY_LINE.match(cell)
    if entity is not None:
        outcome = _STATUS.get(entity["status"].strip().lower())
        if outcome is None:
            return None
        return outcome, [_index(entity["id"]) if entity["group"] == "GPU" else None]
    match = _GPU_LIST.match(cell)
    outcome = _STATUS.get(match["status"].lower()) if match else None
    if match is None or outcome is None:
        return None
    if match["who"] == "All":
        return outcome, [None]
    return outcome, [_index(part) for part in re.findall(r"\d+", match["who"])]


def parse_dcgm_text(text: str) -> DcgmParsed:
    """Parse the text table ``dcgmi diag -r N`` prints without ``-j``.

    Notes (``Warning``, ``Info``, ``Error`` rows) go to the test row above them, to the
    GPU they start with ("GPU 0 ..."). Rows before any test row (an excerpt cut
    mid-table) belong to a test the text does not show and are left out; an ``Error``
    row with no test above it is DCGM failing its section (deployment: ``software``).

    Raises:
        ParseError: a test row whose result cannot be read, or no test result at all
            (a fragment holding none, or not ``dcgmi diag`` output).
    """
    rows: list[_Row] = []
    category = ""
    version: str | None = None
    note: list[str] | None = None  # the pieces of the note being read
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section is not None:
            category, note = section["name"].strip().lower(), None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        left, right = cells
        if category == "metadata" or (left.lower(), right.strip().lower()) == (
            "diagnostic",
            "result",
        ):
            if left.lower() in _METADATA_VERSION:
                version = right.strip() or None
            continue
        if left.lower() in _NOTE_ROWS:
            note = _start_note(rows, left.lower(), category)
            if note is not None:
                note.append(_chunk(right))
        elif not left:
            if note is not None:
                note.append(_chunk(right))
            else:
                _more_results(rows, right)
        else:
            rows.append(_test_row(left, right, category))
            note = None
    results = tuple(result for row in rows for result in _row_results(row))
    if not results:
        raise ParseError(
            "dcgmi diag output holds no test result (a fragment, or not `dcgmi diag` output)"
        )
    return DcgmParsed(results, version)


def _test_row(left: str, right: str, category: str) -> _Row:
    status = _status_line(right)
    if status is None:
        raise ParseError(
            f"dcgmi diag table: test {left!r} has no result I can read ({right.strip()!r})"
        )
    outcome, gpus = status
    return _Row(left, category, [(outcome, gpu) for gpu in gpus], [])


def _more_results(rows: list[_Row], right: str) -> None:
    """A continuation line under a test row: more of its per-GPU results."""
    status = _status_line(right)
    if status is not None and rows:
        outcome, gpus = status
        rows[-1].results.extend((outcome, gpu) for gpu in gpus)


def _start_note(rows: list[_Row], kind: str, category: str) -> list[str] | None:
    """A new note's piece list, filed under its test; None when no test is shown."""
    if not rows or rows[-1].category != category:
        if kind != "error":
            return None  # the test it belongs to is not in the text
        section = SOFTWARE if category in ("", "deployment") else category
        rows.append(_Row(section, category, [(DcgmOutcome.FAIL, None)], []))
    pieces: list[str] = []
    rows[-1].notes.append(pieces)
    return pieces


def _without_summary(
    results: list[tuple[DcgmOutcome, int | None]],
) -> list[tuple[DcgmOutcome, int | None]]:
    """The per-GPU results alone where DCGM 4 gives both the test's and its GPUs'.

    The test's own line is kept only when it says worse than every GPU's does (a
    failure DCGM did not pin on a GPU must not vanish).
    """
    per_gpu: list[tuple[DcgmOutcome, int | None]] = [
        (outcome, gpu) for outcome, gpu in results if gpu is not None
    ]
    if not per_gpu or len(per_gpu) == len(results):
        return results
    clean = all(outcome is DcgmOutcome.PASS for outcome, _ in per_gpu)
    kept: list[tuple[DcgmOutcome, int | None]] = [
        (outcome, gpu)
        for outcome, gpu in results
        if gpu is None and clean and outcome is not DcgmOutcome.PASS
    ]
    return kept + per_gpu


def _row_results(row: _Row) -> list[DcgmTestResult]:
    name = dcgm_test_name(row.name, row.category)
    notes: list[tuple[int | None, str]] = []
    for pieces in row.notes:
        joined = " ".join("".join(pieces).split())
        match = _MESSAGE_GPU.match(joined)
        notes.append((_index(match.group(1)) if match else None, joined))
    results = _without_summary(row.results)
    only_one = len(results) == 1
    named = sorted({owner for owner, _ in notes if owner is not None})
    outcome_of_node = results[0][0] if only_one and results[0][1] is None else None
    if outcome_of_node is not None and outcome_of_node is not DcgmOutcome.PASS and named:
        # A node-wide failure whose notes name GPUs ("GPU 3 has uncorrectable memory
        # errors ..."): DCGM 3 prints deployment rows for the node; the fault is theirs.
        return [
            DcgmTestResult(
                name,
                outcome_of_node,
                row.category,
                gpu,
                _joined(text for owner, text in notes if owner in (gpu, None)),
            )
            for gpu in named
        ]
    found = []
    for outcome, gpu in results:
        # A node-wide result, or a test's only one, is told by all its notes.
        mine = [text for owner, text in notes if only_one or gpu is None or owner in (gpu, None)]
        found.append(DcgmTestResult(name, outcome, row.category, gpu, _joined(mine)))
    return found


__all__: Sequence[str] = ("DcgmParsed", "dcgm_test_name", "parse_dcgm_json", "parse_dcgm_text")
