"""The floor under `certify -i` over SSH: its imports, the inventory and SSH, nothing else.

Imports what a fleet's certify imports, reads the inventory through ansible-core,
then runs the cached agent on every host at once through the SSH transport, as the
fan-out does, but keeps each agent's output as bytes: no facts decoded, nothing
judged, stored or reported. bench/fanout.py runs it beside certify and measures its
CPU the same way (os.wait4), so what certify spends per host beyond it is its own.

    python bench/ssh_floor.py INVENTORY KNOWN_HOSTS

Prints the number of hosts whose agent printed something; exits 1 if any did not.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# What a fleet's certify imports before it reaches its first host (test_startup_imports).
import validator.cli.certify  # noqa: E402
import validator.judge.fleet  # noqa: E402
import validator.remote.fanout  # noqa: E402
import validator.service.certify_service  # noqa: E402
import validator.store  # noqa: E402, F401
from validator.ansible_inventory import load_hosts  # noqa: E402
from validator.model import HostSpec  # noqa: E402
from validator.remote import ssh  # noqa: E402
from validator.remote.transport import AgentRequest  # noqa: E402


class _Quiet:
    def phase(self, host: str, phase: str) -> None:
        """Phases are not shown."""


def main() -> int:
    inventory, known_hosts = sys.argv[1], sys.argv[2]
    hosts = load_hosts([inventory])
    printed: list[int] = []

    def kept_as_bytes(host: HostSpec, run: ssh._Run, timeout_s: float) -> None:
        if run.status == 0 and run.stdout:
            printed.append(len(run.stdout))

    ssh.SshTransport._facts = staticmethod(kept_as_bytes)  # type: ignore[method-assign,assignment]
    transport = ssh.SshTransport(known_hosts=Path(known_hosts))
    workers = [
        threading.Thread(target=transport.run_agent, args=(host, AgentRequest(), 60.0, _Quiet()))
        for host in hosts
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(len(printed))
    return 0 if len(printed) == len(hosts) else 1


if __name__ == "__main__":
    sys.exit(main())
