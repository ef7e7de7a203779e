"""The node agent's entry point: collect this host's facts (and burn it in), print JSON.

Runs on the GPU host with the standard library and pynvml only, shipped as one
zipapp (see validator.remote.bundle). Its whole interface:

    python3 gpuready-agent.pyz [--simulate NAME|FILE] [--burn SECONDS]
        [--burn-backend cublas|torch|numpy] [--burn-dtype DTYPE] [--burn-matrix-size N]
        [--burn-memory-fraction F] [--xid-window-hours H] [--deadline SECONDS]
        [--interconnect auto|on|off] [--dcgm-level 1-4] [--dcgm-timeout SECONDS]
        [--packed]

Exit 0 with NodeFacts JSON on stdout whenever facts were collected, whatever
they say (judging happens on the controller); 2 with one line on stderr for
bad arguments or a bad scenario; 3 when the agent itself could not run, or
gave no facts within its deadline. With ``--packed`` the JSON is printed packed, as
the controller's store keeps it (validator.codec), in base64 on one line: a tenth of
the bytes to carry home, and a compression the controller need not do for each host.

With ``--deadline`` the agent ends in time: its burn-in is cut to fit what is
left once the other facts are in (:func:`burn_within`; the controller sees the
shorter burn and judges the host as cut at its deadline), keeping room for the
interconnect measurement where one is wanted (``--interconnect``, measured after
the burn-in: :func:`interconnect_within`), DCGM's diagnostic (``--dcgm-level``, run
last) gets what is left after that, its timeout cut to fit (:func:`dcgm_within`),
and should the collector still not return (a wedged GPU, a hung command), the agent
says so and exits, leaving nothing of itself running on the host.

SIGTERM, SIGHUP and SIGINT (scancel, a Slurm time limit, a dropped SSH session, Ctrl-C)
stop the burn-in after its batch (validator.node.stop_request): the interconnect and
DCGM are not started, and the facts are printed as usual, the burn marked
interrupted, exit 0. A second signal ends the agent at once.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from validator.codec import pack
from validator.error_tree import BadInputError, ExitCode, GpureadyError
from validator.model import (
    DEFAULT_XID_WINDOW_HOURS,
    BurnResult,
    DcgmDiag,
    Interconnect,
    NodeFacts,
    Reason,
    to_dict,
)
from validator.node import stop_request
from validator.node.bandwidth import check_mode, wanted
from validator.node.bandwidth.bandwidth_config import ALLOWANCE_S
from validator.node.burnin.burn_config import BurnConfig
from validator.node.sim.scenario import Scenario, load_scenario
from validator.node.sources import (
    INTERCONNECT_OFF,
    burn_live,
    burn_simulated,
    collect_live,
    collect_simulated,
    interconnect_config,
    with_dcgm,
    with_interconnect,
)
from validator.node.system import LiveSystem, System
from validator.safe_text import one_line

if TYPE_CHECKING:
    from validator.node.burnin.burn_progress import ProgressSink

# Of the time left when the burn-in would start, this share is kept back for what
# follows the products: the reads after the burn, the JSON, the trip home.
DEADLINE_KEEP_SHARE = 0.3
DEADLINE_KEEP_MIN_S = 0.75
DEADLINE_KEEP_MAX_S = 60.0
# A cut burn shorter than this measures nothing worth its setup: it is not run.
SHORTEST_CUT_BURN_S = 0.5
# A cut burn's workers may take this long past its end before they count as wedged
# (at most the burn's own grace): a real GPU's last batch can take a second.
CUT_GRACE_MIN_S = 2.0
# A DCGM diagnostic cut to less than this cannot finish even level 1: it is not run.
SHORTEST_DCGM_S = 5.0
# Less than this leaves no room for the idle gate and one GPU's copies: not started.
SHORTEST_INTERCONNECT_S = 5.0
# Of the time left when the burn-in would start, this share is kept for the
# interconnect measurement that follows it, when wanted: at least enough to start it
# once the trip home is kept back too, at most its ALLOWANCE_S, and never more than
# INTERCONNECT_RESERVE_MAX_SHARE (on a deadline too short for both, the burn comes first).
INTERCONNECT_RESERVE_SHARE = 0.25
INTERCONNECT_RESERVE_MIN_S = 8.0
INTERCONNECT_RESERVE_MAX_SHARE = 0.5
NO_TIME_FOR_INTERCONNECT = (
    "no time left for the interconnect measurement within the deadline: give a longer --deadline"
)
DCGM_LEVELS = (1, 2, 3, 4)
# How long past its deadline the agent waits for a collector that has not returned.
OVERRUN_SHARE = 0.1
OVERRUN_MIN_S = 1.0
OVERRUN_MAX_S = 30.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuready-agent", description="Collect this GPU host's facts as JSON."
    )
    parser.add_argument("--simulate", metavar="NAME|FILE", help="a scenario instead of this host")
    BurnConfig.add_arguments(parser)
    parser.add_argument("--xid-window-hours", type=float, default=DEFAULT_XID_WINDOW_HOURS)
    parser.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="end within this long, burn cut to fit"
    )
    parser.add_argument(
        "--interconnect",
        default=INTERCONNECT_OFF,
        metavar="auto|on|off",
        help="measure copy, peer and all-reduce bandwidth after the burn-in: auto on two "
        "or more GPUs unless every NVLink is known down, on always, off never (default)",
    )
    parser.add_argument(
        "--dcgm-level",
        type=int,
        default=0,
        choices=(0, *DCGM_LEVELS),
        metavar="N",
        help="run `dcgmi diag -r N -j` after the burn-in (1-4; 0: none)",
    )
    parser.add_argument(
        "--dcgm-timeout",
        type=float,
        metavar="SECONDS",
        help="how long dcgmi may run (default: the level's allowance)",
    )
    parser.add_argument(
        "--packed",
        action="store_true",
        help="print the JSON compressed (xz, else zlib), in base64 on one line",
    )
    return parser


def _kept_back(seconds_left: float) -> float:
    return min(DEADLINE_KEEP_MAX_S, max(DEADLINE_KEEP_MIN_S, DEADLINE_KEEP_SHARE * seconds_left))


def burn_within(burn: BurnConfig, seconds_left: float, reserve_s: float = 0.0) -> BurnConfig | None:
    """The burn-in that ends in the time left: as asked when it fits, else cut shorter.

    Args:
        burn: the burn-in asked for.
        seconds_left: from now to the deadline.
        reserve_s: kept for what is measured after the burn (the interconnect:
            :func:`interconnect_reserve`); the burn ends before it.

    Returns:
        ``burn`` itself when it fits with room to spare; a shorter one (and a grace
        that ends near the deadline) when not; None when too little is left for any.
    """
    seconds_left -= reserve_s
    kept = _kept_back(seconds_left)
    if burn.duration_s + kept <= seconds_left:
        return burn
    duration = seconds_left - kept
    if duration < SHORTEST_CUT_BURN_S:
        return None
    grace = min(burn.grace_s, max(kept, CUT_GRACE_MIN_S))
    return dataclasses.replace(burn, duration_s=round(duration, 3), grace_s=grace)


def _no_time(burn: BurnConfig, seconds_left: float) -> BurnResult:
    """The burn that could not start: the deadline left no time for it."""
    return BurnResult(
        backend=burn.backend or "auto",
        dtype=burn.dtype,
        matrix_size=burn.matrix_size or 0,
        duration_s=0.0,
        elapsed_s=0.0,
        memory_fraction=burn.memory_fraction,
        started_at="",
        sampler="none",
        error=(
            f"the deadline left {max(0.0, seconds_left):.1f} s once the other facts were "
            f"in: no time for the {burn.duration_s:g} s burn-in"
        ),
    )


def dcgm_within(level: int, timeout_s: float | None, seconds_left: float) -> float | None:
    """The timeout DCGM's diagnostic gets in the time left: as asked, or cut to fit.

    Args:
        level: the DCGM level asked for.
        timeout_s: its timeout asked for; None: the level's allowance.
        seconds_left: from now to the deadline.

    Returns:
        The timeout, ending before the deadline with the trip home kept back; None
        when too little is left to run it at all.
    """
    from validator.node.dcgm_run import default_timeout

    asked = default_timeout(level) if timeout_s is None else timeout_s
    room = seconds_left - _kept_back(seconds_left)
    if room < SHORTEST_DCGM_S:
        return None
    return round(min(asked, room), 3)


def interconnect_reserve(seconds_left: float) -> float:
    """What the burn-in keeps back for the interconnect measurement after it.

    A share of the time left, enough to start the measurement and at most its
    allowance, so a long deadline burns in full; never more than half of what is
    left, so a short one still burns.
    """
    share = max(INTERCONNECT_RESERVE_MIN_S, INTERCONNECT_RESERVE_SHARE * seconds_left)
    ceiling = min(ALLOWANCE_S, INTERCONNECT_RESERVE_MAX_SHARE * seconds_left)
    return max(0.0, min(share, ceiling))


def interconnect_within(seconds_left: float) -> float | None:
    """How long the interconnect measurement may take in the time left.

    Args:
        seconds_left: from now (after the burn-in) to the deadline.

    Returns:
        Its allowance (validator.node.bandwidth.bandwidth_config.ALLOWANCE_S), or less to end
        before the deadline with the trip home kept back; None when too little is
        left to start it. DCGM, measured after it, gets what it leaves.
    """
    room = seconds_left - _kept_back(seconds_left)
    if room < SHORTEST_INTERCONNECT_S:
        return None
    return round(min(ALLOWANCE_S, room), 3)


def interconnect_no_time(scenario: Scenario | None) -> Interconnect:
    """The measurement that could not start: the deadline left no time for it."""
    simulated = scenario is not None
    return Interconnect(
        source="simulate" if simulated else "cuda",
        simulated=simulated,
        error=NO_TIME_FOR_INTERCONNECT,
    )


def _fitted_interconnect(
    facts: NodeFacts,
    system: System,
    scenario: Scenario | None,
    mode: str,
    until: float,
) -> NodeFacts:
    """The interconnect, measured after the burn-in within what is left before ``until``."""
    if not wanted(facts, mode):
        return facts
    allowed = interconnect_within(until - time.monotonic())
    if allowed is None:
        return dataclasses.replace(facts, interconnect=interconnect_no_time(scenario))
    ends = time.monotonic() + allowed
    return with_interconnect(facts, system, scenario, mode, interconnect_config(), ends)


def _dcgm_no_time(level: int, seconds_left: float) -> DcgmDiag:
    from validator.node.dcgm_run import not_run

    return not_run(
        level,
        Reason.NOT_MEASURED,
        f"the deadline left no time for it: {max(0.0, seconds_left):.1f} s were left after "
        "the burn-in; give a longer --deadline (or a shorter --burn)",
    )


def _fitted_dcgm(
    facts: NodeFacts, system: System, level: int, timeout_s: float | None, until: float
) -> NodeFacts:
    """DCGM's diagnostic, run after the burn-in in what is left before ``until``."""
    if level <= 0:
        return facts
    seconds_left = until - time.monotonic()
    fitted = dcgm_within(level, timeout_s, seconds_left)
    if fitted is None:
        return dataclasses.replace(facts, dcgm=_dcgm_no_time(level, seconds_left))
    return with_dcgm(facts, system, level, fitted)


def collect_facts(
    *,
    simulate: str | None = None,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    burn: BurnConfig | None = None,
    until: float | None = None,
    progress: ProgressSink | None = None,
    dcgm_level: int = 0,
    dcgm_timeout_s: float | None = None,
    interconnect: str = INTERCONNECT_OFF,
) -> NodeFacts:
    """This host's facts (or a scenario's): the burn-in, the interconnect, then DCGM.

    Each is cut to end by ``until``.

    Args:
        simulate: a scenario name or file instead of this host.
        window_hours: how far back the kernel log's Xids count.
        burn: the burn-in asked for; None for none.
        until: the deadline, on ``time.monotonic()``'s clock; None for none.
        progress: told about the burn about once a second.
        dcgm_level: DCGM's diagnostic level, run last; 0 for none.
        dcgm_timeout_s: how long dcgmi may run; None: the level's allowance.
        interconnect: auto, on or off: whether the interconnect is measured after the
            burn-in (validator.node.bandwidth.wanted).

    Raises:
        GpureadyError: a bad scenario, burn setting or interconnect mode (as the
            collectors raise).
    """
    check_mode(interconnect)
    nothing_to_fit = burn is None and dcgm_level <= 0 and interconnect == INTERCONNECT_OFF
    if until is None or nothing_to_fit:
        if simulate:
            return collect_simulated(
                simulate, window_hours, burn, progress, dcgm_level, dcgm_timeout_s, interconnect
            )
        return collect_live(
            window_hours,
            burn=burn,
            progress=progress,
            dcgm_level=dcgm_level,
            dcgm_timeout_s=dcgm_timeout_s,
            interconnect=interconnect,
        )
    # The other facts first: what is left then is what the burn may take (less the
    # room kept for the interconnect), the interconnect what the burn leaves, and DCGM
    # what the interconnect leaves.
    scenario = load_scenario(str(simulate)) if simulate else None
    system: System = scenario.system() if scenario is not None else LiveSystem()
    if scenario is not None:
        facts = collect_simulated(str(simulate), window_hours, interconnect=INTERCONNECT_OFF)
    else:
        facts = collect_live(window_hours, system=system, interconnect=INTERCONNECT_OFF)
    if burn is not None:
        reserve = wanted(facts, interconnect)
        facts = dataclasses.replace(
            facts, burn=_fitted_burn(facts, burn, scenario, system, until, progress, reserve)
        )
    facts = _fitted_interconnect(facts, system, scenario, interconnect, until)
    return _fitted_dcgm(facts, system, dcgm_level, dcgm_timeout_s, until)


def _fitted_burn(
    facts: NodeFacts,
    burn: BurnConfig,
    scenario: Scenario | None,
    system: System,
    until: float,
    progress: ProgressSink | None,
    reserve: bool = False,
) -> BurnResult:
    """The burn-in, cut to what is left before ``until`` (or why it could not start).

    ``reserve``: the interconnect is measured after it, so room is kept for that.
    """
    seconds_left = until - time.monotonic()
    kept = interconnect_reserve(seconds_left) if reserve else 0.0
    fitted = burn_within(burn, seconds_left, kept)
    if fitted is None:
        return _no_time(burn, seconds_left)
    if scenario is not None:
        return burn_simulated(facts, scenario, fitted, progress)
    return burn_live(facts, system, fitted, progress)


Collected = Union[NodeFacts, BaseException]


def collect_in_background(
    *,
    simulate: str | None,
    window_hours: float | None,
    burn: BurnConfig | None,
    until: float,
    dcgm_level: int = 0,
    dcgm_timeout_s: float | None = None,
    interconnect: str = INTERCONNECT_OFF,
) -> queue.Queue[Collected]:
    """Start :func:`collect_facts` on a daemon thread; its facts (or error) arrive on the queue.

    A daemon, so that a collector stuck past the deadline (a wedged GPU's driver call)
    never keeps its process alive; the caller stops waiting at the deadline.
    """
    arrived: queue.Queue[Collected] = queue.Queue(maxsize=1)

    def collect() -> None:
        try:
            arrived.put(
                collect_facts(
                    simulate=simulate,
                    window_hours=window_hours,
                    burn=burn,
                    until=until,
                    dcgm_level=dcgm_level,
                    dcgm_timeout_s=dcgm_timeout_s,
                    interconnect=interconnect,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as it is
            arrived.put(exc)

    threading.Thread(target=collect, name="gpuready-collect", daemon=True).start()
    return arrived


def _overrun(deadline_s: float) -> float:
    return min(OVERRUN_MAX_S, max(OVERRUN_MIN_S, OVERRUN_SHARE * deadline_s))


def _print(facts: NodeFacts, packed: bool) -> None:
    # As the controller keeps facts (validator.packed.encode), so it keeps this text as is.
    text = json.dumps(to_dict(facts), sort_keys=True, separators=(",", ":"))
    if packed:
        text = base64.b64encode(pack(text)).decode("ascii")
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _run_within(args: argparse.Namespace, burn: BurnConfig | None) -> int:
    """Collect under ``--deadline``; give up, and exit at once, when it passes."""
    deadline_s = float(args.deadline)
    until = time.monotonic() + deadline_s
    arrived = collect_in_background(
        simulate=args.simulate,
        window_hours=args.xid_window_hours,
        burn=burn,
        until=until,
        dcgm_level=args.dcgm_level,
        dcgm_timeout_s=args.dcgm_timeout,
        interconnect=args.interconnect,
    )
    try:
        got = arrived.get(timeout=max(0.0, until + _overrun(deadline_s) - time.monotonic()))
    except queue.Empty:
        sys.stderr.write(
            f"gpuready-agent: error: no facts within the {deadline_s:g} s deadline: the "
            "collector did not return (a wedged GPU or a hung command); check the host\n"
        )
        sys.stderr.flush()
        # The collector is stuck in a call that never returns: leave without the
        # interpreter's shutdown, which could wait on it.
        os._exit(int(ExitCode.COULD_NOT_RUN))
    if isinstance(got, BaseException):
        raise got
    _print(got, args.packed)
    return int(ExitCode.OK)


def run(argv: Sequence[str]) -> int:
    """Collect and print; the exit code as the module docstring says."""
    args = _parser().parse_args(list(argv))
    with stop_request.on_stop_signals():
        return _collect_and_print(args)


def _collect_and_print(args: argparse.Namespace) -> int:
    try:
        burn = BurnConfig.from_arguments(args)
        check_mode(args.interconnect)
        timeout = args.dcgm_timeout
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise BadInputError(
                f"--dcgm-timeout must be a number of seconds above 0, got {timeout:g}"
            )
        if args.deadline is not None:
            if args.deadline <= 0:
                raise BadInputError(f"--deadline must be above 0 s, got {args.deadline:g}")
            return _run_within(args, burn)
        facts = collect_facts(
            simulate=args.simulate,
            window_hours=args.xid_window_hours,
            burn=burn,
            dcgm_level=args.dcgm_level,
            dcgm_timeout_s=args.dcgm_timeout,
            interconnect=args.interconnect,
        )
    except GpureadyError as exc:
        # one line, controls escaped: the message may quote a scenario file's own words
        sys.stderr.write(f"gpuready-agent: error: {one_line(exc)}\n")
        return int(exc.exit_code)
    _print(facts, args.packed)
    return int(ExitCode.OK)


def main() -> None:
    """Console entry (the zipapp's __main__ has already refused a too-old Python)."""
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
