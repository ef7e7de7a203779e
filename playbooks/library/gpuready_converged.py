#!/usr/bin/python
"""Ansible module: is this host still what the last full provisioning run left?

The site play runs ``probe`` as one task in ``pre_tasks``, before the Slurm drain, so
that a converged host is neither drained nor walked through the install roles (each
then costs one skipped ``include_role``); ``gpu_verify`` still runs. ``record`` runs in
``post_tasks`` after ``gpu_verify`` passed on a full run (no ``--tags``/``--skip-tags``,
not in check mode) and writes what the probe compares against.

What is compared, read from the host in one pass each (one package database query,
one versionlock list, one glob walk): the managed packages' versions and holds, the
sha256 of every file the roles manage, the reboot marker, and the loaded NVIDIA module
against the pin. The inputs digest (roles, playbook and the host's role variables) is
computed on the controller by the ``gpuready_tree_digest`` lookup and passed in, so a
pin raise or any role change invalidates the state.

The pure logic (parsers, comparison) takes paths and command output as arguments, so
tests drive it with fake dpkg/rpm output and a temporary root.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: gpuready_converged
short_description: Probe whether a host is still as the last full provisioning run left it
description:
  - C(probe) returns C(converged) and, when not, short C(reasons); it never changes anything.
  - C(record) writes the state file atomically (mode 0644); in check mode it writes nothing.
options:
  action:
    description: C(probe) compares the host with the state file; C(record) writes it.
    type: str
    choices: [probe, record]
    default: probe
  inputs_digest:
    description: The controller's digest of the roles, playbook and the host's role variables.
    type: str
    required: true
  package_manager:
    description: >-
      C(apt) reads dpkg-query, C(dnf) reads rpm -qa and the versionlock list; C(auto)
      chooses by /etc/os-release (test hosts shaped like RHEL carry Debian's dpkg too).
    type: str
    choices: [auto, apt, dnf]
    default: auto
  driver_version:
    description: The pinned driver; a loaded NVIDIA module of another version is not converged.
    type: str
    default: ""
  state_file:
    type: path
    default: /var/lib/gpuready/provisioned.json
  reboot_marker:
    description: nvidia_driver's reboot marker (nvidia_driver_reboot_marker).
    type: path
    default: /var/lib/gpuready/reboot-required
  reboot_skipped:
    description: >-
      The driver role would not reboot this host (nvidia_driver_skip_reboot, local
      connection): a marker of this boot then does not hold convergence back, since the
      role would only write it again.
    type: bool
    default: false
  files:
    description: Globs of the files the roles manage (default MANAGED_FILES).
    type: list
    elements: str
  package_pattern:
    description: Regex of the managed package names (default PACKAGE_PATTERN).
    type: str
  versionlock_list:
    type: path
    default: /etc/dnf/plugins/versionlock.list
  root:
    description: Prefix of every host path (tests, image builds).
    type: path
    default: /
"""

RETURN = r"""
converged:
  description: True when nothing the roles manage moved since the recorded full run.
  type: bool
  returned: always
reasons:
  description: Why not, each a short line ("state file missing", "pin changed", ...).
  type: list
  returned: always
notes:
  description: What was noticed without blocking convergence (a reboot left to the operator).
  type: list
  returned: always
inputs_digest:
  description: The digest probed against, for the record task of the same run.
  type: str
  returned: probe
"""

# The files the install roles write (template/copy/lineinfile/blockinfile/replace dests,
# yum_repository files, the dnf module stream, the alternatives link), and the places a
# stale copy would appear. One list: tests/playbooks/test_converged_probe.py checks every dest of
# the roles is covered. The reboot marker and the state file are not here: the marker
# has its own rule, and the state file is what the others are compared against.
MANAGED_FILES: tuple[str, ...] = (
    "/etc/apt/preferences.d/gpuready-*",
    "/etc/apt/apt.conf.d/*gpuready*",
    "/etc/apt/sources.list",
    "/etc/apt/sources.list.d/debian.sources",
    "/etc/apt/sources.list.d/gpuready-*",
    "/etc/apt/sources.list.d/*cuda*",
    "/etc/apt/sources.list.d/*nvidia*",
    "/usr/share/keyrings/*cuda*",
    "/usr/share/keyrings/nvidia-*",
    "/etc/yum.repos.d/gpuready-*",
    "/etc/yum.repos.d/*cuda*",
    "/etc/yum.repos.d/*nvidia*",
    "/etc/dnf/plugins/versionlock.list",
    "/etc/dnf/modules.d/nvidia-driver.module",
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/etc/modprobe.d/gpuready-*",
    "/etc/modules-load.d/gpuready-*",
    "/etc/modules-load.d/nvidia-*",
    "/etc/systemd/system/nvidia-*.service.d/*",
    "/etc/security/limits.d/*gpuready*",
    "/etc/profile.d/cuda.sh",
    "/etc/alternatives/cuda",
    "/etc/docker/daemon.json",
    "/etc/containerd/config.toml",
    "/etc/crio/crio.conf.d/99-nvidia.toml",
)

# Driver, fabric manager / NSCQ / NVSDM / nvlsm, CUDA, cuDNN, NCCL, DCGM, container
# toolkit, kmods and the Debian/Ubuntu driver companions (gpu_verify's patterns, joined).
PACKAGE_PATTERN = (
    r"^(nvidia-|libnvidia-|cuda-|cuda$|libcuda|(lib)?cudnn|libnccl|datacenter-gpu-manager"
    r"|kmod-nvidia|nvlsm$|libnvsdm|libxnvctrl|xserver-xorg-video-nvidia|firmware-nvidia|nsight-)"
)

STATE_VERSION = 1
DPKG_QUERY = ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${Status}\\n"]
RPM_QUERY = [
    "rpm",
    "-qa",
    "--qf",
    "%{NAME}\\t%|EPOCH?{%{EPOCH}}:{0}|\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n",
]
# Same regex as nvidia_driver's nvidia_driver_proc_version_regex (roles/nvidia_driver/vars).
PROC_VERSION_RE = re.compile(r"NVRM version:.*?[ \t]([0-9]+[.][0-9]+(?:[.][0-9]+)?)[ \t]")


@dataclass(frozen=True)
class Package:
    """One installed package: its version string as the package manager writes it."""

    version: str
    held: bool


@dataclass
class HostState:
    """What the probe reads from the host, in the state file's shape."""

    packages: dict[str, Package] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # path -> "sha256:<hex>" / "link:<to>"
    loaded_driver: str | None = None

    def to_dict(self, inputs_digest: str) -> dict[str, Any]:
        """The state file's content for this host state."""
        return {
            "version": STATE_VERSION,
            "inputs_digest": inputs_digest,
            "packages": {
                name: {"version": pkg.version, "held": pkg.held}
                for name, pkg in sorted(self.packages.items())
            },
            "files": dict(sorted(self.files.items())),
            "loaded_driver": self.loaded_driver,
        }


def parse_dpkg(output: str, pattern: str) -> dict[str, Package]:
    r"""Managed packages from ``dpkg-query -W -f '${Package}\\t${Version}\\t${Status}\\n'``.

    Status is "<want> <error> <state>": installed only when state is ``installed``, held
    when want is ``hold`` (dpkg selections). Every held package counts, whatever its
    name: the driver role holds the kernel too, and a released kernel hold must show.
    Returns ``{name: Package}``.
    """
    wanted = re.compile(pattern)
    found: dict[str, Package] = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        status = parts[2].split()
        if len(status) != 3 or status[2] != "installed":
            continue
        held = status[0] == "hold"
        if held or wanted.search(parts[0]):
            found[parts[0]] = Package(version=parts[1], held=held)
    return found


def versionlock_patterns(text: str) -> list[str]:
    """The lock entries of a dnf versionlock.list (comments and ``!`` excludes left out)."""
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "!"))
    ]


def parse_rpm(output: str, pattern: str, locks: list[str]) -> dict[str, Package]:
    """Managed packages from ``rpm -qa`` (RPM_QUERY: name, epoch, version, release, arch).

    Version is ``[epoch:]version-release`` (epoch left out when 0). A package is held
    when a versionlock entry matches ``name-epoch:version-release.arch`` or the same
    without the epoch (the plugin writes the former; NVIDIA's guide globs the latter).
    Every locked package counts, whatever its name (the kernel's lock too).
    """
    wanted = re.compile(pattern)
    found: dict[str, Package] = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) != 5:
            continue
        name, epoch, version, release, arch = parts
        evr = f"{version}-{release}"
        forms = [f"{name}-{epoch}:{evr}.{arch}", f"{name}-{evr}.{arch}"]
        held = any(fnmatch.fnmatchcase(form, lock) for form in forms for lock in locks)
        if not (held or wanted.search(name)):
            continue
        full = evr if epoch in ("", "0", "(none)") else f"{epoch}:{evr}"
        found[name] = Package(version=full, held=held)
    return found


def _host_path(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def digest_files(globs: list[str], root: str = "/") -> dict[str, str]:
    """``{path: "sha256:<hex>" | "link:<target>"}`` of every file matching the globs.

    Paths are as on the host (without ``root``). A symlink is recorded by its target
    (alternatives), a directory match is left out.
    """
    found: dict[str, str] = {}
    for pattern in globs:
        for hit in glob.glob(_host_path(root, pattern)):
            shown = "/" + os.path.relpath(hit, root) if root not in ("", "/") else hit
            if os.path.islink(hit):
                found[shown] = "link:" + os.readlink(hit)
            elif os.path.isfile(hit):
                sha = hashlib.sha256()
                with open(hit, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 16), b""):
                        sha.update(block)
                found[shown] = "sha256:" + sha.hexdigest()
    return found


def loaded_driver(root: str = "/") -> str | None:
    """The loaded NVIDIA module's version from /proc/driver/nvidia/version, or None."""
    try:
        with open(_host_path(root, "/proc/driver/nvidia/version"), encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    match = PROC_VERSION_RE.search(text)
    return match.group(1) if match else "unknown"


def boot_id(root: str = "/") -> str:
    """This boot's id (/proc/sys/kernel/random/boot_id), "" when unreadable."""
    try:
        with open(_host_path(root, "/proc/sys/kernel/random/boot_id"), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def marker_reason(marker_path: str, current_boot: str, *, reboot_skipped: bool) -> str | None:
    """Why the reboot marker holds convergence back, or None when it does not.

    A marker of an earlier boot needs the driver role once more (it removes the marker
    and starts the persistence daemon on the new module). One of this boot is a pending
    reboot, unless the role would not reboot anyway (``reboot_skipped``).
    """
    try:
        with open(marker_path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"reboot marker {marker_path} unreadable ({exc.strerror})"
    try:
        data = json.loads(text or "{}")
    except ValueError:
        data = {}
    marked_boot = data.get("boot_id", "") if isinstance(data, dict) else ""
    if marked_boot != current_boot:
        return f"reboot marker {marker_path} from an earlier boot"
    if reboot_skipped:
        return None
    return f"reboot pending ({marker_path})"


def load_state(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """The state file's content, or None and why not ("state file missing", ...)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None, "state file missing"
    except (OSError, ValueError) as exc:
        return None, f"state file unreadable ({exc})"
    if (
        not isinstance(data, dict)
        or data.get("version") != STATE_VERSION
        or not isinstance(data.get("packages"), dict)
        or not isinstance(data.get("files"), dict)
    ):
        return None, f"state file not in format {STATE_VERSION}"
    return data, None


def compare(
    recorded: dict[str, Any], current: HostState, inputs_digest: str, driver_version: str
) -> list[str]:
    """Why ``current`` is not what ``recorded`` says (an empty list: converged)."""
    reasons: list[str] = []
    if recorded.get("inputs_digest") != inputs_digest:
        reasons.append("pin changed (roles, playbook or host variables differ)")
    packages: dict[str, Any] = recorded["packages"]
    for name, entry in sorted(packages.items()):
        pkg = current.packages.get(name)
        if not isinstance(entry, dict):
            reasons.append(f"{name}: bad state entry")
        elif pkg is None:
            # Gone, or (outside the managed names) its hold released.
            reasons.append(
                f"{name} not installed or no longer held, recorded {entry.get('version')}"
            )
        elif pkg.version != entry.get("version"):
            reasons.append(f"{name} at {pkg.version}, recorded {entry.get('version')}")
        elif entry.get("held") and not pkg.held:
            reasons.append(f"{name} no longer held")
    reasons += [
        f"{name} {pkg.version} installed since"
        for name, pkg in sorted(current.packages.items())
        if name not in packages
    ]
    files: dict[str, Any] = recorded["files"]
    for path, digest in sorted(files.items()):
        now = current.files.get(path)
        if now is None:
            reasons.append(f"{path} removed")
        elif now != digest:
            reasons.append(f"{path} changed")
    reasons += [f"{path} appeared" for path in sorted(set(current.files) - set(files))]
    loaded = current.loaded_driver
    if loaded is not None and driver_version and loaded != driver_version:
        reasons.append(f"loaded NVIDIA module {loaded}, pinned {driver_version}")
    if loaded is None and recorded.get("loaded_driver"):
        reasons.append(f"NVIDIA module {recorded['loaded_driver']} no longer loaded")
    return reasons


_RPM_FAMILY = frozenset({"rhel", "fedora", "centos", "rocky", "almalinux", "ol", "amzn"})


def package_manager_of(os_release: str) -> str:
    """``dnf`` where /etc/os-release's ID or ID_LIKE names a RHEL-family system, else ``apt``."""
    names: set[str] = set()
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("ID", "ID_LIKE"):
            names.update(value.strip().strip("\"'").lower().split())
    return "dnf" if names & _RPM_FAMILY else "apt"


def read_host(
    run: Callable[[list[str]], str],
    package_manager: str,
    *,
    pattern: str,
    globs: list[str],
    versionlock_list: str,
    root: str = "/",
) -> HostState:
    """Read the host once: the package database, the locks, the file digests, the module.

    ``run`` runs a command and returns its stdout (the module's run_command, or a fake).
    """
    if package_manager == "apt":
        packages = parse_dpkg(run(DPKG_QUERY), pattern)
    else:
        try:
            with open(_host_path(root, versionlock_list), encoding="utf-8") as handle:
                locks = versionlock_patterns(handle.read())
        except OSError:
            locks = []
        packages = parse_rpm(run(RPM_QUERY), pattern, locks)
    return HostState(
        packages=packages, files=digest_files(globs, root), loaded_driver=loaded_driver(root)
    )


def probe(
    state_path: str,
    current: HostState,
    *,
    inputs_digest: str,
    driver_version: str,
    marker_path: str,
    current_boot: str,
    reboot_skipped: bool,
) -> tuple[bool, list[str], list[str]]:
    """``(converged, reasons, notes)`` for this host against its state file."""
    notes: list[str] = []
    reasons: list[str] = []
    marker = marker_reason(marker_path, current_boot, reboot_skipped=reboot_skipped)
    if marker is not None:
        reasons.append(marker)
    elif reboot_skipped and os.path.exists(marker_path):
        notes.append(f"reboot still pending ({marker_path}); this host is not rebooted by the run")
    recorded, why = load_state(state_path)
    if recorded is None:
        return False, [str(why), *reasons], notes
    reasons = compare(recorded, current, inputs_digest, driver_version) + reasons
    return not reasons, reasons, notes


def write_state(path: str, content: dict[str, Any], *, check: bool = False) -> bool:
    """Write the state file atomically (mode 0644); False when it already says the same.

    In check mode (``check``) nothing is written; the return value says whether it would be.
    """
    text = json.dumps(content, indent=2, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    if check:
        return True
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".provisioned.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return True


def main() -> None:
    """Probe or record; fail with one line naming the command that could not run."""
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "default": "probe", "choices": ["probe", "record"]},
            "inputs_digest": {"type": "str", "required": True},
            "package_manager": {
                "type": "str",
                "default": "auto",
                "choices": ["auto", "apt", "dnf"],
            },
            "driver_version": {"type": "str", "default": ""},
            "state_file": {"type": "path", "default": "/var/lib/gpuready/provisioned.json"},
            "reboot_marker": {"type": "path", "default": "/var/lib/gpuready/reboot-required"},
            "reboot_skipped": {"type": "bool", "default": False},
            "files": {"type": "list", "elements": "str", "default": None},
            "package_pattern": {"type": "str", "default": None},
            "versionlock_list": {"type": "path", "default": "/etc/dnf/plugins/versionlock.list"},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    root: str = params["root"]
    manager: str = params["package_manager"]
    if manager == "auto":
        try:
            with open(_host_path(root, "/etc/os-release"), encoding="utf-8") as handle:
                manager = package_manager_of(handle.read())
        except OSError:
            manager = "apt"

    def run(argv: list[str]) -> str:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{argv[0]} failed (exit {rc}): {err.strip() or out.strip()}")
        return str(out)

    current = read_host(
        run,
        manager,
        pattern=params["package_pattern"] or PACKAGE_PATTERN,
        globs=list(params["files"] or MANAGED_FILES),
        versionlock_list=params["versionlock_list"],
        root=root,
    )
    state_path = _host_path(root, params["state_file"])
    if params["action"] == "record":
        content = current.to_dict(params["inputs_digest"])
        changed = write_state(state_path, content, check=module.check_mode)
        module.exit_json(
            changed=changed, converged=True, reasons=[], notes=[], msg=f"recorded {state_path}"
        )
    converged, reasons, notes = probe(
        state_path,
        current,
        inputs_digest=params["inputs_digest"],
        driver_version=params["driver_version"],
        marker_path=_host_path(root, params["reboot_marker"]),
        current_boot=boot_id(root),
        reboot_skipped=params["reboot_skipped"],
    )
    module.exit_json(
        changed=False,
        converged=converged,
        reasons=reasons,
        notes=notes,
        inputs_digest=params["inputs_digest"],
        msg="converged" if converged else "not converged: " + "; ".join(reasons),
    )


if __name__ == "__main__":
    main()
