"""Perturbations named by seeds are the same in every process."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np

from surreal.runtime.es.noise import pair_seed, perturbation, perturbations, version_nonce

PROBE = (
    "import hashlib, json;"
    "from surreal.runtime.es.noise import pair_seed, perturbation, version_nonce;"
    "nonce = version_nonce(7, 3); seeds = [pair_seed(nonce, a, j) for a in (0, 1 << 20) for j in (0, 1)];"
    "print(json.dumps([seeds, hashlib.sha256(b''.join(perturbation(s, 1000).tobytes()"
    " for s in seeds)).hexdigest()]))"
)


def test_seeds_and_perturbations_are_identical_in_another_process():
    nonce = version_nonce(7, 3)
    seeds = [pair_seed(nonce, a, j) for a in (0, 1 << 20) for j in (0, 1)]
    digest = hashlib.sha256(b"".join(perturbation(s, 1000).tobytes() for s in seeds)).hexdigest()
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [seeds, digest]


def test_seeds_differ_by_version_agent_and_pair_and_fit_int64():
    seeds = {pair_seed(version_nonce(0, v), a, j) for v in range(5) for a in range(20) for j in range(3)}
    assert len(seeds) == 300
    assert all(0 <= s < 2**63 for s in seeds)
    assert version_nonce(0, 1) != version_nonce(1, 1)


def test_perturbation_is_standard_normal_float32():
    eps = perturbation(12345, 100_000)
    assert eps.dtype == np.float32 and eps.shape == (100_000,)
    assert abs(eps.mean()) < 0.02 and abs(eps.std() - 1) < 0.02
    np.testing.assert_array_equal(perturbations(np.array([12345, 6]), 100_000)[0], eps)
