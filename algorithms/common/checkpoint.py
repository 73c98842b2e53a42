"""Atomic files: a learner killed at any instant leaves the old or the new file, never half."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

LATEST = "latest.pt"


def _replace_atomically(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(state: dict[str, Any], directory: Path) -> Path:
    """Write `state` (tensors and plain Python values only) as `directory/latest.pt`."""
    path = directory / LATEST
    _replace_atomically(path, lambda f: torch.save(state, f))
    return path


def load_checkpoint(directory: Path) -> dict[str, Any] | None:
    """The last saved state, or None if there is none."""
    path = directory / LATEST
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` with `data` as JSON, atomically (readers never see a partial file)."""
    payload = json.dumps(data, indent=1).encode()
    _replace_atomically(path, lambda f: f.write(payload))


def resumed_version(saved: int, *, clean: bool, checkpoint_every: int) -> int:
    """The version a learner restored from a checkpoint of version `saved` goes on from, so that a
    version number never names two sets of weights (workers take "unchanged" from the number).

    A clean checkpoint (written on SIGTERM or at the end) is the last version its process
    published: the same number. Otherwise the process may have published versions after it: at
    most `checkpoint_every - 1` updates (the `checkpoint_every`-th saves: checkpoint_due) and the
    announcement of the end (serving.py), so the restored learner goes on past all of them."""
    return saved if clean else saved + checkpoint_every + 1
