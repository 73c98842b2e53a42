"""The package layout and the layer rules stay as designed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYER_DIRS = {"surreal": "surreal", "protocol": "surreal.protocol",
              "orchestrator": "surreal.orchestrator", "provisioner": "surreal.provisioner",
              "algorithms": "surreal.algorithms", "runtime": "surreal.runtime"}  # fmt: skip


def test_every_package_folder_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for folder, package in LAYER_DIRS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found == listed


def _modules() -> set[str]:
    """Every module of the installed package, by its dotted name."""
    found = set()
    for folder, package in LAYER_DIRS.items():
        for py in (ROOT / folder).rglob("*.py"):
            rel = py.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if (
                folder == "surreal"
                and parts
                and parts[0] in ("protocol", "orchestrator", "provisioner", "algorithms", "runtime")
            ):
                continue
            found.add(".".join([package, *parts]))
    return found


def test_the_kubernetes_rule_covers_every_module() -> None:
    """Only orchestrator.kube and provisioner may import kubernetes: every other module of the
    package is a source of that contract (itself or a package above it), so a module added later
    cannot slip past it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    rule = next(c for c in contracts if c.get("forbidden_modules") == ["kubernetes"])
    allowed = ("surreal.orchestrator.kube", "surreal.provisioner")
    uncovered = sorted(
        m for m in _modules()
        if m not in ("surreal", "surreal.orchestrator")
        and not any(m == a or m.startswith(a + ".") for a in allowed)
        and not any(m == s or m.startswith(s + ".") for s in rule["source_modules"])
    )  # fmt: skip
    assert uncovered == []


def test_layer_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is not installed"
    argv = ["bash", str(ROOT / "scripts" / "staged.sh"), lint_imports,
            "--config", str(ROOT / "pyproject.toml"), "--no-cache"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.slow
def test_the_package_type_checks() -> None:
    """`make lint`'s mypy step, on the installed layout (the folders map to surreal.*)."""
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    assert mypy, "mypy is not installed"
    argv = ["bash", str(ROOT / "scripts" / "staged.sh"), mypy,
            "--config-file", str(ROOT / "pyproject.toml"), "--no-incremental", "-p", "surreal"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_two_test_modules_share_a_name() -> None:
    """The test folders are not packages: pytest imports each module by its file's name, and a
    second module of the same name fails collection of the whole suite (it did, in a fresh clone)."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
