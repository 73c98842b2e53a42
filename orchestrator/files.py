"""Files that several processes read while one writes them: written atomically, read with one
line naming what is wrong when they are not what surreal wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from surreal.orchestrator.launcher import CorruptFile


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Replace `path` so readers see either the old file or the new one, never a torn one; with
    `mode` (0o600 for what holds a token), the file never exists with other permissions."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if mode is not None:
        tmp.touch(mode=mode)
        tmp.chmod(mode)  # touch's mode is masked by the umask and ignored for an existing file
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any, mode: int | None = None) -> None:
    """Write JSON so readers see either the old file or the new one, never a torn one."""
    write_atomic(path, json.dumps(data, indent=2) + "\n", mode)


def read_json(path: Path, *, required: bool = False) -> dict[str, Any] | None:
    """The JSON object in `path`: None when it does not exist (unless `required`), CorruptFile
    when it cannot be read, is not UTF-8 JSON, or holds something other than an object."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise CorruptFile(path, "missing") from None
        return None
    except OSError as exc:
        raise CorruptFile(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorruptFile(path, "corrupt: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        at = f"{exc.msg}: line {exc.lineno}, column {exc.colno}"
        what = "empty" if not raw.strip() else f"not JSON ({at})"
        raise CorruptFile(path, f"corrupt: {what}") from None
    except RecursionError:
        raise CorruptFile(path, "corrupt: nested too deeply") from None
    if not isinstance(data, dict):
        raise CorruptFile(path, f"corrupt: a JSON {type(data).__name__}, not an object")
    return data
