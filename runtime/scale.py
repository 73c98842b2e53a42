"""The agent count `surreal scale` hands a running learner: desired state in a file beside its
status.json, read by the learner (and by `surreal status`). Light on purpose: the CLI imports it."""

from __future__ import annotations

import functools
import json
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from surreal.protocol.ratelimit import RejectionLog

log = logging.getLogger(__name__)

# `surreal scale NAME --agents N` reaches a running learner through this file in its experiment
# directory (beside status.json): JSON {"agents": N}, written atomically (a temporary file in the
# same folder, then os.replace) by the launcher; missing until the first scale, and then the
# spec's count holds. The learner checks it about once a second and at start (a learner restarted
# after a scale keeps the scaled count).
SCALE_FILE = "scale.json"
MAX_SCALE_BYTES = 4096  # a longer file is not one the launcher wrote: it is refused unread
MAX_SCALE_AGENTS = 1_000_000  # beyond this a count is refused (it would size hand-outs absurdly)


@functools.cache
def _rejections() -> RejectionLog:
    """Whoever can write the experiment directory can write this file: a bad one is logged once,
    then summarized at a bounded rate, and ignored. (Made on first use: the protocol package it
    lives in loads grpc, which `surreal status` has no use for.)"""
    from surreal.protocol.ratelimit import RejectionLog

    return RejectionLog(log, "scale file", interval=60.0)


def read_scale(exp_dir: Path | str) -> int | None:
    """The agent count `surreal scale` asked for (`exp_dir/SCALE_FILE`), or None when there is
    none: the file is missing, or it is not a regular file of JSON {"agents": N} with N an integer
    in [1, MAX_SCALE_AGENTS] (then the problem is logged at a bounded rate). Never raises, and
    never blocks: a FIFO or a device in its place is refused unread."""
    agents, problem = _read_scale(Path(exp_dir) / SCALE_FILE)
    if problem is not None:
        _rejections().note(SCALE_FILE, "invalid", f"{problem}; the agent count is left as it is")
    return agents


def _read_scale(path: Path) -> tuple[int | None, str | None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"cannot open it: {e.strerror or e}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "not a regular file"
        data = os.read(fd, MAX_SCALE_BYTES + 1)
    except OSError as e:
        return None, f"cannot read it: {e.strerror or e}"
    finally:
        os.close(fd)
    if len(data) > MAX_SCALE_BYTES:
        return None, f"longer than {MAX_SCALE_BYTES} bytes"
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "not JSON"
    agents = doc.get("agents") if isinstance(doc, dict) else None
    if not isinstance(agents, int) or isinstance(agents, bool):
        return None, 'not {"agents": <integer>}'
    if not 1 <= agents <= MAX_SCALE_AGENTS:
        return None, f"agents must be in [1, {MAX_SCALE_AGENTS}], got {agents}"
    return agents, None
