"""`make install` puts the CPU build of torch in the venv as the Dockerfile does (PyTorch's CPU
index), and where that index cannot be reached, or will not serve the pin, the plain pin from pip's
configured indexes (a machine with only a package mirror). Run against a stand-in python that
records what make asks of it: no network, no venv built."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INDEX = "https://download.pytorch.org/whl/cpu"
FAKE = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
case "$*" in
  -c*urlopen*) exit "$PROBE_RC" ;;
  *--index-url*) exit "$INDEX_RC" ;;
esac
exit 0
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _install(tmp_path: Path, probe_rc: int, index_rc: int) -> list[str]:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(FAKE)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "calls"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH", "TORCH_INDEX", "MAKEFLAGS", "MAKELEVEL")}
    env.update(FAKE_LOG=str(log), PROBE_RC=str(probe_rc), INDEX_RC=str(index_rc))
    venv = f"VENV={tmp_path / 'venv'}"
    subprocess.run(["make", "-s", "-C", str(ROOT), "install", venv], env=env, check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    assert (tmp_path / "venv" / ".installed").exists()
    return [line for line in log.read_text().splitlines() if "torch" in line]


def test_the_cpu_index_when_it_answers(tmp_path: Path) -> None:
    probe, install = _install(tmp_path, probe_rc=0, index_rc=0)
    assert probe.startswith("-c") and f"{INDEX}/torch/" in probe
    assert install == f"-m pip install --quiet torch==2.13.0 --index-url {INDEX}"


@pytest.mark.parametrize(("probe_rc", "index_rc"), [(1, 0), (0, 1)])
def test_the_plain_pin_from_the_configured_indexes_otherwise(
    tmp_path: Path, probe_rc: int, index_rc: int
) -> None:
    calls = _install(tmp_path, probe_rc, index_rc)
    assert calls[-1] == "-m pip install --quiet torch==2.13.0"
    assert len(calls) == (2 if probe_rc else 3)  # the index tried only when it answered
