"""``gpuready drift`` as one typed function.

A request in: every node's facts compared with its latest certificate (or, for
this machine, a certificate file), each result committed to history as it is
judged, the Prometheus textfile written, and Slurm nodes drained or resumed as
asked; an outcome out. The textfile is written before the run is closed, and the
run is closed even when the file could not be written: nothing measured is lost.
Slurm is told last, about what was recorded.

No certificate is used unchecked. A stored one must be the node's own and match
its digest (and, with a key, carry that key's signature); one that does not, or
that cannot be read at all, is an :class:`UntrustedBaseline`: the node is reported
as drift on ``drift.certificate``, never compared with it, and never with an older
certificate in its place (that would let a tampered row roll the baseline back).
Nor is one that a later certification of the host (its name in any case) did not
certify: that attempt revokes it (:func:`revocation`), a certificate file given for
this machine included, until a new certificate is issued.

A host whose history holds no certificate of it (a node keeping its own history) is
compared with a certificate file instead, checked the same way: ``<host>.json`` in the
read-only folder ``--certificates`` names (certify --report-dir's ``certificates/``),
and for this machine :data:`NODE_CERTIFICATE`, where the drift-timer role copies it.
Without either, drift names the certification that failed (:class:`NoCertificate`), or
says the host was never certified.
"""

from __future__ import annotations

import datetime
import errno
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

from validator import __version__
from validator.certificate import CertificateError, verify_baseline, verify_seal
from validator.drift import (
    NoCertificate,
    UntrustedBaseline,
    drift_node,
    not_certified_by,
    revoked,
    slurm_reason,
)
from validator.error_tree import ExitCode, ReportError
from validator.judge.actions import result_with_actions
from validator.judge.policy import Policy, load_policy, policy_digest
from validator.model import NodeFacts, NodeResult, Report
from validator.node.burnin.burn_config import BurnConfig
from validator.node.sparing_gc import sparing_collector
from validator.safe_text import one_line
from validator.service import signals
from validator.service.collect_and_judge import FleetRequest, Reach, facts_request
from validator.service.outcome import close_run, exit_code, report_interrupted
from validator.slurm.judged_nodes import SlurmStep, tell_slurm
from validator.store import RunKind, StoreError

if TYPE_CHECKING:
    from validator.certificate import Certificate
    from validator.model import HostSpec
    from validator.service.certify_service import FleetDisplay
    from validator.signing import KeyLike
    from validator.slurm import Runner
    from validator.store import Store


@dataclass(frozen=True)
class DriftRequest:
    """Everything ``drift`` is asked to do.

    Without inventories or Slurm in ``reach``: this machine (or ``simulate``), against
    ``certificate`` when given, else the store's latest for its hostname; with them:
    every host they name, reached as ``reach`` says, each against the store's latest
    certificate under its inventory name. Every certificate is verified before use,
    its signature too when ``sign_key`` is given (then an unsigned one fails).
    """

    simulate: str | None = None
    certificate: Certificate | None = None  # this machine only; verified again here
    sign_key: KeyLike | None = field(default=None, repr=False)  # secrets stay out of logs
    policy_path: str | None = None
    burn: BurnConfig | None = None  # None: no burn-in, so no speed to compare
    reach: Reach = field(default_factory=Reach)
    deadline_s: float | None = None  # None: the burn plus a margin
    prom_file: str | None = None  # write the node_exporter textfile here
    slurm_drain: bool = False  # drain drifted nodes, resume the clean ones gpuready drained
    # --interconnect: measure it and compare with the certificate's figures (see
    # interconnect_modes); off by default, drift being the cheap scheduled check.
    measure_interconnect: bool = False
    # A folder of <host>.json certificates (certify --report-dir's certificates/), read
    # only, for a host whose history holds no certificate of it.
    certificates_dir: str | None = None
    # This machine: with no certificate in its history, the one the drift-timer role
    # copied to NODE_CERTIFICATE (checked after certificates_dir).
    node_certificate: bool = True
    argv: Sequence[str] = ()  # the command line, as history records it

    def __post_init__(self) -> None:
        if self.reach.inventories and (self.simulate is not None or self.certificate is not None):
            raise ValueError("simulate and certificate are for this machine, not an inventory")
        if self.certificate is not None and self.certificates_dir is not None:
            raise ValueError("a certificate file, or a folder of them: not both")

    def fleet(self) -> FleetRequest:
        """The fan-out this request asks for: drift has no DCGM or interconnect overrides."""
        return FleetRequest(
            self.reach, policy_path=self.policy_path, burn=self.burn, deadline_s=self.deadline_s
        )


@dataclass(frozen=True)
class DriftOutcome:
    """What a drift run came to."""

    report: Report
    run_id: int
    interrupted: bool = False  # Ctrl-C: the fleet or the burn-in was cut short
    prom_file: Path | None = None  # the textfile written
    slurm: tuple[SlurmStep, ...] = ()
    recorded: bool = True  # False: history could be written nowhere (the store warns)

    @property
    def results(self) -> tuple[NodeResult, ...]:
        """Every node's drift result, in inventory order."""
        return self.report.nodes

    @property
    def exit_code(self) -> ExitCode:
        """By the one rule of validator.service.outcome."""
        return exit_code((node.verdict for node in self.results), interrupted=self.interrupted)


def run_drift(
    request: DriftRequest,
    store: Store,
    *,
    fleet_display: FleetDisplay | None = None,
    slurm_runner: Runner | None = None,
) -> DriftOutcome:
    """Compare what the request names with its certificates; record, write, tell Slurm.

    Args:
        request: what to check and what to do about it.
        store: the history database, and the certificates to compare with.
        fleet_display: told about a fleet's hosts, phases and results.
        slurm_runner: runs scontrol's argument lists (default: scontrol on this machine).

    Raises:
        BadInputError: a bad policy, inventory, limit, scenario or per-host variable.
        StoreError: the history database failed.
        ReportError: the Prometheus file could not be written (history is closed first).
    """
    policy = load_policy(request.policy_path) if request.policy_path else Policy()
    if request.reach.is_fleet:
        with sparing_collector():  # many results arriving (validator.node.sparing_gc)
            results, run_id, interrupted = _drift_fleet(request, store, policy, fleet_display)
    else:
        results, run_id, interrupted = _drift_here(request, store, policy)
    signals.measured()  # a stop signal from here on lets history and the textfile finish
    now = datetime.datetime.now(datetime.timezone.utc)
    report = Report(
        generated_at=now.isoformat(timespec="seconds"), tool_version=__version__, nodes=results
    )
    interrupted = interrupted or report_interrupted(report)
    written = None
    recorded = True
    try:
        if request.prom_file is not None:
            written = _write_textfile(request.prom_file, results, now, run_id)
    finally:
        recorded = close_run(store, run_id, interrupted=interrupted)
    slurm = tell_slurm(results, slurm_reason, slurm_runner) if request.slurm_drain else ()
    return DriftOutcome(report, run_id, interrupted, written, slurm, recorded)


def _write_textfile(
    path: str, results: Sequence[NodeResult], now: datetime.datetime, run_id: int
) -> Path:
    """The Prometheus textfile; a failure says the results are kept all the same."""
    from validator.report.prometheus import write_prometheus

    try:
        return write_prometheus(path, results, now=now)
    except ReportError as exc:
        raise ReportError(
            f"{exc}; the drift results are recorded in history (run {run_id}): "
            "fix the path, and the next drift run writes the file"
        ) from None


def _checked(
    cert: Certificate, key: KeyLike | None, hostname: str | None
) -> Certificate | UntrustedBaseline:
    """``cert`` when it verifies (as ``hostname``'s own, when given), else why it does not."""
    try:
        if hostname is None:
            verify_seal(cert, key)
        else:
            verify_baseline(cert, key, hostname)
    except CertificateError as exc:
        return UntrustedBaseline(str(exc))
    return cert


# Where the drift-timer role puts the node's own certificate (a copy of certify
# --report-dir's certificates/<inventory name>.json): read when its history has none.
NODE_CERTIFICATE = "/var/lib/gpuready/certificate.json"

Baseline = Union["Certificate", UntrustedBaseline, NoCertificate, None]


def file_baseline(
    path: Path, key: KeyLike | None, hostname: str | None
) -> Certificate | UntrustedBaseline | None:
    """The certificate in ``path``, verified (as ``hostname``'s own when given); None if absent.

    Read bounded and never through a link (the folder may be shared and written by
    others); one that cannot be read, or fails its check, is an :class:`UntrustedBaseline`.
    """
    from validator import limits
    from validator.certificate import certificate_from_json

    try:
        text = limits.read_bounded(path, limits.CERTIFICATE_BYTES, nofollow=True)
        cert = certificate_from_json(text.decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, limits.OverLimitError, UnicodeDecodeError, CertificateError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            why = "it is a symbolic link, which drift does not follow"
        return UntrustedBaseline(f"certificate file {path} cannot be used: {one_line(why)}")
    return _checked(cert, key, hostname)


def _from_files(
    found: Baseline, request: DriftRequest, store: Store, hostname: str, *, here: bool
) -> Baseline:
    """``found`` when history had a certificate; else one from the files drift may read.

    ``certificates_dir``'s ``<hostname>.json`` first (its name must be the host's; this
    machine also tries its short name, as inventories name nodes), then,
    for this machine, :data:`NODE_CERTIFICATE` (its seal alone: the role copies the
    node's certificate under its inventory name, rarely the name the machine gives
    itself). Revocation is still checked against history; the files are what certify
    --report-dir keeps current (it removes a host's file when it fails), so history not
    holding the host's certifications is no warning here.
    """
    if found is not None and not isinstance(found, NoCertificate):
        return found
    from validator.report.partial import host_file_stem

    candidates: list[tuple[Path, str | None]] = []
    if request.certificates_dir is not None:
        names = [hostname]
        short = hostname.split(".", 1)[0]
        if here and short and short != hostname:  # inventories name nodes short; FQDN here
            names.append(short)
        for each in names:
            path = Path(request.certificates_dir) / f"{host_file_stem(each)}.json"
            candidates.append((path, each))
    if here and request.node_certificate:
        candidates.append((Path(NODE_CERTIFICATE), None))
    for path, name in candidates:
        baseline = file_baseline(path, request.sign_key, name)
        if isinstance(baseline, UntrustedBaseline):
            return baseline
        if baseline is not None:
            attempt_by = name or baseline.hostname
            return revocation(store, baseline, attempt_by, warn=False) or baseline
    return found


def _baseline(
    request: DriftRequest, store: Store, hostname: str, *, here: bool = False
) -> Baseline:
    """The host's baseline: history's certificate, else a file's (:func:`_from_files`)."""
    found = stored_baseline(store, hostname, request.sign_key)
    return _from_files(found, request, store, hostname, here=here)


def stored_baseline(
    store: Store, hostname: str, key: KeyLike | None
) -> Certificate | UntrustedBaseline | NoCertificate | None:
    """The host's newest stored certificate, verified; else why there is none.

    Never an older certificate in place of one that fails: the newest is the baseline.
    A host with no certificate whose certification failed gets a :class:`NoCertificate`
    naming that run; one never tried, None.

    Raises:
        StoreError: the database itself failed (a row that is not a certificate does not).
    """
    try:
        cert = store.latest_certificate(hostname)
    except CertificateError as exc:
        return UntrustedBaseline(f"the stored certificate of {hostname} cannot be read: {exc}")
    except StoreError as exc:
        # Today's store wraps the certificate's own parse error (its context).
        if not isinstance(exc.__context__, CertificateError):
            raise
        return UntrustedBaseline(str(exc))
    if cert is None:
        return _last_attempt(store, hostname)
    checked = _checked(cert, key, hostname)
    if isinstance(checked, UntrustedBaseline):
        return checked
    return revocation(store, checked, hostname) or checked


def _last_attempt(store: Store, hostname: str) -> NoCertificate | None:
    """The run that tried to certify a host with no certificate, and failed; None if none did."""
    attempt = store.latest_attempt(hostname)
    if attempt is None or attempt.certified:  # certified, but its certificate not stored
        return None
    return not_certified_by(
        run_id=attempt.run_id,
        when=attempt.recorded_at,
        verdict=attempt.verdict,
        failed=attempt.failed,
        summary=attempt.summary,
    )


def _at(text: str) -> datetime.datetime | None:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)


def revocation(
    store: Store, cert: Certificate, hostname: str, *, warn: bool = True
) -> UntrustedBaseline | None:
    """Why ``cert`` is revoked: the host's latest certification did not certify it; else None.

    Only an attempt at or after the certificate's issue revokes it (one recorded before
    it, in a history the certificate did not come from, does not). A time that cannot be
    read is taken as later: fail closed.

    Raises:
        StoreError: the database failed.
    """
    attempt = store.latest_attempt(hostname)
    if warn:
        _say_if_unchecked(store, None if attempt is not None else hostname)
    if attempt is None or attempt.certified:
        return None
    tried, issued = _at(attempt.recorded_at), _at(cert.issued_at)
    if tried is not None and issued is not None and tried < issued:
        return None
    return revoked(
        cert,
        when=attempt.recorded_at,
        run_id=attempt.run_id,
        verdict=attempt.verdict,
        failed=attempt.failed,
        summary=attempt.summary,
    )


def _say_if_unchecked(store: Store, never_certified: str | None) -> None:
    """One warning when the history read may not hold the host's latest certification.

    A certificate is revoked by a failed certification recorded in history. Where the
    history holds none of the host (``never_certified``: the certificate is a file that
    came from another history), is of an older schema, or is read without its newest
    runs, drift compares against the certificate but cannot say it still stands.
    """
    why = store.history_unseen
    if why is None and never_certified is not None:
        why = f"the history at {store.path} holds no certification of {never_certified}"
    if why is None:
        return
    notice = (
        f"warning: revocation not checked: {why}; a certification that failed since is "
        "not seen (give the --db the certifications are recorded in)"
    )
    if notice not in store.notices:
        store.notices.append(notice)


def interconnect_modes(asked: bool) -> Callable[[Policy], str]:
    """A policy's interconnect mode for drift: off unless ``--interconnect`` was given.

    Given, it measures where certify's default does (auto: two or more GPUs, unless
    every NVLink is known down), and everywhere for a policy with ``interconnect: true`` (on).
    """

    def mode(policy: Policy) -> str:
        if not asked:
            return "off"
        return "on" if policy.interconnect is True else "auto"

    return mode


def _drift_here(
    request: DriftRequest, store: Store, policy: Policy
) -> tuple[tuple[NodeResult, ...], int, bool]:
    """This machine's (or a scenario's) facts against its certificate; recorded."""
    from validator.node.agent import source_for
    from validator.node.collect import collect

    interconnect = interconnect_modes(request.measure_interconnect)(policy)
    asked = facts_request(policy, request.burn, interconnect)
    facts: NodeFacts = collect(source_for(request.simulate), asked)
    run_id = store.start_run(RunKind.DRIFT, 1, policy_digest(policy), request.argv)
    key = request.sign_key
    # A file given for this machine is the operator's pick: its seal is checked, not its
    # name (an inventory name is rarely the name the machine gives itself); its GPUs'
    # UUIDs and serials still tell another node's certificate apart.
    baseline: Certificate | UntrustedBaseline | NoCertificate | None
    if request.certificate is not None:
        baseline = _checked(request.certificate, key, None)
        if not isinstance(baseline, UntrustedBaseline):
            # A file copied back into place after a failed certification is still revoked.
            baseline = revocation(store, baseline, baseline.hostname) or baseline
    else:
        baseline = _baseline(request, store, facts.hostname, here=True)
    result = drift_node(facts, baseline, policy)
    store.record_result(run_id, result)
    return (result,), run_id, False


def _drift_fleet(
    request: DriftRequest, store: Store, base: Policy, display: FleetDisplay | None
) -> tuple[tuple[NodeResult, ...], int, bool]:
    """Quick facts from every inventory host, each compared and recorded as it arrives."""
    from validator.remote.fanout import run_fanout
    from validator.remote.ssh import quiet_paramiko
    from validator.service.collect_and_judge import make_transport, plan_fleet

    quiet_paramiko()
    fleet = plan_fleet(request.fleet(), base, interconnect_modes(request.measure_interconnect))
    hosts, policies, asked, deadline_s = fleet.hosts, fleet.policies, fleet.asked, fleet.deadline_s
    if display is not None:
        display.set_hosts(hosts)
    run_id = store.start_run(RunKind.DRIFT, len(hosts), policy_digest(base), request.argv)

    def judge(host: HostSpec, facts: NodeFacts) -> NodeResult:
        # Certificates are keyed by inventory name, as certify records them.
        return drift_node(facts, _baseline(request, store, host.name), policies[host.name])

    def arrived(batch: Sequence[NodeResult]) -> None:
        # An unreachable host's findings get their actions too.
        results = [result_with_actions(result) for result in batch]
        store.record_results(run_id, [(result, None) for result in results])  # one commit
        if display is not None:
            for result in results:
                display.result(result)

    try:
        if fleet.slurm_plan is not None and request.reach.slurm is not None:
            from validator.slurm.plan_and_reach import reach

            judging = {"burn_s": request.burn.duration_s if request.burn else None}
            outcome = reach(
                fleet.slurm_plan,
                request.reach.slurm,
                asked,
                judge,
                deadline_s=deadline_s,
                judging={**judging, "deadline_s": request.deadline_s, "drift": True},
                progress=display,
                on_results=arrived,
            )
        else:
            with make_transport(request.reach) as transport:  # closed, as certify's is
                outcome = run_fanout(
                    hosts,
                    transport,
                    asked,
                    judge,
                    parallel=request.reach.parallel,
                    deadline_s=deadline_s,
                    progress=display,
                    on_results=arrived,
                )
    except BaseException:
        store.finish_run(run_id, interrupted=True)
        raise
    results = tuple(result_with_actions(result) for result in outcome.results)
    return results, run_id, outcome.interrupted


__all__ = [
    "NODE_CERTIFICATE",
    "DriftOutcome",
    "DriftRequest",
    "file_baseline",
    "interconnect_modes",
    "revocation",
    "run_drift",
    "stored_baseline",
]
