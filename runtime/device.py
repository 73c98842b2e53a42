"""Which torch device a learner trains on (every algorithm's `device`: auto, cpu, cuda or cuda:N)."""

from __future__ import annotations

import re

DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
DEVICE_RULE = "must be auto, cpu, cuda or cuda:N"


def resolve_device(name: str, rank: int = 0):  # -> torch.device (torch imported here, not at spec time)
    """`name` as DEVICE_RE accepts it. "auto": a CUDA device when torch sees one, else
    the CPU. Of learner rank `rank`, "auto" and "cuda" mean its own GPU where there are several
    (rank modulo the devices torch sees: a pod given `--gpu N` for N ranks gives each rank one).
    "cuda" (or "cuda:N") when torch sees no such device raises ValueError saying why, instead of
    training elsewhere."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        device = torch.device("cuda", rank % torch.cuda.device_count())
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "built without CUDA" if torch.version.cuda is None else "no CUDA device visible"
            raise ValueError(f"device={name} but torch {torch.__version__} sees no GPU ({build}); "
                             "use device=auto or cpu, or a CUDA build of torch on a GPU machine")  # fmt: skip
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device={name} but torch sees {torch.cuda.device_count()} CUDA devices")
    return device
