"""The node agent's entry point: collect this host's facts (and burn it in), print JSON.

Runs on the GPU host with the standard library and pynvml only, shipped as one
zipapp (see validator.remote.bundle). Its whole interface:

    python3 gpuready-agent.pyz [--simulate NAME|FILE] [--burn SECONDS]
        [--burn-backend cublas|torch|numpy] [--burn-dtype DTYPE] [--burn-matrix-size N]
        [--burn-memory-fraction F] [--xid-window-hours H] [--deadline SECONDS]
        [--interconnect auto|on|off] [--dcgm-level 1-4] [--dcgm-timeout SECONDS]
        [--gpus LIST] [--allow-busy] [--progress-lines] [--packed]

Exit 0 with NodeFacts JSON on stdout whenever facts were collected, whatever
they say (judging happens on the controller); 2 with one line on stderr for
bad arguments or a bad scenario; 3 when the agent itself could not run, or
gave no facts within its deadline. With ``--progress-lines`` the burn's worst GPU so far is
printed on stderr every few seconds (validator.node.burnin.worst_gpu), for a fleet's live
view. With ``--packed`` the JSON is printed packed, as
the controller's store keeps it (validator.codec), in base64 on one line: a tenth of
the bytes to carry home, and a compression the controller need not do for each host.

With ``--deadline`` the agent ends in time: the one collector (validator.node.collect)
cuts its burn-in to fit what is left once the other facts are in (the controller sees
the shorter burn and judges the host as cut at its deadline), keeping room for the
interconnect measurement where one is wanted (``--interconnect``, measured after the
burn-in), and DCGM's diagnostic (``--dcgm-level``, run last) gets what is left after
that, its timeout cut to fit; should the collector still not return (a wedged GPU, a
hung command), the agent says so and exits, leaving nothing of itself running on the host.

SIGTERM, SIGHUP and SIGINT (scancel, a Slurm time limit, a dropped SSH session, Ctrl-C)
stop the burn-in after its batch (validator.node.stop_request): the interconnect and
DCGM are not started, and the facts are printed as usual, the burn marked
interrupted, exit 0. A second signal ends the agent at once.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import queue
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from validator.codec import pack
from validator.error_tree import BadInputError, CouldNotRunError, ExitCode, GpureadyError
from validator.model import DEFAULT_XID_WINDOW_HOURS, NodeFacts, to_dict
from validator.node import stop_request
from validator.node.bandwidth import check_mode
from validator.node.burnin.burn_config import BurnConfig
from validator.node.collect import (
    INTERCONNECT_OFF,
    CollectRequest,
    FactSource,
    collect,
    collect_in_background,
)
from validator.node.gpu_choice import parse_gpus
from validator.safe_text import one_line

if TYPE_CHECKING:
    from validator.node.burnin.burn_progress import ProgressSink
    from validator.node.burnin.worst_gpu import WorstGpu
    from validator.node.system import System

DCGM_LEVELS = (1, 2, 3, 4)
# How long past its deadline the agent waits for a collector that has not returned.
OVERRUN_SHARE = 0.1
OVERRUN_MIN_S = 1.0
OVERRUN_MAX_S = 30.0


def source_for(
    simulate: str | None = None,
    capture: str | os.PathLike[str] | None = None,
    system: System | None = None,
) -> FactSource:
    """Where the facts come from: a scenario, a capture bundle, else this host.

    The one place a source is chosen: the agent's command line and a single node's
    certify and drift (which collect in-process) come here.
    """
    if simulate is not None:
        from validator.node.sim.simulated_source import SimulatedSource

        return SimulatedSource(simulate)
    if capture is not None:
        from validator.node.capture.capture_source import CaptureSource

        return CaptureSource(capture)
    from validator.node.live.live_source import LiveSource

    return LiveSource(system)


def check_something_to_certify(
    simulate: str | None = None, capture: str | os.PathLike[str] | None = None
) -> None:
    """Refuse this host when it has nothing to certify, in one line naming the cause and the fix.

    Only this host (no scenario, no capture): no NVIDIA GPU on its PCI bus, or GPUs there
    and no NVIDIA driver loaded (validator.node.live.pci_bus). Asked before anything is
    measured, recorded or written.

    Raises:
        CouldNotRunError: why, and what to do (exit 3).
    """
    if simulate is not None or capture is not None:
        return
    from validator.node.live.pci_bus import first_run_problem

    problem = first_run_problem()
    if problem is not None:
        raise CouldNotRunError(problem)


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
        "--gpus",
        metavar="LIST",
        help="certify only these GPUs: indexes, PCI bus ids or UUIDs, comma-separated",
    )
    parser.add_argument(
        "--allow-busy",
        action="store_true",
        help="burn and measure GPUs with other processes or another Slurm job on them",
    )
    parser.add_argument(
        "--progress-lines",
        action="store_true",
        help="during the burn, print the worst GPU so far on stderr every few seconds "
        "(one 'gpuready-progress {...}' line: what a fleet's live view shows)",
    )
    parser.add_argument(
        "--container-image",
        metavar="IMAGE",
        help="list the GPUs a container of IMAGE sees (nvidia-smi -L through docker or podman)",
    )
    parser.add_argument(
        "--packed",
        action="store_true",
        help="print the JSON compressed (xz, else zlib), in base64 on one line",
    )
    return parser


def _overrun(deadline_s: float) -> float:
    return min(OVERRUN_MAX_S, max(OVERRUN_MIN_S, OVERRUN_SHARE * deadline_s))


def _print(facts: NodeFacts, packed: bool) -> None:
    # As the controller keeps facts (validator.packed.encode), so it keeps this text as is.
    text = json.dumps(to_dict(facts), sort_keys=True, separators=(",", ":"))
    if packed:
        text = base64.b64encode(pack(text)).decode("ascii")
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _progress_lines(args: argparse.Namespace) -> ProgressSink | None:
    """With ``--progress-lines``: a sink printing the burn's worst GPU on stderr now and then."""
    if not args.progress_lines:
        return None
    from validator.node.burnin.worst_gpu import every, progress_line

    def send(worst: WorstGpu) -> None:
        sys.stderr.write(progress_line(worst) + "\n")
        sys.stderr.flush()

    return every(send)


def _run_within(args: argparse.Namespace, source: FactSource, request: CollectRequest) -> int:
    """Collect under ``--deadline``; give up, and exit at once, when it passes."""
    deadline_s = float(args.deadline)
    until = time.monotonic() + deadline_s
    arrived = collect_in_background(source, request, until, _progress_lines(args))
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
        request = CollectRequest(
            window_hours=args.xid_window_hours,
            burn=burn,
            dcgm_level=args.dcgm_level,
            dcgm_timeout_s=args.dcgm_timeout,
            interconnect=args.interconnect,
            gpus=() if args.gpus is None else parse_gpus(args.gpus),
            allow_busy=args.allow_busy,
            container_image=args.container_image,
        )
        source = source_for(args.simulate or None)  # an empty --simulate: this host, as ever
        if args.deadline is not None:
            if args.deadline <= 0:
                raise BadInputError(f"--deadline must be above 0 s, got {args.deadline:g}")
            return _run_within(args, source, request)
        facts = collect(source, request, progress=_progress_lines(args))
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
