"""A learner's device (PPO's and SAC's): chosen by `device`, implied by --gpu, checked before a local
run, and checkpoints that load on either device. The CUDA tests run where torch sees a GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.algorithms.sac import SAC, SACConfig
from surreal.protocol.types import Fragment
from surreal.runtime.device import resolve_device
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.offpolicy.learner import Learner as OffPolicyLearner
from surreal.runtime.offpolicy.shard import fields as replay_fields
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.run import RunContext
from surreal.spec import SpecError, build_spec

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="torch sees no CUDA device here")
ENV = "Pendulum-v1"
CFG = dataclasses.replace(preset_for(ENV), envs_per_agent=2, fragment_length=16, steps_per_update=64,
                          minibatch_size=32, epochs=2, checkpoint_every=1)  # fmt: skip


def test_auto_is_cuda_when_torch_sees_a_gpu_and_the_cpu_otherwise():
    assert resolve_device("auto").type == ("cuda" if CUDA else "cpu")
    assert resolve_device("cpu").type == "cpu"


def test_each_learner_rank_trains_on_its_own_gpu_where_there_are_several(monkeypatch):
    """A pod given `--gpu 4` for 4 ranks: rank r takes cuda:r (modulo the devices seen); a device
    named by its index stays that one, and with one GPU every rank shares it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert [resolve_device("auto", r) for r in range(5)] == [
        torch.device("cuda", i) for i in (0, 1, 2, 3, 0)]  # fmt: skip
    assert resolve_device("cuda", 2) == torch.device("cuda", 2)
    assert resolve_device("cuda:1", 3) == torch.device("cuda", 1)
    assert resolve_device("cpu", 3) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("auto", 3) == torch.device("cuda")


@pytest.mark.skipif(CUDA, reason="needs a machine without a GPU")
def test_asking_for_cuda_without_one_fails_saying_why():
    with pytest.raises(ValueError, match="device=cuda but torch .* sees no GPU"):
        resolve_device("cuda")
    with pytest.raises(SpecError, match="sees no GPU"):  # refused before anything is created
        build_spec("x", flags={"algo": "ppo"}, overrides={"device": "cuda"})


def test_device_names_are_validated():
    for bad in ("gpu", "cuda:x", "tpu", ""):
        with pytest.raises(SpecError, match="ppo.device must be auto, cpu, cuda or cuda:N"):
            build_spec("x", flags={"algo": "ppo"}, overrides={"device": bad})


def test_gpu_on_the_cluster_means_the_learner_trains_on_cuda():
    spec = build_spec("x", flags={"algo": "ppo", "backend": "kube", "gpu": 1})
    assert spec.config.device == "cuda"
    assert build_spec("x", flags={"algo": "ppo", "backend": "kube"}).config.device == "auto"
    pinned = build_spec("x", flags={"algo": "ppo", "backend": "kube", "gpu": 1}, overrides={"device": "cpu"})
    assert pinned.config.device == "cpu"  # asked for explicitly


def _trained(device: str, exp_dir=None) -> tuple[Learner, Actor]:
    learner = Learner(PPO(), dataclasses.replace(CFG, device=device), spaces_for(ENV), 10_000, seed=4,
                         exp_dir=exp_dir)  # fmt: skip
    actor = Actor(CFG, ENV, num_envs=2, seed=5)
    for _ in range(2):
        actor.set_params(learner.params())
        for _ in range(4):
            learner.add_fragment(Fragment("a", learner.counters.version, actor.collect()))
            while learner.ready():
                assert learner.update()
    return learner, actor


def _tensors(value) -> list[torch.Tensor]:
    """Every tensor in a loaded checkpoint's dicts and lists."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    return [t for v in items for t in _tensors(v)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_checkpoints_hold_cpu_tensors_whatever_the_device(tmp_path, device):
    learner, _ = _trained(device, tmp_path)
    learner.save()
    state = torch.load(tmp_path / "checkpoints" / "latest.pt", weights_only=True)  # no map_location
    assert _tensors(state["model"]) and _tensors(state["optimizer"]["state"])
    assert all(t.device.type == "cpu" for t in _tensors(state))


@needs_cuda
def test_the_learner_trains_on_cuda_as_on_the_cpu():
    # One minibatch per epoch: the shuffle (drawn on each device's own generator) cannot matter.
    cfg = dataclasses.replace(CFG, minibatch_size=64)
    cpu, gpu = (Learner(PPO(), dataclasses.replace(cfg, device=d), spaces_for(ENV), 10_000, seed=4)
                for d in ("cpu", "cuda"))  # fmt: skip
    actor = Actor(cfg, ENV, num_envs=2, seed=5)
    actor.set_params(cpu.params())
    fragments = [actor.collect() for _ in range(2)]
    for learner in (cpu, gpu):
        for f in fragments:
            learner.add_fragment(Fragment("a", 0, f))
        assert learner.update()
    assert all(p.device.type == "cuda" for p in gpu.net.parameters())
    got, want = gpu.params().weights, cpu.params().weights
    for k, w in want.items():
        assert isinstance(got[k], np.ndarray)
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)


@needs_cuda
@pytest.mark.parametrize(("saved_on", "loaded_on"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_checkpoints_load_across_devices(tmp_path, saved_on, loaded_on):
    learner, actor = _trained(saved_on, tmp_path)
    learner.save()
    before = learner.params().weights
    resumed = Learner(PPO(), dataclasses.replace(CFG, device=loaded_on), spaces_for(ENV), 10_000,
                         exp_dir=tmp_path)  # fmt: skip
    assert all(p.device.type == loaded_on for p in resumed.net.parameters())
    for k, w in resumed.params().weights.items():
        np.testing.assert_array_equal(w, before[k])
    actor.set_params(resumed.params())
    for _ in range(4):
        resumed.add_fragment(Fragment("a", resumed.counters.version, actor.collect()))
    assert resumed.update()  # Adam's state came along to the new device


# --- SAC's learner (the off-policy runtime's): the same `device`, the same rules


def _sac_learner(device: str, exp_dir) -> OffPolicyLearner:
    cfg = SACConfig(hidden_sizes=(32, 32), batch_size=64, device=device)
    return OffPolicyLearner(SAC(), cfg, RunContext(ENV, 0, 10_000, 1, exp_dir, "127.0.0.1:1", "t"), None)


def _sac_rows(learner: OffPolicyLearner, seed: int) -> dict[str, np.ndarray]:
    """A replay sample of random transitions in the shard's fields (actions inside [-1, 1])."""
    rng = np.random.default_rng(seed)
    n = learner.cfg.batch_size
    return {name: (rng.random((n, *shape)) < 0.1 if dtype.kind == "b" else rng.uniform(-1, 1, (n, *shape)))
            .astype(dtype) for name, (dtype, shape) in replay_fields(learner.spaces).items()}  # fmt: skip


def test_sac_given_gpus_trains_on_cuda_and_takes_the_device_names_ppo_takes(tmp_path):
    flags = {"algo": "sac", "env": ENV}
    assert build_spec("x", flags={**flags, "backend": "kube", "gpu": 1}).config.device == "cuda"
    assert build_spec("x", flags=flags).config.device == "auto"
    for bad in ("gpu", "cuda:x", ""):
        with pytest.raises(SpecError, match="sac.device must be auto, cpu, cuda or cuda:N"):
            build_spec("x", flags=flags, overrides={"device": bad})
    learner = _sac_learner("auto", tmp_path)
    try:
        assert learner.device.type == ("cuda" if CUDA else "cpu")
        assert next(learner.nets.parameters()).device == learner.device
    finally:
        learner.close()


@pytest.fixture
def same_noise(monkeypatch):
    """The policy's Gaussian noise drawn on the CPU and moved, from the generator this returns: a
    learner on CUDA draws what one on the CPU draws when each update starts from the same seed."""
    generator, randn_like = torch.Generator(), torch.randn_like

    def drawn_on_the_cpu(t: torch.Tensor, **kwargs) -> torch.Tensor:
        if kwargs:
            return randn_like(t, **kwargs)
        return torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device)

    monkeypatch.setattr(torch, "randn_like", drawn_on_the_cpu)
    return generator


@needs_cuda
def test_the_sac_learner_trains_on_cuda_as_on_the_cpu(tmp_path, same_noise):
    """The same weights, batch and noise: the first update's statistics agree closely; after three
    updates nearly every weight does (Adam's first steps are about lr x the gradient's sign, so a
    gradient within rounding of zero may step the other way: at most 6 x lr apart)."""
    cpu, gpu = (_sac_learner(d, tmp_path / d) for d in ("cpu", "cuda"))
    try:
        assert all(p.device.type == "cuda" for p in gpu.nets.parameters())
        for i in range(3):
            rows = _sac_rows(cpu, i)
            for learner in (cpu, gpu):
                same_noise.manual_seed(i)
                learner.train_on(rows)
            if i == 0:
                want, got = cpu.last_stats, gpu.last_stats
                for k, w in want.items():
                    np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)
        got, want = gpu.params().weights, cpu.params().weights
        for k, w in want.items():
            close = np.abs(got[k] - w) <= 1e-5 + 1e-4 * np.abs(w)
            assert close.mean() >= 0.999 and np.abs(got[k] - w).max() <= 6 * cpu.cfg.learning_rate, k
    finally:
        cpu.close()
        gpu.close()


@needs_cuda
@pytest.mark.parametrize(("saved_on", "loaded_on"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_sac_checkpoints_load_across_devices(tmp_path, saved_on, loaded_on):
    learner = _sac_learner(saved_on, tmp_path)
    learner.train_on(_sac_rows(learner, 0))
    learner.save()
    before = learner.params().weights
    learner.close()
    saved = torch.load(tmp_path / "checkpoints" / "latest.pt", weights_only=True)  # no map_location
    assert all(t.device.type == "cpu" for t in _tensors(saved))
    resumed = _sac_learner(loaded_on, tmp_path)
    try:
        assert all(p.device.type == loaded_on for p in resumed.nets.parameters())
        for k, w in resumed.params().weights.items():
            np.testing.assert_array_equal(w, before[k])
        resumed.train_on(_sac_rows(resumed, 1))  # Adam's state came along to the new device
        assert all(np.isfinite(v) for v in resumed.last_stats.values())
    finally:
        resumed.close()
