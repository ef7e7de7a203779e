"""Test hosts by hand or for benchmarks: ``python -m tests.hosts up|down|status``.

``up N`` starts N hosts in a background server process that holds them until
``down`` (or ``up --foreground``, which holds them until Ctrl-C). It prints
where the inventory, known_hosts, ssh_config and client key are.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from tests.hosts.testhosts import (
    STATE_DIR,
    HostsError,
    HostsUnavailable,
    Scenario,
    TestHostPool,
    cached_rootfs,
    cleanup_stale,
    ensure_rootfs,
)

SERVE_FILE = "serve.json"
DEFAULT_SCENARIO = "healthy-8x-h100-sxm"


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


def _scenarios(count: int, names: list[str], unreachable: int) -> list[Scenario]:
    cycle = names or [DEFAULT_SCENARIO]
    chosen: list[Scenario] = [cycle[i % len(cycle)] for i in range(count)]
    return chosen + [None] * unreachable


def _serve(args: argparse.Namespace) -> int:
    # try/finally below tears down; these turn both signals into that path.
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGINT, _raise_exit)
    started = time.monotonic()
    with TestHostPool(workers=args.workers) as pool:
        ensure_rootfs()
        built = time.monotonic()
        hosts = pool.start(_scenarios(args.count, args.scenario, args.unreachable))
        up = time.monotonic()
        out = Path(args.out) if args.out else pool.run_dir
        out.mkdir(parents=True, exist_ok=True)
        known = pool.known_hosts(out / "known_hosts")
        summary = {
            "pid": os.getpid(),
            "slot": pool.slot,
            "network": str(pool.network),
            "run_dir": str(pool.run_dir),
            "key_file": str(pool.key_file),
            "inventory": str(pool.write_inventory(out / "inventory.ini")),
            "known_hosts": str(known),
            "ssh_config": str(pool.ssh_config(out / "ssh_config", known)),
            "rootfs_s": round(built - started, 2),
            "start_s": round(up - built, 2),
            "sshd_pss_kib": pool.sshd_memory_kib(),
            "hosts": [
                {
                    "name": h.name,
                    "address": h.address,
                    "reachable": h.reachable,
                    "scenario": h.scenario if isinstance(h.scenario, str) else None,
                }
                for h in hosts
            ],
        }
        text = json.dumps(summary, indent=2)
        (pool.run_dir / SERVE_FILE).write_text(text + "\n", encoding="utf-8")
        if args.ready_file:
            Path(args.ready_file).write_text(text + "\n", encoding="utf-8")
        else:
            print(text, flush=True)
        while True:
            signal.pause()


def _up(args: argparse.Namespace) -> int:
    if args.foreground:
        return _serve(args)
    # Build here, in the foreground, so its errors and time show.
    if cached_rootfs() is None:
        print("building the Debian root filesystem (once per machine)...", file=sys.stderr)
    ensure_rootfs()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    ready = STATE_DIR / f"ready-{os.getpid()}.json"
    log = STATE_DIR / f"serve-{os.getpid()}.log"
    argv = [
        sys.executable,
        "-m",
        "tests.hosts",
        "up",
        str(args.count),
        "--foreground",
        "--ready-file",
        str(ready),
        "--unreachable",
        str(args.unreachable),
        "--workers",
        str(args.workers),
    ]
    for name in args.scenario:
        argv += ["--scenario", name]
    if args.out:
        argv += ["--out", args.out]
    with open(log, "wb") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=Path(__file__).resolve().parents[2],
        )
    deadline = time.monotonic() + 600
    while not ready.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            print(log.read_text(encoding="utf-8", errors="replace"), file=sys.stderr)
            return 1
        time.sleep(0.1)
    time.sleep(0.05)  # the writer's last bytes
    print(ready.read_text(encoding="utf-8"), end="")
    ready.unlink()
    log.unlink(missing_ok=True)
    return 0


def _servers() -> list[dict[str, object]]:
    found = []
    for path in sorted(STATE_DIR.glob(f"slot-*/{SERVE_FILE}")):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found


def _alive(pid: int) -> bool:
    # A server orphaned by `up` stays a zombie until init reaps it: that is gone too.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _down(args: argparse.Namespace) -> int:
    del args
    for server in _servers():
        pid = int(str(server["pid"]))
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        print(f"slot {server['slot']}: stopped server {pid}")
    problems = {slot: left for slot, left in cleanup_stale().items() if left}
    for slot, left in problems.items():
        print(f"slot {slot}: could not remove {', '.join(left)}", file=sys.stderr)
    return 1 if problems else 0


def _status(args: argparse.Namespace) -> int:
    del args
    rootfs = cached_rootfs()
    print(f"rootfs: {rootfs or 'not built'}")
    servers = _servers()
    if not servers:
        print("no test hosts running")
    for server in servers:
        pid = int(str(server["pid"]))
        hosts = server["hosts"]
        assert isinstance(hosts, list)
        listening = 0
        for host in hosts:
            if not host["reachable"]:
                continue
            try:
                with socket.create_connection((host["address"], 22), timeout=0.5):
                    listening += 1
            except OSError:
                pass
        reachable = sum(1 for host in hosts if host["reachable"])
        print(
            f"slot {server['slot']} ({server['network']}): server {pid} "
            f"{'alive' if _alive(pid) else 'GONE'}, {listening}/{reachable} sshd listening, "
            f"{len(hosts) - reachable} unreachable; inventory {server['inventory']}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.hosts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N test hosts (held by a background process)")
    up.add_argument("count", type=int)
    up.add_argument(
        "--scenario",
        action="append",
        default=[],
        help=f"built-in scenario, repeat to cycle (default {DEFAULT_SCENARIO})",
    )
    up.add_argument("--unreachable", type=int, default=0, help="add this many unreachable hosts")
    up.add_argument("--out", help="where to write inventory/known_hosts (default the run dir)")
    up.add_argument("--workers", type=int, default=16, help="hosts set up at once")
    up.add_argument("--foreground", action="store_true", help="hold the hosts until Ctrl-C")
    up.add_argument("--ready-file", help=argparse.SUPPRESS)
    sub.add_parser("down", help="tear down every test host (and any crashed run's leftovers)")
    sub.add_parser("status", help="list running test hosts")
    args = parser.parse_args(argv)
    handlers = {"up": _up, "down": _down, "status": _status}
    try:
        return handlers[args.command](args)
    except (HostsUnavailable, HostsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
