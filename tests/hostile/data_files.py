"""Builders for the files a hostile case needs: bundles, policies, scenarios, inventories.

Every builder returns a :data:`Setup`, a function of the case's :class:`Workspace`
that writes into ``ws.tmp``. Captures are real recorded outputs read in place from
``../shared/captures`` (never copied into the repository); a case changes one thing
of a healthy whole capture. Each text edit must match exactly once, so a change of
the corpus fails the setup loudly instead of testing something else.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from tests.conftest import captures_root
from validator.store import pack, unpack


@dataclass(frozen=True)
class Workspace:
    """Where one case runs: its own tmp dir, and the session's certified baseline.

    Attributes:
        tmp: the case's directory; ``{tmp}`` in a case's argv is this path.
        baseline_dir: a callable giving the directory the session's certify run
            filled (history.db, key, rep/certificates/*.json); only drift,
            history and verify-cert cases ask for it.
    """

    tmp: Path
    baseline_dir: Callable[[], Path]

    @property
    def baseline(self) -> Path:
        """The session's baseline directory (certified once, copied by each case)."""
        return self.baseline_dir()


Setup = Callable[[Workspace], None]
Edit = Union[str, None, Callable[[str], str]]  # new text, removal, or a transformation

# The healthy whole capture every bundle case starts from: an A10 with its banner
# (same driver, 550.90.12), judged CERTIFIED under POLICY_NO_BURN (a capture has no burn).
A10_QUERY = "nvidia-smi-q/gls-A10-550.90.12.txt"
A10_BANNER = "nvidia-smi-banner/gls-A10-550.90.12.txt"
H200_BANNER = "nvidia-smi-banner/gls-H200-550.90.12.txt"
A40X10_QUERY = "nvidia-smi-q/gls-A40x10-550.127.05.txt"
T4_XML = "nvidia-smi-xml/telegraf-tesla-t4.xml"
NVCC = "nvcc/repo-ngc-test-nvcc-11.6.55.txt"
CUDNN_HEADER = "cudnn/repo-zspace-cuda12.6-cudnn_version.h-9.6.0.txt"
XID79_LOG = "xid/gpud-xid79-sxid20034-nvswitch.log"

# A capture cannot carry a burn-in, and a simulated node without --burn neither: this
# policy lets such a healthy node be CERTIFIED, so that a hostile change can be told
# from the healthy base by the exit code (0 against 1 or 2) and not only by a message.
POLICY_NO_BURN = "require_burn: false\n"
# The base bundles are single hosts without an RDMA fabric, and hold no GPUDirect file:
# their policy says so (issue 34), as the no-burn one says a capture holds no burn-in.
POLICY_CAPTURE = POLICY_NO_BURN + "gpudirect: {required: false}\n"

CLEAN_DMESG = (
    "[    0.000000] Linux version 5.15.0-112-generic (buildd@lcy02-amd64-051)\n"
    "[    5.981022] nvidia: loading out-of-tree module taints kernel.\n"
    "[    6.114201] nvidia-nvlink: Nvlink Core is being initialized, major device number 511\n"
)
BASE_META: dict[str, Any] = {
    "hostname": "a10-node",
    "captured_at": "2024-06-25T10:00:00+00:00",
    "uptime_s": 90000.0,
    "locations": {},
}
HEALTHY_SCENARIO = "healthy-8x-h100-sxm"


def corpus(relative: str) -> str:
    """A real capture's text, read in place."""
    root = captures_root()
    if root is None:
        raise FileNotFoundError("../shared/captures is not present: the bundle cases need it")
    return (root / relative).read_text(encoding="utf-8")


def once(pattern: str, replacement: str, *, flags: int = re.M) -> Callable[[str], str]:
    """An edit replacing the one match of ``pattern`` (a regex); none or several is an error."""

    def edit(text: str) -> str:
        changed, count = re.subn(pattern, replacement, text, flags=flags)
        if count != 1:
            raise AssertionError(f"{pattern!r} matched {count} times in the base capture, not once")
        return changed

    return edit


def cut_at(pattern: str, *, keep_match: bool = False) -> Callable[[str], str]:
    """An edit cutting the text where ``pattern`` first matches (the file ends there)."""

    def edit(text: str) -> str:
        found = re.search(pattern, text, flags=re.M)
        if found is None:
            raise AssertionError(f"{pattern!r} is not in the base capture")
        return text[: found.end() if keep_match else found.start()]

    return edit


def drop_last_gpu_section(text: str) -> str:
    """A ``-q`` without its last ``GPU <bus id>`` section (the header still counts it)."""
    starts = [m.start() for m in re.finditer(r"^GPU [0-9A-Fa-f]{8}:", text, flags=re.M)]
    if len(starts) < 2:
        raise AssertionError("the base capture has fewer than two GPU sections")
    return text[: starts[-1]]


def xid79_dmesg(uptime_stamp: float) -> str:
    """The clean log and a real Xid 79 line, moved to the A10's bus, stamped ``uptime_stamp``."""
    line = next(line for line in corpus(XID79_LOG).splitlines() if "Xid (PCI:" in line)
    line = re.sub(r"PCI:0000:[0-9a-f]{2}:00", "PCI:0000:08:00", line)
    line = re.sub(r"^\[\s*[0-9.]+\]", f"[{uptime_stamp:14.6f}]", line)
    return CLEAN_DMESG + line + "\n"


def _base_bundle() -> dict[str, str]:
    return {
        "nvidia-smi-q.txt": corpus(A10_QUERY),
        "nvidia-smi.txt": corpus(A10_BANNER),
        "nvcc.txt": corpus(NVCC),
        "cudnn_version.h": corpus(CUDNN_HEADER),
        "dmesg.txt": CLEAN_DMESG,
        "meta.json": json.dumps(BASE_META, indent=2) + "\n",
    }


def write(relative: str, content: str | bytes) -> Setup:
    """Write one file under the case's tmp dir (parents created)."""

    def setup(ws: Workspace) -> None:
        target = ws.tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content.replace("{tmp}", str(ws.tmp)), encoding="utf-8")

    return setup


def mkdir(relative: str) -> Setup:
    """Create an (empty) directory under the case's tmp dir."""

    def setup(ws: Workspace) -> None:
        (ws.tmp / relative).mkdir(parents=True, exist_ok=True)

    return setup


def executable(relative: str, content: str) -> Setup:
    """Write a script and make it executable (a dynamic inventory)."""

    def setup(ws: Workspace) -> None:
        target = ws.tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content.replace("{tmp}", str(ws.tmp)), encoding="utf-8")
        target.chmod(0o755)

    return setup


def symlink(relative: str, to: str) -> Setup:
    """A symbolic link under tmp pointing at ``to`` (``{tmp}`` expanded)."""

    def setup(ws: Workspace) -> None:
        target = ws.tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(to.replace("{tmp}", str(ws.tmp)))

    return setup


def combine(*setups: Setup) -> Setup:
    """Several setups, in order."""

    def setup(ws: Workspace) -> None:
        for step in setups:
            step(ws)

    return setup


def policy(text: str, name: str = "policy.yml") -> Setup:
    """A policy YAML file ``{tmp}/policy.yml``."""
    return write(name, text)


def bundle(changes: Mapping[str, Edit] | None = None, *, base: str = "a10") -> Setup:
    """A capture directory ``{tmp}/bundle``: the healthy base with ``changes`` applied.

    Also writes ``{tmp}/policy.yml`` (:data:`POLICY_CAPTURE`), so the base certifies.

    Args:
        changes: bundle file name -> new text, None to remove it, or an edit of its
            text (given "" for a file the base lacks).
        base: ``a10`` (A10 -q + banner, tools, clean dmesg, meta.json) or ``a40x10``
            (the ten-GPU A40 -q alone, with the same tools and log).
    """

    def setup(ws: Workspace) -> None:
        files: dict[str, str | None] = dict(_base_bundle())
        if base == "a40x10":
            files["nvidia-smi-q.txt"] = corpus(A40X10_QUERY)
            files["nvidia-smi.txt"] = None
            files["meta.json"] = None
        for name, change in (changes or {}).items():
            current = files.get(name)
            if callable(change):
                files[name] = change(current or "")
            else:
                files[name] = change
        directory = ws.tmp / "bundle"
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            if text is not None:
                (directory / name).write_text(text, encoding="utf-8")
        (ws.tmp / "policy.yml").write_text(POLICY_CAPTURE, encoding="utf-8")

    return setup


def meta(**values: Any) -> Callable[[str], str]:
    """An edit of meta.json setting these keys (JSON ``NaN`` written as Python writes it)."""

    def edit(text: str) -> str:
        data = json.loads(text)
        data.update(values)
        return json.dumps(data, indent=2) + "\n"

    return edit


def scenario(
    overrides: Mapping[str, Any] | None = None,
    *,
    raw: str | bytes | None = None,
    name: str = "scenario.json",
) -> Setup:
    """A scenario file ``{tmp}/scenario.json`` extending the healthy H100 node.

    Also writes ``{tmp}/policy.yml`` (:data:`POLICY_CAPTURE`), so the base certifies.

    Args:
        overrides: merged over ``{"name": ..., "extends": "healthy-8x-h100-sxm"}``.
        raw: the file's exact content instead (bytes for binary).
        name: the file name under tmp.
    """

    def setup(ws: Workspace) -> None:
        (ws.tmp / "policy.yml").write_text(POLICY_NO_BURN, encoding="utf-8")
        target = ws.tmp / name
        if isinstance(raw, bytes):
            target.write_bytes(raw)
            return
        if raw is not None:
            target.write_text(raw, encoding="utf-8")
            return
        document: dict[str, Any] = {"name": "hostile", "extends": HEALTHY_SCENARIO}
        document.update(overrides or {})
        target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")

    return setup


def gpu(**values: Any) -> dict[str, Any]:
    """Scenario overrides for every GPU's fields (``nvml.gpu``)."""
    return {"nvml": {"gpu": values}}


def nested_json(depth: int) -> str:
    """A JSON document nested ``depth`` arrays deep inside an object."""
    return '{"name": "deep", "nvml": ' + "[" * depth + "]" * depth + "}"


def inventory(hosts: Mapping[str, Mapping[str, Any]], name: str = "inv.yml") -> Setup:
    """A YAML inventory ``{tmp}/<name>``: ``all.hosts`` with these host variables.

    Also writes ``{tmp}/policy.yml`` (:data:`POLICY_NO_BURN`) for the cases that
    certify a healthy fleet without a burn.
    """

    def setup(ws: Workspace) -> None:
        (ws.tmp / "policy.yml").write_text(POLICY_NO_BURN, encoding="utf-8")
        document = {"all": {"hosts": {host: dict(vars) for host, vars in hosts.items()}}}
        text = json.dumps(document, indent=2).replace("{tmp}", str(ws.tmp))
        (ws.tmp / name).write_text(text + "\n", encoding="utf-8")  # JSON is YAML

    return setup


def simulated(*names: str, scenario_name: str = HEALTHY_SCENARIO) -> dict[str, dict[str, Any]]:
    """Inventory hosts, each a simulated node."""
    return {name: {"gpuready_simulate": scenario_name} for name in names}


# ---------------------------------------------------------------- the certified baseline
#
# The session fixture ``hostile_baseline`` (conftest.py) certifies two simulated hosts,
# h100-node-01 (the hostname the built-in H100 scenarios report) and gpu02, signed with
# ``key``: history.db holds their certificates, rep/certificates/ their files.

BASELINE_HOSTS = ("h100-node-01", "gpu02")


def baseline_db(*, key: bool = True) -> Setup:
    """Copy the certified baseline's history.db (and its key file) into the case's tmp."""

    def setup(ws: Workspace) -> None:
        source = ws.baseline
        shutil.copyfile(source / "history.db", ws.tmp / "history.db")
        if key:
            shutil.copyfile(source / "key", ws.tmp / "key")
        (ws.tmp / "policy.yml").write_text(POLICY_CAPTURE, encoding="utf-8")

    return setup


def _latest_certificate_row(db: sqlite3.Connection, host: str) -> tuple[int, str]:
    row = db.execute(
        "SELECT id, json_packed FROM certificates WHERE hostname = ? ORDER BY id DESC LIMIT 1",
        (host,),
    ).fetchone()
    if row is None:
        raise AssertionError(f"the baseline has no certificate of {host}")
    return int(row[0]), unpack(row[1])


def stored_certificate(host: str, edit: Callable[[str], str]) -> Setup:
    """Edit the JSON text of ``host``'s latest stored certificate in {tmp}/history.db (sqlite3)."""

    def setup(ws: Workspace) -> None:
        db = sqlite3.connect(ws.tmp / "history.db")
        try:
            row_id, text = _latest_certificate_row(db, host)
            db.execute(
                "UPDATE certificates SET json_packed = ? WHERE id = ?", (pack(edit(text)), row_id)
            )
            db.commit()
        finally:
            db.close()

    return setup


def stored_sql(statement: str) -> Setup:
    """Run one SQL statement on {tmp}/history.db."""

    def setup(ws: Workspace) -> None:
        db = sqlite3.connect(ws.tmp / "history.db")
        try:
            db.execute(statement)
            db.commit()
        finally:
            db.close()

    return setup


def stored_copy(source_host: str, target_host: str) -> Setup:
    """Put ``source_host``'s (valid, signed) certificate JSON in ``target_host``'s row: a replay."""

    def setup(ws: Workspace) -> None:
        db = sqlite3.connect(ws.tmp / "history.db")
        try:
            _, text = _latest_certificate_row(db, source_host)
            row_id, _ = _latest_certificate_row(db, target_host)
            db.execute("UPDATE certificates SET json_packed = ? WHERE id = ?", (pack(text), row_id))
            db.commit()
        finally:
            db.close()

    return setup


def json_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    """An edit of a certificate's JSON text, written back as certificates are written."""

    def edit(text: str) -> str:
        data = json.loads(text)
        change(data)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    return edit


def set_gpu_power(index: int, watts: float) -> Callable[[str], str]:
    """A certificate edit: GPU ``index``'s enforced power limit is ``watts``."""

    def change(data: dict[str, Any]) -> None:
        data["gpus"][index]["power_limit_enforced_w"] = watts

    return json_edit(change)


def set_every_gpu_power(watts: float) -> Callable[[str], str]:
    """A certificate edit: every GPU's enforced power limit is ``watts``."""

    def change(data: dict[str, Any]) -> None:
        for item in data["gpus"]:
            item["power_limit_enforced_w"] = watts

    return json_edit(change)


def set_field(name: str, value: Any) -> Callable[[str], str]:
    """A certificate edit: a top-level field set to ``value``."""

    def change(data: dict[str, Any]) -> None:
        data[name] = value

    return json_edit(change)


def drop_field(name: str) -> Callable[[str], str]:
    """A certificate edit: a top-level field removed."""

    def change(data: dict[str, Any]) -> None:
        del data[name]

    return json_edit(change)


def flip_digest(text: str) -> str:
    """A certificate edit: one bit of the digest's first hex digit flipped."""
    data = json.loads(text)
    digest = data["digest"]
    data["digest"] = format(int(digest[0], 16) ^ 1, "x") + digest[1:]
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def duplicate_hostname(text: str) -> str:
    """A certificate edit: a tampered ``"hostname"`` key before the real one (a duplicate)."""
    return text.replace('"hostname":', '"hostname": "evil-node",\n  "hostname":', 1)


def substituted(pattern: str, replacement: str) -> Callable[[str], str]:
    """An edit of a certificate's text, in whichever form it was written, that must change it.

    The first match of ``pattern`` (a regular expression) is replaced; an edit that
    finds nothing raises, so no case ever runs on an untouched certificate.
    """

    def edit(text: str) -> str:
        edited, count = re.subn(pattern, replacement, text, count=1)
        if count != 1:
            raise AssertionError(f"nothing matched {pattern!r} in the certificate to edit")
        return edited

    return edit


def nan_value(name: str) -> Callable[[str], str]:
    """A certificate edit: the first number written as ``name`` replaced by NaN (not JSON)."""
    return substituted(rf'("{re.escape(name)}":\s*)-?[0-9][0-9.eE+-]*', r"\1NaN")


def duplicate_nested_key(text: str) -> str:
    """A certificate edit: GPU 0's power limit given twice, the first one tampered."""
    return text.replace(
        '"power_limit_enforced_w":',
        '"power_limit_enforced_w": 1.0,\n      "power_limit_enforced_w":',
        1,
    )


def certificate_file(host: str, edit: Callable[[str], str] | None = None) -> Setup:
    """``{tmp}/cert.json``: the baseline's certificate file of ``host``, edited; plus the key."""

    def setup(ws: Workspace) -> None:
        text = (ws.baseline / "rep" / "certificates" / f"{host}.json").read_text(encoding="utf-8")
        (ws.tmp / "cert.json").write_text(edit(text) if edit else text, encoding="utf-8")
        shutil.copyfile(ws.baseline / "key", ws.tmp / "key")

    return setup


def foreign_sqlite(relative: str) -> Setup:
    """An SQLite database of another program (its own tables, no gpuready schema)."""

    def setup(ws: Workspace) -> None:
        db = sqlite3.connect(ws.tmp / relative)
        try:
            db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
            db.execute("INSERT INTO notes (body) VALUES ('buy milk')")
            db.commit()
        finally:
            db.close()

    return setup


def truncated_baseline_db(relative: str = "history.db") -> Setup:
    """The baseline's history.db cut to half its size (a crash or a full disk mid-copy)."""

    def setup(ws: Workspace) -> None:
        data = (ws.baseline / "history.db").read_bytes()
        (ws.tmp / relative).write_bytes(data[: len(data) // 2])

    return setup


def future_schema_db(relative: str = "history.db") -> Setup:
    """The baseline's history.db stamped with a schema version from a newer gpuready."""

    def setup(ws: Workspace) -> None:
        shutil.copyfile(ws.baseline / "history.db", ws.tmp / relative)
        db = sqlite3.connect(ws.tmp / relative)
        try:
            db.execute("PRAGMA user_version = 999")
            db.commit()
        finally:
            db.close()

    return setup


# ---------------------------------------------------------------- certification attempts


def failed_attempt(
    host: str, *, scenario_name: str = "one-gpu-power-capped", interrupted: bool = False
) -> Setup:
    """Record in {tmp}/history.db a later certify run that did not certify ``host``.

    The result is ``scenario_name`` judged (NOT_CERTIFIED for the capped scenario) and
    named ``host``, as ``certify`` records it, one second after the baseline's
    certificates. ``interrupted``: an UNKNOWN result (nothing judged) in a run cut short.
    """

    def setup(ws: Workspace) -> None:
        import dataclasses

        from tests.collecting import collect_simulated
        from validator import store as store_module
        from validator.judge import judge_node
        from validator.judge.policy import Policy
        from validator.model import NodeFacts, Verdict

        if interrupted:
            facts = NodeFacts(hostname=host, source="simulate")
        else:
            facts = dataclasses.replace(collect_simulated(scenario_name), hostname=host)
        result = judge_node(facts, Policy())
        assert result.verdict is not Verdict.CERTIFIED, result.summary
        with store_module.Store.open(ws.tmp / "history.db") as store:
            run = store.start_run("certify", 1, result.policy_digest)
            store.record_result(run, result)
            store.finish_run(run, interrupted=interrupted)
        # Recorded after every certificate of the baseline, whatever the clock says.
        db = sqlite3.connect(ws.tmp / "history.db")
        try:
            db.execute(
                "UPDATE results SET recorded_at = '2999-01-01T00:00:00+00:00' WHERE run_id = ?",
                (run,),
            )
            db.commit()
        finally:
            db.close()

    return setup
