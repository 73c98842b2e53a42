"""Algorithms whose `update` does what a researcher's buggy one might (tests/integration/
test_untrained.py): none of their runs may end Succeeded."""

from __future__ import annotations

import os
import sys
import time

import torch

from surreal.algorithms.api import OnPolicy
from surreal.algorithms.sac import SAC


class NanStats(OnPolicy):
    name = "nan-stats"

    def update(self, net, optimizer, batch, cfg, reduce):  # type: ignore[no-untyped-def]
        return {"loss": float("nan")}


class ExitsZero(SAC):
    name = "exits-zero"

    def update(self, nets, batch, cfg):  # type: ignore[no-untyped-def]
        sys.exit(0)


class HardExit(OnPolicy):
    name = "hard-exit"

    def update(self, net, optimizer, batch, cfg, reduce):  # type: ignore[no-untyped-def]
        os._exit(0)


class VectorStat(OnPolicy):
    name = "vector-stat"

    def update(self, net, optimizer, batch, cfg, reduce):  # type: ignore[no-untyped-def]
        return {"loss": torch.zeros(3)}


class Sleeper(OnPolicy):
    name = "sleeper"

    def update(self, net, optimizer, batch, cfg, reduce):  # type: ignore[no-untyped-def]
        while True:
            time.sleep(3600)
