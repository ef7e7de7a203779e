"""The rooms of ``validator/`` and what each may import: DESIGN.md's rooms table, as a test.

Every module of the package belongs to one room (the longest entry of :data:`ROOMS`
that names it or a package above it) and may import only the standard library,
the project modules its room lists and the libraries it names. click and rich are
the CLI's alone. Imports are read with ``ast``: ``import``, ``from ... import``
(relative ones resolved), under ``if TYPE_CHECKING:`` and inside functions alike;
modules loaded by name (``importlib.import_module("torch")``) are not seen.

Where the code of today breaks a rule, the rule stays as written and the one
import that breaks it is listed in :data:`KNOWN_BREAKS`, an xfail (strict) that
turns into a failure the day the import goes: then the entry goes too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.stdlib_names import stdlib_module_names

STDLIB = stdlib_module_names()

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGE = REPO / "validator"
ROOT = "validator.__init__"  # the package itself (its __version__, its __file__)
UI = frozenset({"click", "rich"})


@dataclass(frozen=True)
class Room:
    """What the modules of one room may import.

    Attributes:
        imports: project modules (a package: everything below it); None: any, but ``forbid``.
        libraries: third-party top-level packages; None: any (click and rich still need ``ui``).
        ui: whether click and rich may be imported (the CLI's alone).
        forbid: project modules out of bounds even when ``imports`` is None.
    """

    imports: tuple[str, ...] | None
    libraries: frozenset[str] | None = frozenset()
    ui: bool = False
    forbid: tuple[str, ...] = ()


# The leaves: standard library only, shipped with the node agent, usable from every room.
LEAVES = (
    "validator.model",
    "validator.error_tree",
    "validator.safe_text",
    "validator.files",
    "validator.fields",
    "validator.codec",
    "validator.limits",
)
# Store, certificates, inventory, provisioning, Slurm: one row of DESIGN's table.
STORE_ROW = (
    "validator.certificate",
    "validator.certified_network",
    "validator.signing",
    "validator.store",
    "validator.ansible_inventory",
    "validator.service.provision_service",
    "validator.extravars",
    "validator.slurm",
)
NODE = Room((*LEAVES, "validator.node"))
# Results as packed JSON: the store's and the host files' one encoding (not shipped to hosts).
PACKED = "validator.packed"
STORE = (ROOT, *LEAVES, PACKED, "validator.judge", *STORE_ROW)
# The service layer (one typed function per command): anything below the CLI.
SERVICE = Room(None, None, forbid=("validator.cli",))
# The transport through Slurm: the remote room's, with Slurm's commands beside it.
SLURM_TRANSPORT = Room(
    (ROOT, *LEAVES, PACKED, "validator.node", "validator.remote", "validator.slurm")
)

ROOMS: dict[str, Room] = {
    ROOT: Room(()),
    # Facts and results, JSON in and out, each document checked through fields.
    # Split by concept into the files of one package, which import one another.
    "validator.model": Room(("validator.model", "validator.safe_text", "validator.fields")),
    "validator.error_tree": Room(()),
    "validator.safe_text": Room(()),
    # Refuses a planted link with the error tree's own kind (exit 2 at the edge).
    "validator.files": Room(("validator.error_tree",)),
    # How kept JSON is compressed, by the store and by the agent: standard library and text.
    "validator.codec": Room(("validator.safe_text",)),
    # Every input's bound, and the readers that hold them: standard library only.
    "validator.limits": Room(()),
    # One way to check every document read: standard library and text only.
    "validator.fields": Room(("validator.safe_text",)),
    # Results as packed JSON (the model's JSON out), shared by the store and the host files;
    # an agent's output is bounded before it is read (validator.limits).
    PACKED: Room(("validator.model", "validator.safe_text", "validator.codec", "validator.limits")),
    # "Under load", the one rule the judge and the reports share.
    "validator.trace": Room(("validator.model", "validator.error_tree")),
    # Runs on the hosts: stdlib, pynvml (the one NVML adapter only) and the leaves.
    "validator.node": NODE,
    "validator.node.nvml": Room(NODE.imports, frozenset({"pynvml"})),
    # Pure functions: facts + catalog + policy -> findings.
    "validator.judge": Room(
        (
            "validator.model",
            "validator.error_tree",
            "validator.safe_text",
            "validator.fields",
            "validator.limits",
            "validator.trace",
            "validator.judge",
        ),
        frozenset({"yaml"}),
    ),
    # One Jinja2 environment (markupsafe is Jinja2's own escaping), one renderer a format;
    # prometheus_client writes the node_exporter textfile.
    "validator.report": Room(
        (*LEAVES, PACKED, "validator.trace", "validator.report"),
        frozenset({"jinja2", "markupsafe", "prometheus_client"}),
    ),
    # Transports: the node agent is imported to ship it (and run it, for local);
    # the packed encoding, to keep the JSON an agent printed as its facts' encoding.
    "validator.remote": Room(
        (ROOT, *LEAVES, PACKED, "validator.node", "validator.remote"),
        frozenset({"paramiko", "ansible_runner"}),
    ),
    "validator.certificate": Room(STORE),
    "validator.certified_network": Room(STORE),  # the certificate's HCA ports
    # Certificate keys: HMAC secrets and Ed25519 keys (cryptography, paramiko's own dependency).
    "validator.signing": Room(STORE, frozenset({"cryptography"})),
    "validator.store": Room(STORE),  # sqlite3 is the standard library's
    "validator.ansible_inventory": Room(STORE, frozenset({"ansible"})),  # ansible-core
    "validator.service.provision_service": Room(
        STORE, frozenset({"ansible", "ansible_runner", "yaml"})
    ),
    "validator.slurm": Room(STORE),  # Slurm's own commands, no library
    # Reaching nodes through Slurm jobs, kept in Slurm's folder: a transport (it ships
    # the agent as the remote room does) over Slurm's own commands and its spool.
    "validator.slurm.job_fanout": SLURM_TRANSPORT,
    "validator.slurm.batch_script": SLURM_TRANSPORT,
    # The stage across nodes as Slurm job steps: the remote room's runner over srun.
    "validator.slurm.cross_node_srun": SLURM_TRANSPORT,
    # Certify and drift through Slurm: which nodes, and how their results come back.
    "validator.slurm.plan_and_reach": SERVICE,
    # Which extra variables are secrets, and the private file they go to ansible-playbook in.
    "validator.extravars": Room(STORE),
    # Drift: facts of now against the certificate, with the judge's findings.
    "validator.drift": Room(
        (*LEAVES, "validator.trace", "validator.judge", "validator.certificate", "validator.drift")
    ),
    "validator.service.collect_and_judge": SERVICE,
    "validator.service": SERVICE,
    "validator.cli": Room(None, None, ui=True),
}

# (modules, the imports that break their room's rule; each a module or a package):
# why it is there, and what would end it.
KNOWN_BREAKS: dict[tuple[str, str], str] = {}


# ------------------------------------------------------------------ the checker


def _named(module: str) -> str:
    return ROOT if module == "validator" else module


def _under(module: str, prefix: str) -> bool:
    """Whether ``module`` is ``prefix`` or lies below it."""
    return module == prefix or module.startswith(prefix + ".")


def _known(module: str, imported: str) -> bool:
    return any(_under(module, holder) and _under(imported, target)
               for holder, target in KNOWN_BREAKS)  # fmt: skip


def room_of(module: str) -> str | None:
    """The ROOMS entry that holds ``module``: the longest that names it or a package above."""
    holders = [key for key in ROOMS if _under(module, key)]
    return max(holders, key=len) if holders else None


def imports_of(module: str, source: str, modules: frozenset[str], *, package: bool) -> set[str]:
    """Every module ``source`` imports, relative imports resolved.

    Args:
        module: the importing module's dotted name (``validator`` for the package itself).
        source: its text.
        modules: the project's modules and packages, to tell ``from pkg import submodule``
            from ``from pkg import name``.
        package: whether ``module`` is a package (an ``__init__.py``).

    Returns:
        Dotted names; the package ``validator`` itself as ``validator.__init__``.
    """
    here = module.split(".") if package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_named(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                found.add(submodule if submodule in modules else _named(origin))
    return found


def violations(
    module: str, source: str, modules: frozenset[str], *, package: bool = False
) -> dict[str, str]:
    """What ``module`` imports that its room does not allow: each import, with why.

    A module in no room is one violation, under its own name.
    """
    name = _named(module)
    key = room_of(name)
    if key is None:
        return {name: f"{name} is in no room: add it to ROOMS (and to DESIGN.md's rooms table)"}
    room = ROOMS[key]
    found: dict[str, str] = {}
    for imported in sorted(imports_of(module, source, modules, package=package)):
        top = imported.split(".")[0]
        if top == "validator":
            allowed = room.imports is None or any(_under(imported, entry) for entry in room.imports)
            forbidden = any(_under(imported, entry) for entry in room.forbid)
            if forbidden or not allowed:
                found[imported] = f"{name} imports {imported}, outside the {key} room's rules"
        elif top in STDLIB:
            continue
        elif top in UI:
            if not room.ui:
                found[imported] = (
                    f"{name} imports {imported}: click and rich only in validator/cli/"
                )
        elif room.libraries is not None and top not in room.libraries:
            found[imported] = f"{name} imports the library {imported}, not one of the {key} room's"
    return found


def _module_files() -> dict[str, tuple[Path, bool]]:
    files: dict[str, tuple[Path, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        files[".".join(parts)] = (path, package)
    return files


MODULE_FILES = _module_files()
MODULES = frozenset(MODULE_FILES) | {ROOT}


def _check(module: str) -> dict[str, str]:
    path, package = MODULE_FILES[module]
    return violations(module, path.read_text(encoding="utf-8"), MODULES, package=package)


# ------------------------------------------------------------------ the rules


@pytest.mark.parametrize("module", sorted(MODULE_FILES))
def test_module_imports_only_what_its_room_may(module: str) -> None:
    broken = [why for imported, why in _check(module).items()
              if not _known(_named(module), imported)]  # fmt: skip
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("module", sorted(MODULE_FILES))
def test_only_the_cli_imports_click_or_rich(module: str) -> None:
    path, package = MODULE_FILES[module]
    if _under(module, "validator.cli"):
        return
    source = path.read_text(encoding="utf-8")
    ui = [
        name
        for name in imports_of(module, source, MODULES, package=package)
        if name.split(".")[0] in UI
    ]
    assert not ui, f"{module} imports {', '.join(sorted(ui))}: only validator/cli/ may"


@pytest.mark.parametrize(
    ("holder", "target"),
    [
        pytest.param(holder, target, marks=pytest.mark.xfail(strict=True, reason=reason))
        for (holder, target), reason in KNOWN_BREAKS.items()
    ],
)
def test_known_break(holder: str, target: str) -> None:
    breaking = [
        f"{module} imports {imported}"
        for module, (path, package) in MODULE_FILES.items()
        if _under(_named(module), holder)
        for imported in imports_of(
            module, path.read_text(encoding="utf-8"), MODULES, package=package
        )
        if _under(imported, target)
    ]
    assert not breaking, "; ".join(sorted(breaking))


def test_every_room_names_code_that_exists() -> None:
    stale = [key for key in ROOMS if not any(_under(m, key) for m in MODULES)]
    assert not stale, f"ROOMS entries with no module: {stale}"


# ------------------------------------------------------------------ the checker, checked


def test_click_in_the_judge_is_reported() -> None:
    found = violations("validator.judge.synthetic", "import click\n", MODULES)
    assert found == {
        "click": "validator.judge.synthetic imports click: click and rich only in validator/cli/"
    }


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("validator.report.synthetic", "from rich.console import Console\n", "rich.console"),
        ("validator.node.synthetic", "import pynvml\n", "library pynvml"),
        ("validator.node.synthetic", "from validator import cli\n", "validator.cli,"),
        ("validator.node.synthetic", "from validator import __version__\n", "__init__,"),
        ("validator.judge.checks.synthetic", "from ...report import html\n", "report.html,"),
        ("validator.judge.synthetic", "from . import fleet\nimport jinja2\n", "library jinja2"),
        ("validator.model", "from validator.error_tree import ExitCode\n", "validator.error_tree,"),
        ("validator.service.synthetic", "import validator.cli.main\n", "validator.cli.main,"),
        ("validator.remote.synthetic", "from validator.store import Store\n", "store,"),
        ("validator.report.synthetic", "if TYPE_CHECKING:\n    import click\n", "click"),
        ("validator.newroom", "import json\n", "in no room"),
    ],
)
def test_a_broken_rule_is_reported(module: str, source: str, expected: str) -> None:
    found = list(violations(module, source, MODULES).values())
    assert len(found) == 1, found
    assert expected in found[0]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("validator.node.nvml", "import pynvml\n"),
        ("validator.judge.synthetic", "from . import fleet\nfrom validator.trace import x\n"),
        ("validator.cli.synthetic", "import click\nfrom validator.store import Store\n"),
        ("validator.service.synthetic", "from validator.store import Store\nimport json\n"),
        ("validator.remote.synthetic", "from validator import __version__\nimport paramiko\n"),
    ],
)
def test_what_a_room_allows_is_not_reported(module: str, source: str) -> None:
    assert violations(module, source, MODULES) == {}
