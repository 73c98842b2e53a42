"""Long scheduler time slices for local components (Linux, EEVDF scheduler of kernel >= 6.12).

With the kernel's default slice (~1.4 ms) an actor and the learner sharing a core swap hundreds
of times per PPO update, each swap starting the other on cold caches: ~20-40% more CPU per env step
(2 cores, HalfCheetah; docs/decisions.md). Long slices (`sched_setattr`'s `sched_runtime`) let each
run up to `SURREAL_SCHED_SLICE_MS` (default 100, the kernel's maximum; 0: the kernel's default)
before the other gets the core, without changing CPU shares. Older kernels ignore the request.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys
from collections.abc import Callable

SLICE_ENV = "SURREAL_SCHED_SLICE_MS"
DEFAULT_SLICE_MS = 100.0

# struct sched_attr (include/uapi/linux/sched/types.h), SCHED_ATTR_SIZE_VER1: size, policy, flags,
# nice, priority, runtime, deadline, period, util_min, util_max.
_ATTR = struct.Struct("IIQiIQQQII")
_SCHED_FLAG_KEEP_POLICY = 0x08  # keep SCHED_OTHER / BATCH / IDLE as the user chose
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # (sched_setattr, sched_getattr)


def slice_ms_from_env() -> float:
    """The requested slice in ms (0 = the kernel's default); ValueError names a bad value."""
    raw = os.environ.get(SLICE_ENV, "").strip()
    if not raw:
        return DEFAULT_SLICE_MS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{SLICE_ENV} must be a number of milliseconds, got {raw!r}") from None
    if not 0 <= value <= 100:
        raise ValueError(f"{SLICE_ENV} must be between 0 and 100 ms, got {raw!r}")
    return value


def slice_request(slice_ms: float) -> Callable[[], None] | None:
    """A function for a forked child (e.g. in a preexec hook) that asks for `slice_ms` slices for
    the calling process and every thread it starts; None when off or unsupported. Everything that
    allocates is done here, in the parent; failures in the child are ignored (best effort)."""
    syscalls = _SYSCALLS.get(platform.machine())
    if slice_ms <= 0 or not sys.platform.startswith("linux") or syscalls is None:
        return None
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # the child inherits it; sched_setattr resets it
    attr = ctypes.create_string_buffer(
        _ATTR.pack(_ATTR.size, 0, _SCHED_FLAG_KEEP_POLICY, nice, 0, int(slice_ms * 1e6), 0, 0, 0, 0)
    )
    setattr_nr = syscalls[0]

    def request() -> None:
        syscall(setattr_nr, 0, attr, 0)

    return request


def current_slice_ns(pid: int) -> int | None:
    """The time slice the kernel reports for `pid` (None where it cannot be read)."""
    syscalls = _SYSCALLS.get(platform.machine())
    if not sys.platform.startswith("linux") or syscalls is None:
        return None
    buf = ctypes.create_string_buffer(_ATTR.size)
    if ctypes.CDLL(None, use_errno=True).syscall(syscalls[1], pid, buf, _ATTR.size, 0) != 0:
        return None
    return int(_ATTR.unpack(buf.raw)[5])
