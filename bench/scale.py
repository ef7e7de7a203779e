"""Ten thousand nodes from one controller: the scale simulation (issue 16).

Drives the real ``certify`` path (validator.service.certify_service.run_certify: the
inventory, the fan-out or the Slurm collector, judging, the fleet comparison, the
history store in a temporary database, the reports in a temporary ``--report-dir``)
against simulated nodes whose latencies and failures are drawn from measured figures,
then reports what the controller spent: CPU and peak memory per node, time to the last
result, store size, report size and render time.

Two paths:

- ``ssh``: the inventory's hosts through the SSH fan-out (validator.remote.fanout),
  with an in-process fake transport in place of paramiko (``transport_named`` is
  swapped, nothing else). Each host connects, checks its cached agent and runs it
  after drawn delays; its facts come back packed, as the agent prints them for SSH
  (``--packed``), and are unpacked, parsed and checked (validator.packed.agent_facts,
  the bytes kept as their packed encoding) as the SSH transport does. The packing is
  the agent's work: its CPU is taken out of the controller's figure.
- ``slurm`` / ``slurm-campaign``: the Slurm collector (validator.slurm.job_fanout
  submit_run/follow) with a fake Runner answering sinfo, sbatch, squeue, sacct,
  scontrol and scancel as Slurm does (text forms, as recorded in tests/fixtures/slurm),
  and a fake cluster, a separate process, that writes each node's result files into
  the spool (validator.slurm.submission_spool's layout, renamed into place as step.sh
  does; the facts packed, as the agent prints them for Slurm) at the drawn times. Its
  CPU is the cluster's, not the controller's.

Facts come from the simulated source: the real agent (``python -m validator.node.agent
--simulate NAME``) runs once per scenario; every host gets that JSON with its own
hostname. Hosts are ``healthy-8x-h100-sxm`` but for a failing share spread over
failing scenarios, an unreachable share and a slow share.

Where the figures come from:

- agent run 0.40 s (wall, simulated source, no burn): measured on this machine,
  ``/usr/bin/time python3 gpuready-agent.pyz --simulate healthy-8x-h100-sxm``
  (0.55, 0.45, 0.39 s; ``python -m validator.node.agent``: 0.48, 0.39, 0.40 s): the
  drawn run is log-normal around it (sigma 0.15). The facts themselves come from a
  run with a 2 s simulated burn and the interconnect measured (a node is certified
  only with both), its telemetry stretched to a default burn's 300 samples per GPU
  (``--samples-per-gpu``; the short burn has ~40), so they have a certifying run's
  shape and size (~500 KB of JSON; ~135 KB with the short burn's own samples); each
  scenario's agent wall time is in the output (``agent_wall_s``).
- connect + upload: bench/fanout.py over 16 and 64 real sshd test hosts on this
  machine measured 321 ms and 198 ms of run wall time per node (5.1 s for 16 hosts,
  12.7 s for 64), including the agent's own 0.40 s and the controller's start-up
  (~0.2 s, bench/startup.py). What is left per host for the SSH handshake and the
  cached-agent check is at most ~0.2 s; we draw connect from a log-normal of median
  80 ms and upload (the hash check of a cached agent) of median 30 ms, both with
  sigma 0.5 (an estimate within that bound: localhost round trips are sub-ms, the
  cost is paramiko's key exchange).
- controller CPU of the SSH transport itself (key exchange, channel, reading the
  facts): issue 16 measured 0.047 CPU-s per host for the whole controller over SSH,
  "about half of it writing history"; the fake transport burns ``--ssh-cpu-ms``
  (default 20 ms) of Python CPU per host, holding the GIL as paramiko does, so the
  figure includes what paramiko costs today. ``--ssh-cpu-ms 0`` shows the rest alone.
- unreachable share 1% (half refused at once, half timing out at the connect
  timeout, 10 s by default: ``--connect-timeout``), slow share 2% (agent 3-10x
  slower), failing share 10%: assumptions, to exercise those paths at scale; change
  them with the options.
- Slurm: job start 0.5 s after sbatch, each node's step launch median 150 ms (the
  srun step start on the 64-node test cluster, bench/slurm.py); unreachable nodes
  are ``down*`` in sinfo (Slurm will not run them), slow nodes as above.

Run (each size and path in a fresh process, so its peak memory is its own)::

    python bench/scale.py                       # 1,000 and 10,000 nodes, ssh and slurm
    python bench/scale.py --nodes 1000 --paths ssh slurm-campaign
    python bench/scale.py --nodes 50 --time-scale 0.1 --json-out /tmp/scale.json

Prints one JSON summary (every run's figures) and a short table.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import functools
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from validator.codec import pack  # noqa: E402
from validator.model import HostSpec, NodeFacts, NodeResult, from_dict  # noqa: E402
from validator.packed import agent_facts  # noqa: E402
from validator.remote.transport import AgentOutcome, AgentRequest, Phase, Progress  # noqa: E402
from validator.service.collect_and_judge import Reach  # noqa: E402
from validator.slurm.commands import CommandResult  # noqa: E402

HEALTHY = "healthy-8x-h100-sxm"
# Failing scenarios, each NOT_CERTIFIED on its own (checked at start-up: expected_verdicts).
FAILING = (
    "hbm-slow-one-gpu",
    "driver-mismatch",
    "one-gpu-thermal-throttling",
    "row-remap-pending",
    "pcie-riser-x8-h2d-half",
)
PATHS = ("ssh", "slurm", "slurm-campaign")
PLACEHOLDER = "@@scale-host@@"
PARTITION = "gpu"
DEFAULT_AGENT_S = 0.40  # see the module docstring
FACTS_BURN_S = 2.0
# A default burn (300 s, validator.node.burnin.burn_config) sampled at the default 1 s interval.
DEFAULT_SAMPLES_PER_GPU = 300


@dataclass(frozen=True)
class Config:
    """One simulation's knobs (see the module docstring for where the defaults come from)."""

    nodes: int
    path: str = "ssh"
    parallel: int = 64
    failing_share: float = 0.10
    unreachable_share: float = 0.01
    slow_share: float = 0.02
    connect_median_s: float = 0.080
    upload_median_s: float = 0.030
    agent_run_s: float = DEFAULT_AGENT_S
    ssh_cpu_ms: float = 20.0
    connect_timeout_s: float = 10.0
    slurm_start_s: float = 0.5
    slurm_step_median_s: float = 0.150
    poll_s: float = 1.0
    time_scale: float = 1.0  # every drawn delay times this (tests run at 0.1)
    seed: int = 16


@dataclass(frozen=True)
class Draw:
    """One host's fate: its scenario (None: unreachable) and its delays in seconds."""

    name: str
    scenario: str | None
    connect_s: float
    upload_s: float
    run_s: float
    refused: bool = False


def draw_fleet(config: Config) -> list[Draw]:
    """Every host's scenario and delays, reproducibly from the seed."""
    rng = random.Random(config.seed)
    width = max(5, len(str(config.nodes)))
    scale = config.time_scale
    draws = []
    for i in range(config.nodes):
        name = f"sim{i:0{width}d}"
        roll = rng.random()
        connect = rng.lognormvariate(math.log(config.connect_median_s), 0.5) * scale
        upload = rng.lognormvariate(math.log(config.upload_median_s), 0.5) * scale
        run = rng.lognormvariate(math.log(config.agent_run_s), 0.15) * scale
        if roll < config.unreachable_share:
            refused = rng.random() < 0.5
            connect = (0.005 if refused else config.connect_timeout_s) * scale
            draws.append(Draw(name, None, connect, 0.0, 0.0, refused=refused))
            continue
        scenario = HEALTHY
        if roll < config.unreachable_share + config.failing_share:
            scenario = FAILING[i % len(FAILING)]
        if rng.random() < config.slow_share:
            run *= rng.uniform(3.0, 10.0)
        draws.append(Draw(name, scenario, connect, upload, run))
    return draws


# ---------------------------------------------------------------- facts


@dataclass(frozen=True)
class Facts:
    """Each scenario's facts as the agent printed them, its hostname a placeholder."""

    texts: dict[str, str]
    agent_wall_s: dict[str, float]

    def text_for(self, scenario: str, hostname: str) -> str:
        """The agent's JSON for ``hostname`` running ``scenario``."""
        return self.texts[scenario].replace(json.dumps(PLACEHOLDER), json.dumps(hostname), 1)


def stretch_samples(data: dict[str, Any], per_gpu: int) -> None:
    """Give each GPU's burn ``per_gpu`` telemetry samples, over the same load window.

    The short simulated burn samples every 50 ms (~40 samples); a default burn samples
    once a second for 300 s. The controller's cost grows with the samples (each one
    decoded, kept and judged), so the facts carry a default burn's count: the recorded
    samples in order, each repeated, their times spread evenly over the original span.
    """
    burn = data.get("burn")
    for gpu in burn.get("gpus", []) if isinstance(burn, dict) else []:
        samples = gpu.get("samples") or []
        if not samples or per_gpu <= 0:
            continue
        span = float(samples[-1]["t_s"]) - float(samples[0]["t_s"])
        start = float(samples[0]["t_s"])
        step = span / (per_gpu - 1) if per_gpu > 1 else 0.0
        stretched = []
        for i in range(per_gpu):
            sample = dict(samples[i * len(samples) // per_gpu], t_s=round(start + i * step, 4))
            if isinstance(sample.get("power_w"), float):
                # NVML's power reading differs at every tick; copies would compress too well.
                sample["power_w"] = round(sample["power_w"] * (1 + 0.004 * math.sin(i)), 2)
            stretched.append(sample)
        gpu["samples"] = stretched


def produce_facts(
    scenarios: Sequence[str], samples_per_gpu: int = DEFAULT_SAMPLES_PER_GPU
) -> Facts:
    """Run the real agent once per scenario (simulated source, all at once).

    A node is certified only after a burn-in and the interconnect measurement, so the
    agent runs a short simulated burn (:data:`FACTS_BURN_S`) with ``--interconnect on``:
    the facts have the shape of a certifying run's, and with ``samples_per_gpu``
    telemetry samples per GPU (:func:`stretch_samples`) its size too.
    """
    started = {}
    for scenario in scenarios:
        argv = [sys.executable, "-m", "validator.node.agent", "--simulate", scenario]
        argv += ["--burn", f"{FACTS_BURN_S:g}", "--interconnect", "on"]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
        started[scenario] = (process, time.perf_counter())
    texts: dict[str, str] = {}
    walls: dict[str, float] = {}
    for scenario, (process, start) in started.items():
        stdout, stderr = process.communicate()
        walls[scenario] = round(time.perf_counter() - start, 3)
        if process.returncode != 0:
            raise RuntimeError(f"the agent failed on {scenario}: {stderr.decode()[-500:]}")
        data = json.loads(stdout)
        data["hostname"] = PLACEHOLDER
        stretch_samples(data, samples_per_gpu)
        texts[scenario] = json.dumps(data, sort_keys=True, separators=(",", ":"))  # as printed
    return Facts(texts, walls)


def expected_verdicts(facts: Facts) -> dict[str, str]:
    """Each scenario's verdict judged alone with the default policy."""
    from validator.judge import judge_node
    from validator.judge.policy import Policy

    verdicts = {}
    for scenario in facts.texts:
        parsed = from_dict(NodeFacts, json.loads(facts.text_for(scenario, "x")))
        verdicts[scenario] = judge_node(parsed, Policy()).verdict.value
    return verdicts


def _burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU in Python, holding the GIL as paramiko does."""
    if seconds <= 0:
        return
    until = time.thread_time() + seconds
    x = 0
    while time.thread_time() < until:
        for i in range(200):
            x ^= i * i


class _AgentCpu:
    """CPU the fake SSH transport spends doing an agent's work (packing its facts)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds


AGENT_CPU = _AgentCpu()


def _packed_by_the_agent(text: str) -> str:
    """``text`` as ``--packed`` prints it: the agent's work, on its host, so not the controller's.

    Done here in the controller's process, its thread CPU is counted apart (AGENT_CPU)
    and taken out of the controller's figure.
    """
    started = time.thread_time()
    line = base64.b64encode(pack(text)).decode("ascii")
    AGENT_CPU.add(time.thread_time() - started)
    return line


class FakeSshTransport:
    """The SSH transport's part, in process: drawn delays, the facts packed as by the agent."""

    name = "ssh"

    def __init__(self, draws: Sequence[Draw], facts: Facts, config: Config) -> None:
        self._draws = {draw.name: draw for draw in draws}
        self._facts = facts
        self._cpu_s = config.ssh_cpu_ms / 1000.0
        self._timeout_s = config.connect_timeout_s

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """As SshTransport.run_agent: failures are outcomes."""
        del request, timeout_s
        start = time.monotonic()
        draw = self._draws[host.name]
        progress.phase(host.name, Phase.CONNECT)
        time.sleep(draw.connect_s)
        _burn_cpu(self._cpu_s / 2)  # key exchange, authentication, channel
        if draw.scenario is None:
            why = (
                f"cannot connect to {host.address}:22: Connection refused"
                if draw.refused
                else f"cannot connect to {host.address}:22: timed out after {self._timeout_s:g} s"
            )
            return AgentOutcome(host.name, None, why, "", Phase.CONNECT, time.monotonic() - start)
        progress.phase(host.name, Phase.UPLOAD)
        time.sleep(draw.upload_s)
        progress.phase(host.name, Phase.RUN)
        time.sleep(draw.run_s)
        _burn_cpu(self._cpu_s / 2)  # reading the channel
        progress.phase(host.name, Phase.PARSE)
        facts = agent_facts(_packed_by_the_agent(self._facts.text_for(draw.scenario, host.name)))
        return AgentOutcome(host.name, facts, None, "", Phase.DONE, time.monotonic() - start)


# ---------------------------------------------------------------- fake Slurm

_CLUSTER = r"""
import base64, json, os, sys, time
plan = json.load(open(sys.argv[1]))
sys.path.insert(0, plan["repo"])
from validator.codec import pack  # each node's agent packs its facts (--packed)
out, texts, t0 = plan["out"], plan["texts"], plan["t0"]
for at, node, scenario in sorted(plan["steps"]):
    pause = t0 + at - time.time()
    if pause > 0:
        time.sleep(pause)
    body = texts[scenario].replace(json.dumps(plan["placeholder"]), json.dumps(node), 1)
    with open(f"{out}/{node}.stdout.tmp", "w") as f:
        f.write(base64.b64encode(pack(body)).decode("ascii") + "\n")
    os.replace(f"{out}/{node}.stdout.tmp", f"{out}/{node}.stdout")
    open(f"{out}/{node}.stderr", "w").close()
    with open(f"{out}/{node}.rc.tmp", "w") as f:
        f.write("0\n")
    os.replace(f"{out}/{node}.rc.tmp", f"{out}/{node}.rc")
"""


@dataclass
class _Job:
    nodes: list[str]
    start: float
    end: float
    cancelled: bool = False


@dataclass
class FakeSlurm:
    """A Runner answering Slurm's commands, and the cluster writing results into the spool.

    The ``--json`` forms answer as a Slurm built without JSON support does, so the
    text forms (recorded on the test cluster, tests/fixtures/slurm) are read.
    """

    draws: Sequence[Draw]
    facts: Facts
    config: Config
    workdir: Path
    calls: dict[str, int] = field(default_factory=dict)
    call_s: dict[str, float] = field(default_factory=dict)
    jobs: dict[str, _Job] = field(default_factory=dict)
    clusters: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _pending: list[tuple[float, str, str]] = field(default_factory=list)
    _out: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rng: random.Random = field(default_factory=lambda: random.Random(61))

    def __post_init__(self) -> None:
        self._draws = {draw.name: draw for draw in self.draws}
        self._t0 = time.time()

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        """One Slurm command."""
        start = time.perf_counter()
        command = argv[0]
        try:
            with self._lock:
                return self._answer(list(argv))
        finally:
            self.calls[command] = self.calls.get(command, 0) + 1
            self.call_s[command] = self.call_s.get(command, 0.0) + time.perf_counter() - start

    def _answer(self, argv: list[str]) -> CommandResult:
        command = argv[0]
        if "--json" in argv:
            return CommandResult(1, "", f"{command}: unrecognized option '--json'\n")
        answers: dict[str, Callable[[list[str]], CommandResult]] = {
            "sinfo": self._sinfo,
            "sbatch": self._sbatch,
            "squeue": self._squeue,
            "scancel": self._scancel,
            # Jobs squeue no longer lists are forgotten (MinJobAge), without accounting.
            "scontrol": lambda _: CommandResult(
                1, "", "slurm_load_jobs error: Invalid job id specified\n"
            ),
            "sacct": lambda _: CommandResult(0, ""),
        }
        answer = answers.get(command)
        return answer(argv) if answer else CommandResult(1, "", f"{command}: not simulated\n")

    def _sinfo(self, argv: list[str]) -> CommandResult:
        del argv
        rows = [
            f"{d.name}|{'idle' if d.scenario else 'down*'}|"
            f"{'none' if d.scenario else 'Not responding'}|{PARTITION}*"
            for d in self.draws
        ]
        return CommandResult(0, "\n".join(rows) + "\n")

    def _squeue(self, argv: list[str]) -> CommandResult:
        ids = argv[argv.index("-j") + 1].split(",")
        now = time.time()
        rows = []
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None:
                continue
            if job.cancelled:
                state = "CANCELLED"
            elif now < job.start:
                state = "PENDING"
            else:
                state = "RUNNING" if now < job.end else "COMPLETED"
            rows.append(f"{job_id}|{state}|None|{','.join(job.nodes)}|gpuready-certify")
        return CommandResult(0, "\n".join(rows) + ("\n" if rows else ""))

    def _scancel(self, argv: list[str]) -> CommandResult:
        for job_id in argv[1:]:
            if job_id in self.jobs:
                self.jobs[job_id].cancelled = True
        return CommandResult(0)

    def _sbatch(self, argv: list[str]) -> CommandResult:
        script = next(i for i, a in enumerate(argv) if a.endswith("job.sh"))
        nodes = argv[script + 1 :]
        spool = Path(argv[script]).parent
        self._out = str(spool / "out")
        job_id = str(1000 + len(self.jobs))
        now = time.time()
        scale = self.config.time_scale
        start = now + self.config.slurm_start_s * scale
        end = start
        for node in nodes:
            draw = self._draws[node]
            if draw.scenario is None:
                continue
            step = self._rng.lognormvariate(math.log(self.config.slurm_step_median_s), 0.5)
            done = start + step * scale + draw.run_s
            end = max(end, done)
            self._pending.append((done - self._t0, node, draw.scenario))
        self.jobs[job_id] = _Job(nodes, start, end + 0.05 * scale)
        return CommandResult(0, f"{job_id}\n")

    def launch(self) -> None:
        """Start the cluster process for what was submitted so far."""
        if not self._pending or self._out is None:
            return
        plan = {
            "repo": str(REPO),
            "out": self._out,
            "texts": self.facts.texts,
            "placeholder": PLACEHOLDER,
            "t0": self._t0,
            "steps": self._pending,
        }
        path = self.workdir / f"cluster-{len(self.clusters)}.json"
        path.write_text(json.dumps(plan))
        self._pending = []
        self.clusters.append(subprocess.Popen([sys.executable, "-c", _CLUSTER, str(path)]))

    def close(self) -> None:
        """Stop the cluster processes this simulation started."""
        for process in self.clusters:
            if process.poll() is None:
                process.terminate()
            process.wait()


# ---------------------------------------------------------------- the run


class _Display:
    """A FleetDisplay that only notes when each result arrived."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0

    def set_hosts(self, hosts: list[HostSpec]) -> None:
        del hosts

    def phase(self, host: str, phase: Phase) -> None:
        del host, phase

    def result(self, result: NodeResult) -> None:
        del result
        now = time.perf_counter()
        self.first = self.first or now
        self.last = now
        self.count += 1


class _Timer:
    """Wall seconds and calls spent in the functions it wraps, by name."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, function: Callable[..., object]) -> Callable[..., object]:
        """``function``, its calls timed under ``name``."""

        @functools.wraps(function)
        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - start
                self.calls[name] = self.calls.get(name, 0) + 1

        return timed


@contextlib.contextmanager
def _patched(target: object, attribute: str, value: object) -> Iterator[None]:
    old = getattr(target, attribute)
    setattr(target, attribute, value)
    try:
        yield
    finally:
        setattr(target, attribute, old)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _write_inventory(path: Path, draws: Sequence[Draw]) -> None:
    lines = ["[sim]"]
    for i, draw in enumerate(draws):
        address = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        scenario = draw.scenario or HEALTHY
        lines.append(f"{draw.name} ansible_host={address} gpuready_simulate={scenario}")
    path.write_text("\n".join(lines) + "\n")


def _expected(config: Config, facts: Facts, draws: Sequence[Draw]) -> dict[str, int]:
    """How many nodes of each verdict the draws should give."""
    by_scenario = expected_verdicts(facts)
    expected: dict[str, int] = {}
    for draw in draws:
        verdict = by_scenario[draw.scenario] if draw.scenario else "UNKNOWN"
        expected[verdict] = expected.get(verdict, 0) + 1
    del config
    return dict(sorted(expected.items()))


def _timed_patches(timer: _Timer) -> list[tuple[object, str, object]]:
    """The functions whose wall time is told apart (each looked up at call time)."""
    import validator.ansible_inventory as inventory_module
    import validator.judge.fleet as fleet_module
    import validator.report.partial as partial_module
    import validator.report.writer as writer_module
    import validator.service.certify_service as operations
    from validator.store import Store

    named: list[tuple[object, str, str]] = [
        (operations, "record_report", "final_write"),
        (Store, "record_result", "store_record"),
        (writer_module, "write_reports", "render"),
        (partial_module, "write_host_result", "host_files"),
        (fleet_module, "judge_fleet", "fleet_judge"),
        (inventory_module, "load_hosts", "inventory"),
    ]
    return [(where, name, timer.wrap(label, getattr(where, name))) for where, name, label in named]


def _path_patches(
    config: Config, facts: Facts, draws: Sequence[Draw], work: Path, timer: _Timer
) -> tuple[list[tuple[object, str, object]], dict[str, Any], FakeSlurm | None]:
    """What the path swaps (the transport, or Slurm's runner) and how the hosts are reached."""
    import validator.service.collect_and_judge as certify_module
    import validator.slurm.plan_and_reach as slurm_operations
    from validator.slurm.job_fanout import SlurmOptions, follow, target_nodes

    if config.path == "ssh":
        inventory = work / "hosts.ini"
        _write_inventory(inventory, draws)
        fake = FakeSshTransport(draws, facts, config)
        patches: list[tuple[object, str, object]] = [
            (certify_module, "transport_named", lambda name, request: fake)
        ]
        reach = {"inventories": (str(inventory),), "connect_timeout_s": config.connect_timeout_s}
        return patches, reach, None
    slurm = FakeSlurm(draws, facts, config, work)
    patches = [
        (slurm_operations, "target_nodes", functools.partial(target_nodes, runner=slurm)),
        (slurm_operations, "submit_run", timer.wrap("submit", _launching(slurm))),
        (slurm_operations, "follow", functools.partial(follow, runner=slurm)),
    ]
    spool = work / "spool"
    spool.mkdir()
    options = SlurmOptions(
        spool=str(spool),
        partition=PARTITION,
        campaign=config.path == "slurm-campaign",
        poll_s=config.poll_s * config.time_scale,
    )
    return patches, {"slurm": options}, slurm


def _report_files(report_dir: Path) -> dict[str, int]:
    names = ("report.json", "report.html", "junit.xml", "hosts", "certificates")
    return {name: _size(report_dir / name) for name in names if (report_dir / name).exists()}


def simulate(config: Config, facts: Facts | None = None) -> dict[str, Any]:
    """One simulated certify run through ``config.path``; its figures as plain data."""
    import validator.service.certify_service as operations
    from validator.store import Store

    if config.path not in PATHS:
        raise ValueError(f"path {config.path!r}: one of {', '.join(PATHS)}")
    facts = facts or produce_facts((HEALTHY, *FAILING))
    draws = draw_fleet(config)
    timer, display = _Timer(), _Display()
    with tempfile.TemporaryDirectory(prefix="gpuready-scale-") as temporary:
        work = Path(temporary)
        report_dir = work / "report"
        patches, reach, slurm = _path_patches(config, facts, draws, work, timer)
        request = operations.CertifyRequest(
            reach=Reach(parallel=config.parallel, **reach),
            report_dir=str(report_dir),
            argv=("certify", "--bench-scale"),
        )
        with contextlib.ExitStack() as stack:
            for target, attribute, value in [*_timed_patches(timer), *patches]:
                stack.enter_context(_patched(target, attribute, value))
            if slurm is not None:
                stack.callback(slurm.close)
            store = stack.enter_context(Store.open(work / "history.db"))
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            agent_cpu_before = AGENT_CPU.seconds
            cpu_before = time.process_time()
            start = time.perf_counter()
            outcome = operations.run_certify(request, store, fleet_display=display)
            wall = time.perf_counter() - start
            # Less what the fake agents spent packing their facts (on their own hosts).
            cpu = time.process_time() - cpu_before - (AGENT_CPU.seconds - agent_cpu_before)
            rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        store_bytes = sum(_size(p) for p in work.glob("history.db*"))
        files = _report_files(report_dir)
        report_bytes = _size(report_dir) if report_dir.exists() else 0
    counts: dict[str, int] = {}
    for node in outcome.report.nodes:
        counts[node.verdict.value] = counts.get(node.verdict.value, 0) + 1
    n = config.nodes
    last = (display.last - start) if display.last is not None else None
    return {
        "path": config.path,
        "nodes": n,
        "parallel": config.parallel,
        "ssh_cpu_ms": config.ssh_cpu_ms if config.path == "ssh" else None,
        "time_scale": config.time_scale,
        "wall_s": round(wall, 2),
        "time_to_last_result_s": round(last, 2) if last is not None else None,
        "results_seen": display.count,
        "nodes_per_s": round(n / wall, 1),
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_node": round(1000 * cpu / n, 2),
        "peak_rss_mb": round(rss_after / 1024, 1),
        "rss_growth_kb_per_node": round((rss_after - rss_before) / n, 1),
        "store_bytes": store_bytes,
        "store_kb_per_node": round(store_bytes / 1024 / n, 1),
        "report_bytes": report_bytes,
        "report_kb_per_node": round(report_bytes / 1024 / n, 1),
        "report_files": files,
        "render_s": round(timer.wall.get("render", 0.0), 2),
        "phases_s": {k: round(v, 2) for k, v in sorted(timer.wall.items())},
        "verdicts": dict(sorted(counts.items())),
        "expected_verdicts": _expected(config, facts, draws),
        "agent_wall_s": facts.agent_wall_s,
        "problems": list(outcome.problems),
        "slurm_calls": dict(sorted(slurm.calls.items())) if slurm else None,
        "slurm_call_s": (
            {k: round(v, 3) for k, v in sorted(slurm.call_s.items())} if slurm else None
        ),
    }


def _launching(slurm: FakeSlurm) -> Callable[..., object]:
    """submit_run with the fake runner, starting the cluster once the jobs are in."""
    from validator.slurm.job_fanout import submit_run

    def submit(*args: Any, **kwargs: Any) -> object:  # noqa: ANN401 - submit_run's own
        kwargs["runner"] = slurm
        submission = submit_run(*args, **kwargs)
        slurm.launch()
        return submission

    return submit


# ---------------------------------------------------------------- the command


def _one(args: argparse.Namespace, path: str, nodes: int) -> dict[str, Any]:
    """One size and path in a fresh process, so that its peak memory is its own."""
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one",
        path,
        str(nodes),
        *_passed(args),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        return {"path": path, "nodes": nodes, "error": done.stderr.strip()[-2000:]}
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        f"--parallel={args.parallel}",
        f"--failing-share={args.failing_share}",
        f"--unreachable-share={args.unreachable_share}",
        f"--slow-share={args.slow_share}",
        f"--ssh-cpu-ms={args.ssh_cpu_ms}",
        f"--connect-timeout={args.connect_timeout}",
        f"--time-scale={args.time_scale}",
        f"--poll={args.poll}",
        f"--seed={args.seed}",
        f"--samples-per-gpu={args.samples_per_gpu}",
    ]


def _config(args: argparse.Namespace, path: str, nodes: int) -> Config:
    return Config(
        nodes=nodes,
        path=path,
        parallel=args.parallel,
        failing_share=args.failing_share,
        unreachable_share=args.unreachable_share,
        slow_share=args.slow_share,
        ssh_cpu_ms=args.ssh_cpu_ms,
        connect_timeout_s=args.connect_timeout,
        time_scale=args.time_scale,
        poll_s=args.poll,
        seed=args.seed,
    )


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The short table: one row per run."""
    head = (
        f"{'path':<15}{'nodes':>7}{'wall s':>9}{'last s':>9}{'CPU ms/n':>10}{'peak MB':>9}"
        f"{'store KB/n':>11}{'report KB/n':>12}{'render s':>9}  verdicts"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['path']:<15}{row['nodes']:>7}  error: {row['error'][-200:]}")
            continue
        verdicts = " ".join(f"{k}={v}" for k, v in row["verdicts"].items())
        lines.append(
            f"{row['path']:<15}{row['nodes']:>7}{row['wall_s']:>9}"
            f"{row['time_to_last_result_s']!s:>9}{row['cpu_ms_per_node']:>10}"
            f"{row['peak_rss_mb']:>9}{row['store_kb_per_node']:>11}"
            f"{row['report_kb_per_node']:>12}{row['render_s']:>9}  {verdicts}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulation at each size through each path; print JSON and a table."""
    knobs = Config(nodes=0)  # the defaults live in Config, once
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=["ssh", "slurm"])
    parser.add_argument("--parallel", type=int, default=knobs.parallel)
    parser.add_argument("--failing-share", type=float, default=knobs.failing_share)
    parser.add_argument("--unreachable-share", type=float, default=knobs.unreachable_share)
    parser.add_argument("--slow-share", type=float, default=knobs.slow_share)
    parser.add_argument("--ssh-cpu-ms", type=float, default=knobs.ssh_cpu_ms)
    parser.add_argument("--connect-timeout", type=float, default=knobs.connect_timeout_s)
    parser.add_argument("--time-scale", type=float, default=knobs.time_scale)
    parser.add_argument(
        "--poll", type=float, default=knobs.poll_s, help="Slurm poll seconds (scaled)"
    )
    parser.add_argument("--seed", type=int, default=knobs.seed)
    parser.add_argument(
        "--samples-per-gpu",
        type=int,
        default=DEFAULT_SAMPLES_PER_GPU,
        help="burn telemetry samples per GPU in each node's facts (a default burn: 300)",
    )
    parser.add_argument("--json-out", help="also write the JSON summary here")
    parser.add_argument("--one", nargs=2, metavar=("PATH", "NODES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        path, nodes = args.one[0], int(args.one[1])
        config = _config(args, path, nodes)
        facts = produce_facts((HEALTHY, *FAILING), args.samples_per_gpu)
        # A small run first: the imports and first-call costs are not the fleet's.
        simulate(dataclasses.replace(config, nodes=min(nodes, 8), time_scale=0.01), facts)
        print(json.dumps(simulate(config, facts)))
        return 0
    rows = [_one(args, path, nodes) for nodes in args.nodes for path in args.paths]
    summary = {"runs": rows, "cpus": os.cpu_count()}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    print(table(rows))
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
