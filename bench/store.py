"""History store at 10,000 runs: query and write costs against an empty store, and bytes per node.

Fills a store in a temporary directory (never the user's history) through the
store's own API with a realistic result (the healthy 8x H100 scenario judged
after a simulated burn and interconnect: tests/fixtures/store/), then times on
it and on an empty store:

- ``history HOST`` (50 rows) and ``history`` (50 rows), median of many calls
  (the "empty" store holds just those 50 runs, so both answer as many rows);
- ``latest_certificate``;
- a 200-host fleet's final write (``record_results`` of every host with its
  certificate, after each host was recorded as it arrived, then ``finish_run``).

Bytes per node per run are measured over the fill (one run in ten certifies,
with certificates) and over the fleet run (every host certified).

Targets: the 10,000-run figures within 2x of the empty store's, and at most
20 KB per node per run. Prints one JSON object; exits 1 when a target is missed.

    python bench/store.py [--runs 10000] [--hosts-per-run 1] [--fleet 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import lzma
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from validator.certificate import issue_certificate  # noqa: E402
from validator.model import NodeResult, from_dict  # noqa: E402
from validator.store import Store  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "store"
RESULTS = {
    "burn5s": FIXTURES / "healthy-8x-h100-sxm-burn5s.json.gz",
    "burn300s": FIXTURES / "healthy-8x-h100-sxm-burn300s.json.xz",
}
RATIO_TARGET = 2.0
BYTES_TARGET = 20 * 1024
POOL = 200  # distinct hosts the filled runs are drawn from
QUERIED = "node-0000"
ROWS = 50  # what each history query asks for


def load(name: str) -> NodeResult:
    path = RESULTS[name]
    opener = gzip.open if path.suffix == ".gz" else lzma.open
    with opener(path, "rt", encoding="utf-8") as handle:
        return from_dict(NodeResult, json.load(handle))


def median_s(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def file_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def fill(store: Store, base: NodeResult, runs: int, per_run: int, pool: int = POOL) -> int:
    """``runs`` runs of ``per_run`` hosts each; the number of results recorded.

    As a fleet's history reads: every tenth run a certify run that certifies its
    hosts, the others drift runs (which measure, and issue no certificate).
    """
    recorded = 0
    host = 0
    for number in range(runs):
        certify = number % 10 == 0
        kind = "certify" if certify else "drift"
        run = store.start_run(kind, per_run, base.policy_digest, ["bench"])
        batch = []
        for _ in range(per_run):
            node = dataclasses.replace(base, hostname=f"node-{host % pool:04d}")
            batch.append((node, issue_certificate(node) if certify else None))
            host += 1
        store.record_results(run, batch)
        store.finish_run(run)
        recorded += per_run
    return recorded


def fleet_write(store: Store, base: NodeResult, hosts: int) -> dict[str, float]:
    """A fleet run as certify records it; the seconds of its final write."""
    nodes = [dataclasses.replace(base, hostname=f"fleet-{i:04d}") for i in range(hosts)]
    certificates = [issue_certificate(node) for node in nodes]
    run = store.start_run("certify", hosts, base.policy_digest, ["bench", "fleet"])
    start = time.perf_counter()
    for node in nodes:
        store.record_result(run, node)  # as each host arrives
    arrivals = time.perf_counter() - start
    start = time.perf_counter()
    store.record_results(run, list(zip(nodes, certificates)))
    store.finish_run(run)
    final = time.perf_counter() - start
    return {"arrivals_s": arrivals, "final_write_s": final}


def measure(store: Store, base: NodeResult, fleet: int, repeat: int) -> dict[str, float]:
    figures = {
        "history_host_s": median_s(lambda: store.history(QUERIED, limit=ROWS), repeat),
        "history_all_s": median_s(lambda: store.history(limit=ROWS), repeat),
        "latest_certificate_s": median_s(lambda: store.latest_certificate(QUERIED), repeat),
    }
    before = file_bytes(store.path)
    figures.update(fleet_write(store, base, fleet))
    figures["fleet_bytes_per_node"] = (file_bytes(store.path) - before) / fleet
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--hosts-per-run", type=int, default=1)
    parser.add_argument("--fleet", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--result", choices=sorted(RESULTS), default="burn5s")
    args = parser.parse_args()
    base = load(args.result)
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-store-") as scratch:
        empty_path = Path(scratch) / "empty.db"
        with Store.open(empty_path) as store:
            # The smallest history that answers the same queries with as many rows.
            fill(store, base, ROWS, 1, pool=1)
            empty = measure(store, base, args.fleet, args.repeat)
        full_path = Path(scratch) / "full.db"
        with Store.open(full_path) as store:
            before = file_bytes(full_path)
            start = time.perf_counter()
            # The fill is setup, not what is measured: without an fsync per commit it
            # takes CPU time only (the database is the same); measured as the store sets it.
            assert store._db is not None
            (synchronous,) = store._db.execute("PRAGMA synchronous").fetchone()
            store._db.execute("PRAGMA synchronous=OFF")
            results = fill(store, base, args.runs, args.hosts_per_run)
            store._db.execute(f"PRAGMA synchronous={int(synchronous):d}")
            fill_s = time.perf_counter() - start
            per_node = (file_bytes(full_path) - before) / results
            full = measure(store, base, args.fleet, args.repeat)
            rows = len(store.history(QUERIED, limit=ROWS))
            if args.runs >= ROWS * POOL and rows != ROWS:
                sys.exit(f"the queried host has {rows} runs, not {ROWS}")
        size = file_bytes(full_path)
    ratios = {key: full[key] / empty[key] for key in empty if key.endswith("_s")}
    checked = ("history_host_s", "history_all_s", "latest_certificate_s", "final_write_s")
    summary = {
        "result": args.result,
        "result_json_bytes": len(json.dumps(dataclasses.asdict(base), default=str)),
        "runs": args.runs,
        "results": results,
        "fill_s": round(fill_s, 1),
        "file_bytes": size,
        "bytes_per_node_run": round(per_node),
        "history_host_rows": rows,
        "empty": {k: round(v, 5) for k, v in empty.items()},
        "full": {k: round(v, 5) for k, v in full.items()},
        "ratio_full_to_empty": {k: round(v, 2) for k, v in ratios.items()},
        "targets": {"ratio": RATIO_TARGET, "bytes_per_node_run": BYTES_TARGET},
    }
    met = max(per_node, full["fleet_bytes_per_node"]) <= BYTES_TARGET and all(
        ratios[k] <= RATIO_TARGET for k in checked
    )
    summary["targets_met"] = met
    print(json.dumps(summary, indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
