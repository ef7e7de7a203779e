"""The node agent's promises: stdlib + pynvml only, and it runs on Python 3.9."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.stdlib_names import stdlib_module_names

STDLIB = stdlib_module_names()

REPO = Path(__file__).resolve().parent.parent.parent
NODE = REPO / "validator" / "node"
ALLOWED_PROJECT_MODULES = (
    "validator.model",
    "validator.error_tree",
    "validator.safe_text",
    "validator.files",
    "validator.fields",
    "validator.codec",
    "validator.limits",
    "validator.node",
)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(NODE.rglob("*.py")), ids=lambda p: str(p.relative_to(NODE)))
def test_node_imports_only_stdlib_pynvml_and_the_model(path: Path) -> None:
    for module in imported_modules(path):
        top = module.split(".")[0]
        if top == "validator":
            assert module.startswith(ALLOWED_PROJECT_MODULES), f"{path.name} imports {module}"
        elif top == "pynvml":
            assert path.name == "nvml.py", f"only nvml.py may import pynvml, not {path.name}"
        else:
            assert top in STDLIB, f"{path.name} imports non-stdlib {module}"


def python39() -> str | None:
    candidates = [
        shutil.which("python3.9"),
        *glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")),
    ]
    for candidate in candidates:
        if not candidate:
            continue
        done = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.stdout.strip() == "True":
            return candidate
    return None


def test_node_collects_on_python_39() -> None:
    interpreter = python39()
    if interpreter is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from validator.model import NodeFacts, from_dict, to_dict\n"
        "from validator.node.collect import collect\n"
        "from validator.node.sim.simulated_source import SimulatedSource\n"
        "facts = collect(SimulatedSource('gpu-fallen-off-bus'))\n"
        "assert from_dict(NodeFacts, json.loads(json.dumps(to_dict(facts)))) == facts\n"
        "print(len(facts.gpus), facts.gpus[6].status.value)\n"
    )
    done = subprocess.run(
        [interpreter, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8", "lost"]
