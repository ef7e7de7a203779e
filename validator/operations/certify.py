"""``gpuready certify`` (and ``provision --certify``) as one typed function.

A request in; the report written, certificates issued for the certified nodes,
and the run recorded in history; an outcome out. In that order, because
nothing measured may be lost: the reports first, then the certificates, then
history (and history even when the reports could not be written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from validator.certify import FleetRequest, NodeRequest, certify_fleet, certify_node, fleet_of
from validator.errors import ExitCode
from validator.judge.policy import Policy, load_policy, policy_digest
from validator.model import HostSpec, NodeResult, Report, TransportName, Verdict
from validator.node.burnin.config import BurnConfig
from validator.operations.outcome import report_exit_code
from validator.remote.transport import Progress
from validator.store import RunKind

if TYPE_CHECKING:
    from validator.certificate import Certificate
    from validator.node.burnin.run import ProgressSink
    from validator.store import Store


@dataclass(frozen=True)
class CertifyRequest:
    """Everything ``certify`` is asked to do.

    Without inventories: one node (this host, ``capture`` or ``simulate``); with
    them: every host of the inventories, reached through ``transport``.
    """

    simulate: str | None = None
    capture: str | None = None
    policy_path: str | None = None
    burn: BurnConfig | None = None  # None: no burn-in
    inventories: tuple[str, ...] = ()
    limit: str | None = None
    transport: TransportName = TransportName.SSH
    parallel: int = 64
    deadline_s: float | None = None  # None: the burn plus a margin
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 10.0
    ssh_config: str | None = None
    known_hosts: str | None = None
    report_dir: str | None = None  # write report.json/html, junit.xml, hosts/, certificates/
    sign_key: str | None = None  # a key file: certificates are signed with HMAC-SHA256
    argv: Sequence[str] = ()  # the command line, as history records it

    def __post_init__(self) -> None:
        # click and inventories give the name as text: one type from here on.
        object.__setattr__(self, "transport", TransportName(self.transport))

    def fleet(self) -> FleetRequest:
        """The fan-out this request asks for."""
        return fleet_of(self)


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
    run_id: int
    certificates: dict[str, Certificate] = field(default_factory=dict)
    written: dict[str, Path] = field(default_factory=dict)  # report files by format

    @property
    def exit_code(self) -> ExitCode:
        """By the one rule of validator.operations.outcome."""
        return report_exit_code(self.report)


def run_certify(
    request: CertifyRequest,
    store: Store,
    *,
    burn_progress: ProgressSink | None = None,
    fleet_display: FleetDisplay | None = None,
) -> CertifyOutcome:
    """Certify what the request names; write its reports, certificates and history.

    Args:
        request: what to certify and where the results go.
        store: the history database.
        burn_progress: told about a single node's burn about once a second.
        fleet_display: told about a fleet's hosts, phases and results.

    Raises:
        BadInputError: a bad policy, inventory, scenario, capture or key file.
        ReportError: the reports could not be written (history is recorded first).
        KeyboardInterrupt: Ctrl-C before a single node's burn; the run is closed as
            interrupted. (Ctrl-C during the burn ends the burn, which is judged.)
    """
    from validator.certificate import load_key

    key = load_key(request.sign_key) if request.sign_key else None
    policy = load_policy(request.policy_path) if request.policy_path else Policy()
    if request.report_dir is not None:
        _check_writable(request.report_dir)  # before the burn, not after it
    if request.inventories:
        report, run_id = _certify_fleet(request, store, policy, fleet_display)
    else:
        run_id = store.start_run(RunKind.CERTIFY, 1, policy_digest(policy), request.argv)
        node = NodeRequest(
            simulate=request.simulate,
            capture=request.capture,
            policy_path=request.policy_path,
            burn=request.burn,
        )
        try:
            report = certify_node(node, progress=burn_progress)
        except BaseException:
            store.finish_run(run_id, interrupted=True)
            raise
    certificates = certificates_for(report, key)
    written: dict[str, Path] = {}
    try:
        if request.report_dir is not None:
            written = _write_reports(report, certificates, request.report_dir)
    finally:
        record_report(store, run_id, report, certificates)
    return CertifyOutcome(report=report, run_id=run_id, certificates=certificates, written=written)


def _certify_fleet(
    request: CertifyRequest, store: Store, policy: Policy, display: FleetDisplay | None
) -> tuple[Report, int]:
    """The fan-out; each host's result is recorded (and written) as it arrives."""
    from validator.remote.ssh import quiet_paramiko

    quiet_paramiko()
    run: list[int] = []  # set once the inventory is read

    def hosts_known(hosts: list[HostSpec]) -> None:
        if display is not None:
            display.set_hosts(hosts)
        run.append(
            store.start_run(RunKind.CERTIFY, len(hosts), policy_digest(policy), request.argv)
        )

    def arrived(result: NodeResult) -> None:
        if display is not None:
            display.result(result)
        # Committed as it arrives; the final judgement (after the fleet
        # comparison) replaces it, with its certificate.
        store.record_result(run[0], result)
        if request.report_dir is not None:
            from validator.report.partial import write_host_result

            write_host_result(result, request.report_dir)

    try:
        report = certify_fleet(
            request.fleet(), progress=display, on_result=arrived, on_hosts=hosts_known
        )
    except BaseException:
        if run:  # the results recorded so far stay; the run says it was cut short
            store.finish_run(run[0], interrupted=True)
        raise
    return report, run[0]


def _check_writable(directory: str) -> None:
    """Refuse a report directory that cannot be written, naming it and the fix.

    Raises:
        BadInputError: it cannot be created, or a file cannot be written in it.
    """
    import tempfile

    from validator.errors import BadInputError

    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise BadInputError(
            f"--report-dir {directory} cannot be written ({exc.strerror or exc}); give a "
            "writable directory"
        ) from None


def certificates_for(report: Report, key: bytes | None) -> dict[str, Certificate]:
    """A certificate for every CERTIFIED node, signed when a key is given."""
    from validator.certificate import issue_certificate, sign

    issued = {}
    for node in report.nodes:
        if node.verdict is Verdict.CERTIFIED:
            certificate = issue_certificate(node)
            issued[node.hostname] = sign(certificate, key) if key else certificate
    return issued


def _write_reports(
    report: Report, certificates: dict[str, Certificate], directory: str
) -> dict[str, Path]:
    """The reports, then each certificate beside them (``certificates/<host>.json``)."""
    from validator.certificate import certificate_to_json
    from validator.files import write_atomic
    from validator.report.partial import host_result_path
    from validator.report.writer import write_reports

    written = write_reports(report, directory)
    for hostname, certificate in certificates.items():
        path = host_result_path(directory, hostname)
        target = path.parent.parent / "certificates" / path.name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, certificate_to_json(certificate))
        except OSError as exc:
            from validator.errors import ReportError

            raise ReportError(
                f"cannot write the certificate {target} ({exc.strerror or exc}); make the "
                "report directory writable"
            ) from None
    return written


def record_report(
    store: Store, run_id: int, report: Report, certificates: dict[str, Certificate]
) -> None:
    """Commit every node's final result (and certificate) and close the run."""
    from validator.operations.outcome import report_interrupted

    for node in report.nodes:
        store.record_result(run_id, node, certificates.get(node.hostname))
    store.finish_run(run_id, interrupted=report_interrupted(report))


__all__ = [
    "CertifyOutcome",
    "CertifyRequest",
    "FleetDisplay",
    "certificates_for",
    "record_report",
    "run_certify",
]
