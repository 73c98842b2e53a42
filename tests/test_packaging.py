"""The package layout and the layer rules stay as designed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER_DIRS = {"surreal": "surreal", "protocol": "surreal.protocol",
              "orchestrator": "surreal.orchestrator", "provisioner": "surreal.provisioner",
              "algorithms": "surreal.algorithms"}  # fmt: skip


def test_every_package_folder_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for folder, package in LAYER_DIRS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found == listed


def test_layer_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is not installed"
    script = ROOT / "scripts" / "lint-imports.sh"
    env = {**os.environ, "LINT_IMPORTS": lint_imports}
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
