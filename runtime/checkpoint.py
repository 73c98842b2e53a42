"""Atomic files: a learner killed at any instant leaves the old or the new file, never half. And
the checkpoint's envelope, the part every learner (PPO's, ES's) writes the same way."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, TypeVar

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


def on_cpu(value: Any) -> Any:
    """`value` (tensors in dicts, lists and tuples, as state_dict()s hold them) with every tensor on
    the CPU; a tensor there already is not copied."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(on_cpu(v) for v in value)
    return value


def load_checkpoint(directory: Path) -> dict[str, Any] | None:
    """The last saved state, or None if there is none."""
    path = directory / LATEST
    if not path.exists():
        return None
    return load_checkpoint_file(path)


def load_checkpoint_file(path: Path) -> dict[str, Any]:
    """The state saved in the checkpoint file `path` (tensors and plain values only: weights_only).
    A file it cannot read, or not a checkpoint, is a ValueError of one line that names it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on a stranger's pickle protocol
            saved = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or error_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a file that is not one
        raise ValueError(f"{path} is not a checkpoint surreal wrote ({error_line(exc)})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path} is not a checkpoint surreal wrote (it holds a {type(saved).__name__})")
    return saved


def error_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as the end of one error line: its type and the first sentence of its first
    line, cut to `limit` characters (torch's long advice, a library's multi-line report, left out)."""
    lines = str(exc).strip().splitlines()
    first = lines[0].split(". ")[0] if lines else ""
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


C = TypeVar("C")


@dataclasses.dataclass
class Envelope:
    """What a learner's checkpoint holds besides its algorithm's own state: the counters (a
    dataclass's fields), the recent training returns, the evaluation results, whether the
    checkpoint is clean (its process published no later version) and when it was written. One
    file holds both, the envelope's keys beside the state's; a key missing from an older file
    takes its default."""

    counters: dict[str, Any]
    train_returns: list[float] = dataclasses.field(default_factory=list)
    eval_return: float | None = None
    best_eval_return: float | None = None
    clean: bool = False
    saved_at: float = dataclasses.field(default_factory=time.time)  # wall clock
    eval_stderr: float | None = None  # the standard error of eval_return, over
    eval_episodes: int | None = None  # this many episodes

    KEYS = ("counters", "train_returns", "eval", "clean", "saved_at")

    def save(self, state: dict[str, Any], directory: Path) -> Path:
        """Write the algorithm's `state` inside this envelope as `directory/latest.pt`, its tensors
        on the CPU whatever device they trained on (the file loads anywhere, as it is)."""
        assert not set(self.KEYS) & state.keys(), "the state uses a key of the envelope"
        state = on_cpu(state)
        envelope = {
            "counters": self.counters,
            "train_returns": self.train_returns,
            "eval": [self.eval_return, self.best_eval_return, self.eval_stderr, self.eval_episodes],
            "clean": self.clean,
            "saved_at": self.saved_at,
        }
        _replace_atomically(directory / LATEST, lambda f: torch.save({**state, **envelope}, f))
        return directory / LATEST

    @classmethod
    def open(cls, saved: dict[str, Any]) -> tuple[Envelope, dict[str, Any]]:
        """A loaded checkpoint's envelope, and the algorithm's state (the other keys)."""
        eval_return, best, stderr, episodes = [*(saved.get("eval") or ()), None, None, None, None][:4]
        envelope = cls(
            counters=dict(saved["counters"]),
            train_returns=list(saved.get("train_returns", [])),
            eval_return=eval_return,
            best_eval_return=best,
            clean=bool(saved.get("clean")),
            eval_stderr=stderr,
            eval_episodes=episodes,
        )
        if saved.get("saved_at") is not None:
            envelope.saved_at = float(saved["saved_at"])
        return envelope, {k: v for k, v in saved.items() if k not in cls.KEYS}

    def resumed_counters(self, counters_type: type[C], *, checkpoint_every: int) -> C:
        """The counters to go on with: a field added since the checkpoint is defaulted, one
        removed since is dropped, and the version is `resumed_version` of the saved one."""
        known = {f.name for f in dataclasses.fields(counters_type)}  # type: ignore[arg-type]
        counters: Any = counters_type(**{k: v for k, v in self.counters.items() if k in known})
        counters.version = resumed_version(
            counters.version, clean=self.clean, checkpoint_every=checkpoint_every
        )
        return counters  # type: ignore[no-any-return]
