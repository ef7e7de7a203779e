"""``gpuready certify`` (and ``provision --certify``) as one typed function.

A request in; the reports written, certificates issued for the certified nodes,
and the run recorded in history; an outcome out. In that order, because
nothing measured may be lost: the reports first (atomically), then the
certificates, then history, which records the measured results even when the
reports or certificates could not be written. Such a failure does not end the
run: the outcome carries it as a problem (one line naming the file and why),
and the run's exit code is then 3, "measured, but not stored".

The history database itself never loses a run either: one it cannot write is
spooled to a pending file (see validator.store), and the outcome carries the
store's notices (where the run went, what was imported) for the CLI to show.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from validator.error_tree import ExitCode, GpureadyError, ReportError
from validator.judge.actions import report_with_actions
from validator.judge.policy import Policy, policy_digest
from validator.model import HostSpec, NodeResult, Report, Verdict
from validator.node.burnin.burn_config import BurnConfig
from validator.node.sparing_gc import sparing_collector
from validator.remote.transport import Progress
from validator.service import signals
from validator.service.collect_and_judge import (
    FleetRequest,
    Reach,
    certify_fleet,
    effective_policy,
    facts_request,
    interconnect_mode,
    report_of,
    with_container_image,
)
from validator.service.outcome import report_exit_code
from validator.store import RunKind

if TYPE_CHECKING:
    from validator.certificate import Certificate
    from validator.node.burnin.burn_progress import BurnProgress, ProgressSink
    from validator.report.rma import LastCertificate
    from validator.signing import SealKey
    from validator.slurm.judged_nodes import SlurmStep
    from validator.slurm.submission_spool import Submission
    from validator.store import Store


@dataclass(frozen=True)
class CertifyRequest:
    """Everything ``certify`` is asked to do.

    Without inventories or Slurm in ``reach``: one node (this host, ``capture`` or
    ``simulate``); with them: every host they name, reached as ``reach`` says.
    """

    simulate: str | None = None
    capture: str | None = None
    policy_path: str | None = None
    burn: BurnConfig | None = None  # None: no burn-in
    reach: Reach = field(default_factory=Reach)
    deadline_s: float | None = None  # None: the burn plus a margin
    report_dir: str | None = None  # write report.json/html, junit.xml, hosts/, certificates/
    prom_file: str | None = None  # write node_exporter's textfile here (--prom-file)
    # --json-form: report.json's form (validator.report.json_report.JsonForm's values).
    json_form: str = "auto"
    # A key file: certificates are signed with it (Ed25519 private key, or HMAC-SHA256 secret).
    sign_key: str | None = None
    dcgm_level: int | None = None  # --dcgm-level: overrides the policy's; None: the policy's
    # --interconnect (True) / --no-interconnect (False): overrides the policy's; None: its own.
    interconnect: bool | None = None
    # Through Slurm (``reach.slurm``): a submission to gather instead of submitting one;
    # and whether to drain the nodes that fail (resuming those gpuready drained that pass).
    slurm_collect: str | None = None
    slurm_drain: bool = False
    argv: Sequence[str] = ()  # the command line, as history records it
    gpus: tuple[str, ...] = ()  # --gpus: the GPUs to certify (validator.node.gpu_choice); all
    allow_busy: bool = False  # --allow-busy: burn GPUs with others' work on them
    # --container-image: overrides the policy's container.image; None: the policy's.
    container_image: str | None = None
    cross_node: tuple[str, ...] = ()  # --cross-node's kinds; --fabric (None: from the SKUs)
    fabric: str | None = None

    def fleet(self) -> FleetRequest:
        """The fan-out this request asks for."""
        return FleetRequest(
            self.reach,
            policy_path=self.policy_path,
            burn=self.burn,
            deadline_s=self.deadline_s,
            dcgm_level=self.dcgm_level,
            interconnect=self.interconnect,
            slurm_collect=self.slurm_collect,
            gpus=self.gpus,
            allow_busy=self.allow_busy,
            cross_node=self.cross_node,
            fabric=self.fabric,
        )


class FleetDisplay(Progress, Protocol):
    """What a fleet run tells its display: the hosts, each host's phase, each result."""

    def set_hosts(self, hosts: list[HostSpec]) -> None:
        """The inventory is read: these hosts will be certified."""
        ...

    def result(self, result: NodeResult) -> None:
        """One host's result arrived."""
        ...


@dataclass(frozen=True)
class CertifyOutcome:
    """What a certify run came to."""

    report: Report
    run_id: int  # below 0: the run waits in a pending file (see validator.store)
    certificates: dict[str, Certificate] = field(default_factory=dict)  # as stored
    written: dict[str, Path] = field(default_factory=dict)  # report files by format
    # What could not be stored (a report or certificate file, the history): one line each.
    problems: tuple[str, ...] = ()
    # What the user should know: the run spooled to a pending file, pending runs imported.
    notices: tuple[str, ...] = ()
    slurm: tuple[SlurmStep, ...] = ()  # what --slurm-drain did about each node
    submission: Submission | None = None  # the Slurm submission the results came from

    @property
    def exit_code(self) -> ExitCode:
        """By the one rule of validator.service.outcome; 3 when something was not stored."""
        if self.problems:
            return ExitCode.COULD_NOT_RUN
        return report_exit_code(self.report)


def run_certify(
    request: CertifyRequest,
    store: Store,
    *,
    burn_progress: ProgressSink | None = None,
    fleet_display: FleetDisplay | None = None,
) -> CertifyOutcome:
    """Certify what the request names; write its reports, certificates and history.

    A fleet runs with the garbage collector set for it (validator.node.sparing_gc).

    Args:
        request: what to certify and where the results go.
        store: the history database.
        burn_progress: told about a single node's burn about once a second.
        fleet_display: told about a fleet's hosts, phases and results.

    Raises:
        BadInputError: a bad policy, inventory, scenario, capture or key file, or a
            --report-dir that cannot be written: found before anything is measured,
            and nothing is recorded (the run starts in history with the measuring).
        KeyboardInterrupt: Ctrl-C before a single node's burn; the run is closed as
            interrupted. (Ctrl-C during the burn ends the burn, which is judged.)
    """
    if not request.reach.is_fleet:
        return _run_certify(request, store, burn_progress, fleet_display)
    with sparing_collector():
        return _run_certify(request, store, burn_progress, fleet_display)


def _run_certify(
    request: CertifyRequest,
    store: Store,
    burn_progress: ProgressSink | None,
    fleet_display: FleetDisplay | None,
) -> CertifyOutcome:
    key = None
    if request.sign_key:
        from validator.signing import load_signing_key

        key = load_signing_key(request.sign_key)
    policy = _policy(request)
    _check_outputs(request)  # before the burn, not after it
    problems: list[str] = []
    submitted: list[Submission] = []
    if request.reach.is_fleet:
        report, run_id = _certify_fleet(
            request, store, policy, fleet_display, problems, submitted.append
        )
    else:
        report, run_id = _certify_one(request, store, policy, burn_progress)
    signals.measured()  # a stop signal from here on lets the reports and history finish
    report = report_with_actions(report)
    issued = certificates_for(report, key)
    written: dict[str, Path] = {}
    stored = issued
    if request.report_dir is not None:
        last = _last_certificates(store, report)
        written, stored, problem = _write_outputs(
            report, issued, request.report_dir, last, json_form=request.json_form
        )
        if problem is not None and not problems:  # the first failure names the file
            problems.append(problem)
    if request.prom_file is not None:  # a report too: written before history, as they are
        from validator.report.prometheus_certify import textfile_problems

        problems.extend(textfile_problems(request.prom_file, report))
    try:
        recorded = record_report(store, run_id, report, stored)
    except GpureadyError as exc:
        problems.append(str(exc))
    else:
        if recorded:  # else the store's warning says so; the verdict's exit code stands
            problems = [f"{problem} (the results are kept in history)" for problem in problems]
    slurm: tuple[SlurmStep, ...] = ()
    if request.slurm_drain:
        from validator.slurm.judged_nodes import certify_reason, tell_slurm, with_quarantine

        quarantined = {node for submission in submitted for node in submission.quarantined}
        slurm = with_quarantine(tell_slurm(report.nodes, certify_reason), report, quarantined)
    return CertifyOutcome(
        report=report,
        run_id=run_id,
        certificates=stored,
        written=written,
        problems=tuple(problems),
        notices=tuple(store.take_notices()),
        slurm=slurm,
        submission=submitted[0] if submitted else None,
    )


def _certify_one(
    request: CertifyRequest, store: Store, policy: Policy, burn_progress: ProgressSink | None
) -> tuple[Report, int]:
    """One node, its run started in history once measuring has begun (see _RunStart)."""
    run = _RunStart(store, policy_digest(policy), request.argv)

    def progress(update: BurnProgress) -> None:
        run.soon()
        if burn_progress is not None:
            burn_progress(update)

    try:
        report = certify_node(request, progress=progress, policy=policy)
    except GpureadyError:  # bad input, or this host has nothing to certify (certify_node)
        if run.started:  # found during the burn: the run is cut short
            _close_cut_short(store, run.run_id())
        raise  # found before it: nothing was measured, nothing is recorded
    except BaseException:
        _close_cut_short(store, run.run_id())  # Ctrl-C is a run cut short
        raise
    return report, run.run_id()


def certify_node(
    request: CertifyRequest, *, progress: ProgressSink | None = None, policy: Policy | None = None
) -> Report:
    """Collect and judge the one node the request names (this host, its capture or scenario).

    In this thread, with or without a deadline, so Ctrl-C still ends the burn, which is
    judged. With a deadline, the burn-in is cut to end within it, and a node whose run
    was cut (or took longer) is UNKNOWN, judged as timed out, its measurements kept.

    Args:
        request: the source of facts, the policy, the burn-in and the deadline.
        progress: called about once a second while the burn-in runs.
        policy: the run's policy, already read (:func:`effective_policy`); None reads
            the request's.

    Raises:
        BadInputError: a bad policy file, capture directory or scenario.
        KeyboardInterrupt: Ctrl-C before the burn-in (one during it ends the burn, which is
            then judged as interrupted).
    """
    from validator.judge import judge_node
    from validator.node.agent import check_something_to_certify, source_for
    from validator.node.collect import collect

    if policy is None:
        policy = _policy(request)
    check_something_to_certify(request.simulate, request.capture)  # before anything is measured
    started = time.monotonic()
    until = None if request.deadline_s is None else started + request.deadline_s
    facts = collect(
        source_for(request.simulate, request.capture),
        facts_request(
            policy,
            request.burn,
            interconnect_mode(policy),
            gpus=request.gpus,
            allow_busy=request.allow_busy,
        ),
        until,
        progress,
    )
    result = judge_node(facts, policy)
    if request.deadline_s is not None:
        from validator.remote.deadline import cut_short, timed_out

        asked = request.burn if request.capture is None else None  # a capture holds no burn
        cut = cut_short(asked, facts, request.deadline_s, time.monotonic() - started)
        if cut is not None:
            result = timed_out(result, request.deadline_s, cut)
    return report_of((result,))


class _RunStart:
    """A single node's run, started in history once its measuring has begun.

    Bad input found before the burn (a scenario, a capture, an injection target)
    so records nothing. The burn's first progress tick starts the run in a
    helper thread, because a locked database must never hold up the burn (it
    waits out its retry budget, then spools); it is started at the latest when
    the node has been judged or the run is cut short.
    """

    def __init__(self, store: Store, digest: str, argv: Sequence[str]) -> None:
        self._store = store
        self._digest = digest
        self._argv = argv
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._id: int | None = None

    @property
    def started(self) -> bool:
        """Whether the run was started (or is being started)."""
        with self._guard:
            return self._thread is not None or self._id is not None

    def soon(self) -> None:
        """Start the run in the background, once."""
        with self._guard:
            if self._thread is None and self._id is None:
                self._thread = threading.Thread(
                    target=self._start_quietly, name="history-start", daemon=True
                )
                self._thread.start()

    def _start_quietly(self) -> None:
        # run_id() starts it again, and raises, if this failed.
        with contextlib.suppress(Exception):
            self._id = self._store.start_run(RunKind.CERTIFY, 1, self._digest, self._argv)

    def run_id(self) -> int:
        """The run's id, started now if it was not yet."""
        with self._guard:
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._guard:
            if self._id is None:
                self._id = self._store.start_run(RunKind.CERTIFY, 1, self._digest, self._argv)
            return self._id


def _close_cut_short(store: Store, run_id: int) -> None:
    """Close a run that an exception is ending; that exception is the one to tell."""
    with contextlib.suppress(GpureadyError):
        store.finish_run(run_id, interrupted=True)


def _certify_fleet(
    request: CertifyRequest,
    store: Store,
    policy: Policy,
    display: FleetDisplay | None,
    problems: list[str],
    on_submitted: Callable[[Submission], None] | None = None,
) -> tuple[Report, int]:
    """The fan-out; each host's result is recorded (and written) as it arrives.

    A host file that cannot be written does not stop the fleet: the first such
    failure goes to ``problems`` and no more host files are tried (history still
    records every host).
    """
    from validator.remote.ssh import quiet_paramiko

    quiet_paramiko()
    run: list[int] = []  # set once the inventory is read

    def hosts_known(hosts: list[HostSpec]) -> None:
        if display is not None:
            display.set_hosts(hosts)
        run.append(
            store.start_run(RunKind.CERTIFY, len(hosts), policy_digest(policy), request.argv)
        )

    def arrived(batch: Sequence[NodeResult]) -> None:
        # Committed as they arrive, what has queued up in one transaction; the final
        # judgement (after the fleet comparison) replaces each, with its certificate.
        store.record_results(run[0], [(result, None) for result in batch])
        from validator.report.partial import write_host_result  # a fleet's only

        for result in batch:
            if request.report_dir is not None and not problems:
                try:
                    write_host_result(result, request.report_dir)
                except ReportError as exc:
                    problems.append(str(exc))
            # Only then shown: a result the user saw arrive is already stored.
            if display is not None:
                display.result(result)

    try:
        report = certify_fleet(
            request.fleet(),
            progress=display,
            on_results=arrived,
            on_hosts=hosts_known,
            on_submitted=on_submitted,
            policy=policy,
        )
    except BaseException:
        if run:  # the results recorded so far stay; the run says it was cut short
            _close_cut_short(store, run[0])
        raise
    return report, run[0]


def _policy(request: CertifyRequest) -> Policy:
    """The run's policy: the file's, with the command line's overrides."""
    policy = effective_policy(request.policy_path, request.dcgm_level, request.interconnect)
    return with_container_image(policy, request.container_image)


def _check_outputs(request: CertifyRequest) -> None:
    """Refuse a report folder or textfile that cannot be written (BadInputError), up front."""
    if request.report_dir is not None:
        from validator.service.report_dir_check import check_writable

        check_writable(request.report_dir)
    if request.prom_file is not None:
        from validator.report.prometheus import check_textfile

        check_textfile(request.prom_file)


def certificates_for(report: Report, key: SealKey | None) -> dict[str, Certificate]:
    """A certificate for every CERTIFIED node, signed when a key is given."""
    issued = {}
    for node in report.nodes:
        if node.verdict is Verdict.CERTIFIED:
            from validator.certificate import issue_certificate, sign, with_fabric
            from validator.model.fabric_certified import certified_fabric

            certificate = issue_certificate(node)
            if report.cross_node is not None:  # the node in the fabric too
                fabric = certified_fabric(report.cross_node, node.hostname, certificate.issued_at)
                certificate = with_fabric(certificate, fabric)
            issued[node.hostname] = sign(certificate, key) if key else certificate
    return issued


def _remove_stale_temporaries(directory: str) -> None:
    """Remove the temporary files that killed runs left in the report folders."""
    from validator.files import remove_stale_temporaries
    from validator.report.partial import CERTIFICATES_DIR, HOSTS_DIR
    from validator.report.rma import RMA_DIR

    root = Path(directory)
    for folder in (root, root / HOSTS_DIR, root / CERTIFICATES_DIR, root / RMA_DIR):
        remove_stale_temporaries(folder, start=root)  # none through a planted link


def _last_certificates(store: Store, report: Report) -> dict[str, LastCertificate]:
    """The newest stored certificate of each node an RMA file will be written for.

    Read before this run's results are recorded, so it is the certificate the node held
    coming in. One that cannot be read is left out: the file then says only this run's
    evidence digest, which is true, rather than the run failing for its evidence.
    """
    from validator.report.rma import LastCertificate, hardware_failures

    found: dict[str, LastCertificate] = {}
    for node in report.nodes:
        if not hardware_failures(node):
            continue
        try:
            certificate = store.latest_certificate(node.hostname)
        except GpureadyError:
            continue
        if certificate is not None:
            found[node.hostname] = LastCertificate(certificate.issued_at, certificate.digest)
    return found


def _write_outputs(
    report: Report,
    certificates: dict[str, Certificate],
    directory: str,
    last_certificates: Mapping[str, LastCertificate] | None = None,
    *,
    json_form: str = "auto",
) -> tuple[dict[str, Path], dict[str, Certificate], str | None]:
    """The reports, the RMA evidence (``rma/``), then each certificate (``certificates/``).

    No certificate is written unless the reports were; a certificate is stored
    in history only when its file was written. The RMA evidence files (one per GPU
    that failed with a hardware action, see validator.report.rma) follow the reports;
    one that cannot be written is the run's problem, and the certificates are still
    written (a node with such a GPU has none, so nothing ties them together).

    Returns:
        The report files by format, the certificates written, and the first
        failure (one line naming the file and why), or None.
    """
    from validator.certificate import certificate_text
    from validator.files import write_atomic
    from validator.report.partial import certificate_path
    from validator.report.rma import RMA_DIR, write_rma
    from validator.report.writer import write_reports

    _remove_stale_temporaries(directory)  # those a killed run left in these folders
    # First, even where the reports cannot be written: no older certificate stays here
    # for a host this run did not certify.
    stale = _remove_uncertified(report, certificates, directory)
    try:
        written = write_reports(report, directory, json_form=json_form)
    except ReportError as exc:
        return {}, {}, stale or str(exc)
    problem: str | None = stale
    try:
        digests = {host: certificate.digest for host, certificate in certificates.items()}
        evidence = write_rma(report, directory, digests, last_certificates)
    except ReportError as exc:
        problem = str(exc)
    else:
        if evidence:
            written = {**written, "rma": Path(directory) / RMA_DIR}
    stored: dict[str, Certificate] = {}
    for hostname, certificate in certificates.items():
        target = certificate_path(directory, hostname)
        try:
            # The report folder and certificates/ are ours: never through a link.
            write_atomic(target, certificate_text(certificate), start=directory)
        except OSError as exc:
            return (
                written,
                stored,
                (
                    f"cannot write the certificate {target}: {exc.strerror or exc}; free space "
                    "or choose a writable --report-dir and certify again"
                ),
            )
        stored[hostname] = certificate
    return written, stored, problem


def _remove_uncertified(
    report: Report, certificates: Mapping[str, Certificate], directory: str
) -> str | None:
    """Remove the ``certificates/`` files of hosts this run did not certify; the problem or None."""
    from validator.error_tree import UnsafePathError
    from validator.report.partial import remove_certificates

    uncertified = [node.hostname for node in report.nodes if node.hostname not in certificates]
    try:
        remove_certificates(directory, uncertified)
    except (ReportError, UnsafePathError) as exc:
        return str(exc)
    return None


def record_report(
    store: Store, run_id: int, report: Report, certificates: dict[str, Certificate]
) -> bool:
    """Commit every node's final result (and certificate) in one transaction, and close the run.

    The stage across nodes, where the run ran it, is kept with the run in that transaction.

    Returns:
        Whether the run was recorded (in the database or a pending file); when it was
        not, a warning waits among the store's notices.
    """
    from validator.service.outcome import close_run, report_interrupted

    store.record_results(
        run_id,
        [(node, certificates.get(node.hostname)) for node in report.nodes],
        cross_node=report.cross_node,  # the stage across nodes, kept with the run
    )
    return close_run(store, run_id, interrupted=report_interrupted(report))


__all__ = [
    "CertifyOutcome",
    "CertifyRequest",
    "FleetDisplay",
    "certificates_for",
    "certify_node",
    "record_report",
    "run_certify",
]
