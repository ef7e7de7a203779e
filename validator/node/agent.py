"""The node agent's entry point: collect this host's facts (and burn it in), print JSON.

Runs on the GPU host with the standard library and pynvml only, shipped as one
zipapp (see validator.remote.bundle). Its whole interface:

    python3 gpuready-agent.pyz [--simulate NAME|FILE] [--burn SECONDS]
        [--burn-backend cublas|torch|numpy] [--burn-dtype DTYPE] [--burn-matrix-size N]
        [--burn-memory-fraction F] [--xid-window-hours H]

Exit 0 with NodeFacts JSON on stdout whenever facts were collected, whatever
they say (judging happens on the controller); 2 with one line on stderr for
bad arguments or a bad scenario; 3 when the agent itself could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from validator.errors import ExitCode, GpureadyError
from validator.model import DEFAULT_XID_WINDOW_HOURS, to_dict
from validator.node.burnin.config import BurnConfig
from validator.node.sources import collect_live, collect_simulated


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuready-agent", description="Collect this GPU host's facts as JSON."
    )
    parser.add_argument("--simulate", metavar="NAME|FILE", help="a scenario instead of this host")
    BurnConfig.add_arguments(parser)
    parser.add_argument("--xid-window-hours", type=float, default=DEFAULT_XID_WINDOW_HOURS)
    return parser


def run(argv: Sequence[str]) -> int:
    """Collect and print; the exit code as the module docstring says."""
    args = _parser().parse_args(list(argv))
    try:
        burn = BurnConfig.from_arguments(args)
        if args.simulate:
            facts = collect_simulated(args.simulate, args.xid_window_hours, burn)
        else:
            facts = collect_live(args.xid_window_hours, burn=burn)
    except GpureadyError as exc:
        sys.stderr.write(f"gpuready-agent: error: {exc}\n")
        return int(exc.exit_code)
    sys.stdout.write(json.dumps(to_dict(facts), separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return int(ExitCode.OK)


def main() -> None:
    """Console entry (the zipapp's __main__ has already refused a too-old Python)."""
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
