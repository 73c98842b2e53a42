"""Actor -> Learner without networking: fragments, staleness, updates, checkpoints."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.protocol.types import EvalReport, Fragment, Params
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.normalization import batch_moments
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.fragment import check_fragment, experience_schema
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.run import extras_done, extras_env_steps

CFG = dataclasses.replace(
    preset_for("Pendulum-v1"), envs_per_agent=2, fragment_length=16, steps_per_update=64,
    minibatch_size=32, epochs=2, checkpoint_every=2,
)  # fmt: skip
ENV = "Pendulum-v1"


def make(total_steps=10_000, exp_dir=None, cfg=CFG):
    learner = Learner(PPO(), cfg, spaces_for(ENV), total_steps, seed=1, exp_dir=exp_dir)
    actor = Actor(cfg, ENV, num_envs=2, seed=3)
    actor.set_params(learner.params())
    return learner, actor


def fragment(actor, version=None):
    return Fragment("actor-0", actor.version if version is None else version, actor.collect())


def test_fragment_matches_the_wire_schema_and_is_consistent():
    _, actor = make()
    tensors = actor.collect()
    schema = experience_schema(actor.spaces)
    assert set(tensors) == set(schema)
    for name, spec in schema.items():
        spec.check(name, tensors[name])
    assert tensors["obs"].shape == (17, 2, 3)
    assert check_fragment(tensors, actor.spaces, CFG) is None


def test_truncations_are_reported_with_their_final_observation():
    cfg = dataclasses.replace(CFG, fragment_length=250, norm_obs=False)
    _, actor = make(cfg=cfg)
    tensors = actor.collect()  # Pendulum truncates at 200 steps
    np.testing.assert_array_equal(tensors["trunc_index"], [[199, 0], [199, 1]])
    assert tensors["truncated"].sum() == 2 and not tensors["terminated"].any()
    assert len(tensors["episode_returns"]) == 2
    np.testing.assert_array_equal(tensors["episode_lengths"], [200, 200])
    # The next row is the reset observation, not the final one.
    assert not np.allclose(tensors["trunc_obs"][0], tensors["obs"][200, 0])


def test_actor_normalizes_with_the_published_statistics():
    learner, actor = make()
    learner.obs_rms.merge(batch_moments(np.random.default_rng(0).normal(5.0, 3.0, size=(1000, 3))))
    actor.set_params(learner.params())
    raw = actor._obs.copy()
    tensors = actor.collect()
    expected = np.clip((raw - learner.obs_rms.mean) / np.sqrt(learner.obs_rms.var + 1e-8), -10, 10)
    np.testing.assert_allclose(tensors["obs"][0], expected, rtol=1e-5, atol=1e-6)
    # ...and reports the raw observations' moments for the learner to merge.
    assert tensors["obs_count"][0] == 16 * 2
    assert abs(tensors["obs_mean"]).max() < 10


def test_updates_bump_version_and_publish_progress():
    learner, actor = make(total_steps=128)
    for _ in range(2):
        assert learner.add_fragment(fragment(actor))
    assert learner.ready()
    stats = learner.update()
    assert stats["grad_steps"] == 4  # 2 epochs x 2 minibatches of 32
    assert np.isfinite([stats[k] for k in ("policy_loss", "value_loss", "approx_kl")]).all()
    params = learner.params()
    assert params.version == 1
    assert extras_env_steps(params.extras) == 64 and not extras_done(params.extras)
    assert learner.obs_rms.count == 64
    actor.set_params(params)
    for _ in range(2):
        learner.add_fragment(fragment(actor))
    learner.update()
    assert learner.done and extras_done(learner.params().extras)
    assert not learner.add_fragment(fragment(actor))  # nothing is taken after the end


def test_weights_change_by_an_update_and_actor_follows():
    learner, actor = make()
    before = {k: v.copy() for k, v in learner.params().weights.items()}
    learner.add_fragment(fragment(actor))
    learner.add_fragment(fragment(actor))
    learner.update()
    after = learner.params().weights
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    actor.set_params(learner.params())
    # policy.0, policy.2, policy.4: the Linear layers of the nn.Sequential (activations between).
    assert len(actor.policy.layers) == 3
    for i, (w, b) in enumerate(actor.policy.layers):
        np.testing.assert_array_equal(w, after[f"policy.{2 * i}.weight"])
        np.testing.assert_array_equal(b, after[f"policy.{2 * i}.bias"])
    np.testing.assert_allclose(actor.policy.std, np.exp(after["log_std"]), rtol=1e-6)


def test_stale_fragments_are_dropped_and_counted_but_their_steps_count():
    learner, actor = make()
    learner.counters.version = CFG.max_policy_lag + 5
    assert not learner.add_fragment(fragment(actor, version=0))
    assert learner.counters.dropped_fragments == 1
    assert learner.counters.env_steps == 32
    assert learner.add_fragment(fragment(actor, version=5))  # lag == max_policy_lag: kept


def test_inconsistent_fragment_is_refused():
    learner, actor = make()
    tensors = dict(actor.collect())
    tensors["logprobs"] = tensors["logprobs"][:-1]
    assert not learner.add_fragment(Fragment("bad", 0, tensors))
    assert learner.counters.rejected["malformed"] == 1 and learner.counters.env_steps == 0


def test_truncated_steps_bootstrap_from_trunc_obs_in_the_batch():
    cfg = dataclasses.replace(CFG, norm_reward=False, gamma=0.5, gae_lambda=1.0)
    learner, _ = make(cfg=cfg)
    learner.net.value = lambda obs: obs[:, 0]  # value = first observation feature
    f = {
        "obs": np.array([[[1, 0, 0]], [[2, 0, 0]], [[3, 0, 0]]], np.float32),
        "actions": np.zeros((2, 1, 1), np.float32),
        "logprobs": np.zeros((2, 1), np.float32),
        "rewards": np.array([[1.0], [1.0]], np.float32),
        "terminated": np.zeros((2, 1), bool),
        "truncated": np.array([[True], [False]]),
        "trunc_index": np.array([[0, 0]]),
        "trunc_obs": np.array([[10, 0, 0]], np.float32),
    }
    data, lags = learner._prepare([(f, 0, "a"), (f, 1, "b")])
    assert lags == [0, 1]
    # step 0: 1 + .5*10 = 6 (final obs), step 1: 1 + .5*3 = 2.5 (bootstrap row)
    np.testing.assert_allclose(data.returns.numpy(), [6.0, 2.5, 6.0, 2.5])
    np.testing.assert_allclose(data.values.numpy(), [1.0, 2.0, 1.0, 2.0])


def test_checkpoint_resume_restores_counters_weights_and_statistics(tmp_path):
    learner, actor = make(exp_dir=tmp_path)
    for _ in range(4):
        learner.add_fragment(fragment(actor))
        if learner.ready():
            learner.update()
            actor.set_params(learner.params())
    learner.record_eval(EvalReport(2, 128, -900.0, 10.0, 10, 200.0))
    learner.save()
    learner.close()
    saved = learner.params()
    resumed = Learner(PPO(), CFG, spaces_for(ENV), 10_000, seed=99, exp_dir=tmp_path)
    c = resumed.counters
    assert (c.env_steps, c.updates, c.episodes) == (128, 2, learner.counters.episodes)
    # The version goes on past any the dead learner may have published (test_version_rule.py).
    assert c.version > 2
    for k, w in resumed.params().weights.items():
        np.testing.assert_array_equal(w, saved.weights[k])
    np.testing.assert_array_equal(resumed.obs_rms.mean, learner.obs_rms.mean)
    assert resumed.ret_rms.count == learner.ret_rms.count
    assert resumed.optimizer.state_dict()["state"][0]["step"] == torch.tensor(8.0)  # 2 updates x 4
    assert resumed.best_eval_return == -900.0
    resumed.close()


def test_a_clean_checkpoint_resumes_at_exactly_its_version(tmp_path):
    """What a learner saves on SIGTERM: nothing was published after it, so the restarted learner
    serves the same version number with the same weights (0 updates lost, no jump)."""
    learner, actor = make(exp_dir=tmp_path)
    for _ in range(6):
        learner.add_fragment(fragment(actor))
        if learner.ready():
            learner.update()
    assert learner.counters.updates == 3
    learner.save(clean=True)
    learner.close()
    saved = learner.params()
    resumed = Learner(PPO(), CFG, spaces_for(ENV), 10_000, seed=99, exp_dir=tmp_path)
    assert (resumed.counters.version, resumed.counters.updates) == (saved.version, 3)
    assert resumed.checkpoint_version == saved.version
    for k, w in resumed.params().weights.items():
        np.testing.assert_array_equal(w, saved.weights[k])
    assert 0.0 <= resumed.status()["checkpoint_age_seconds"] < 60.0
    resumed.close()


def test_checkpoints_also_come_by_time(tmp_path, monkeypatch):
    """checkpoint_seconds bounds what a SIGKILL loses, however rare the count-based ones are."""
    clock = [1000.0]
    monkeypatch.setattr("surreal.runtime.progress.time.monotonic", lambda: clock[0])
    cfg = dataclasses.replace(CFG, checkpoint_every=1000, checkpoint_seconds=30.0)
    learner, actor = make(exp_dir=tmp_path, cfg=cfg)
    assert learner.status()["checkpoint_version"] == 0  # the one from the start
    for minutes in range(4):
        learner.add_fragment(fragment(actor))
        learner.add_fragment(fragment(actor))
        clock[0] += 31.0 if minutes >= 2 else 1.0
        learner.update()
    # updates 1 and 2 came within 30 s of the start's; 3 and 4 each 31 s after the last checkpoint
    assert learner.checkpoint_version == 4
    assert torch.load(tmp_path / "checkpoints" / "latest.pt")["counters"]["updates"] == 4
    learner.close()


def test_periodic_checkpoints_are_written(tmp_path):
    learner, actor = make(exp_dir=tmp_path)
    for _ in range(4):
        learner.add_fragment(fragment(actor))
        if learner.ready():
            learner.update()
    assert (tmp_path / "checkpoints" / "latest.pt").exists()  # checkpoint_every=2 updates
    assert list((tmp_path / "tb").iterdir())
    learner.close()


def test_status_has_the_contract_fields():
    learner, actor = make()
    learner.add_fragment(fragment(actor))
    status = learner.status(connected_actors=3)
    assert set(status) == {
        "env_steps", "updates", "policy_version", "episodes", "train_return", "eval_return",
        "best_eval_return", "eval_stderr", "eval_episodes", "steps_per_second", "elapsed_seconds",
        "dropped_fragments", "connected_actors", "done", "rejected_fragments", "skipped_updates",
        "checkpoint_version", "checkpoint_age_seconds", "update_seconds", "update_share",
        "actor_wait_share", "balance",
    }  # fmt: skip
    assert status["env_steps"] == 32 and status["connected_actors"] == 3
    json.dumps(status)


def test_the_learner_says_its_update_share():
    """The on-policy learner's time in updates is its busy time (runtime/progress.py's window)."""
    learner, actor = make()
    for _ in range(3):
        while not learner.ready():
            learner.add_fragment(fragment(actor))
        learner.update()
    share = learner.status()["update_share"]
    assert 0.0 < share <= 1.0 and learner.busy_seconds() == learner.update_seconds > 0


def test_final_evaluation_is_recognized_only_for_the_final_version():
    learner, actor = make(total_steps=32)
    learner.add_fragment(fragment(actor))
    learner.update()
    version = learner.counters.version
    learner.record_eval(EvalReport(version - 1, 0, 1.0, 0.0, 1, 1.0))
    assert not learner.final_evaluated
    learner.record_eval(EvalReport(version, 32, 2.0, 0.0, 1, 1.0))
    assert learner.final_evaluated and learner.status()["done"]
    assert learner.best_eval_return == 2.0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_actor_runs_discrete_and_continuous(env_id):
    cfg = dataclasses.replace(preset_for(env_id), fragment_length=8, envs_per_agent=2)
    learner = Learner(PPO(), cfg, spaces_for(env_id), 1000)
    actor = Actor(cfg, env_id, num_envs=2, seed=0)
    actor.set_params(learner.params())
    tensors = actor.collect()
    assert check_fragment(tensors, actor.spaces, cfg) is None
    assert tensors["actions"].dtype == (np.int64 if env_id == "CartPole-v1" else np.float32)


def test_an_actor_asks_for_parameters_only_when_its_credits_say_they_changed():
    from surreal.runtime.actor import serve
    from surreal.runtime.run import progress_extras

    learner, _ = make()
    actor = Actor(CFG, ENV, num_envs=2, seed=3)  # holds no parameters yet
    v0 = learner.params()
    done = Params(1, v0.weights, {**v0.extras, **progress_extras(10_000, True)})

    class Stream:
        def __init__(self):
            self.latest_version: int | None = None  # nothing said yet: the actor must ask
            self.sent: list[int] = []

        def send(self, version, tensors):
            self.sent.append(version)
            self.latest_version = 1 if len(self.sent) == 5 else 0  # a new version after 5

    class Client:
        def __init__(self):
            self.asked: list[int] = []

        def get_params(self, known):
            self.asked.append(known)
            return v0 if known < 0 else done

    stream, client = Stream(), Client()
    assert serve(client, stream, actor) == 0
    assert client.asked == [-1, 0]  # once at the start, once when the credits said version 1
    assert stream.sent == [0, 0, 0, 0, 0]


def test_an_idle_actor_says_its_idle_time_was_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    """An actor with nothing to do (no parameters yet, ES's pairs all handed out) polls with backoff,
    and its stream hears each sleep as waited (the actors' wait share)."""
    from fake_time import Clock

    from surreal.runtime import actor as actor_module
    from surreal.runtime.actor import idle_backoff, serve
    from surreal.runtime.run import progress_extras

    monkeypatch.setattr(actor_module, "time", Clock(0.0))
    done = Params(1, {}, progress_extras(10_000, True))

    class Core:
        version, calls = 0, 0

        def set_params(self, params):
            self.version = params.version

        def work(self, stream):
            self.calls += 1
            return self.calls > 3  # nothing to do three times

    core = Core()

    class Stream:
        waited = 0.0

        @property
        def latest_version(self):
            return 1 if core.calls > 3 else 0

        def note_wait(self, seconds):
            self.waited += seconds

    class Client:
        def get_params(self, known):
            return done if core.calls > 3 else None

    stream = Stream()
    assert serve(Client(), stream, core) == 0
    assert stream.waited == pytest.approx(sum(idle_backoff(i) for i in range(3)))


class SGDPPO(PPO):
    """PPO with an optimizer of its own: SGD, the value's parameters at a tenth of the lr."""

    def optimizer(self, params, cfg):
        policy = [p for p in params if p.ndim and p.shape[0] != 1]
        value = [p for p in params if not (p.ndim and p.shape[0] != 1)]
        return torch.optim.SGD([{"params": policy}, {"params": value, "lr": cfg.learning_rate / 10}],
                               lr=cfg.learning_rate, momentum=0.9)  # fmt: skip


def test_an_algorithms_own_optimizer_is_used_annealed_per_group_and_checkpointed(tmp_path):
    cfg = dataclasses.replace(CFG, anneal_lr=True)
    learner = Learner(SGDPPO(), cfg, spaces_for(ENV), 128, seed=1, exp_dir=tmp_path)
    actor = Actor(cfg, ENV, num_envs=2, seed=3)
    actor.set_params(learner.params())
    assert isinstance(learner.optimizer, torch.optim.SGD)
    for _ in range(2):  # two updates of 64 steps in a run of 128: the second at half the lr
        for _ in range(2):
            learner.add_fragment(fragment(actor))
        learner.update()
        actor.set_params(learner.params())
    assert [g["lr"] for g in learner.optimizer.param_groups] == pytest.approx(
        [cfg.learning_rate / 2, cfg.learning_rate / 20]
    )
    learner.save()
    learner.close()
    resumed = Learner(SGDPPO(), cfg, spaces_for(ENV), 128, seed=9, exp_dir=tmp_path)
    state = resumed.optimizer.state_dict()
    assert state["state"] and all("momentum_buffer" in s for s in state["state"].values())
    assert [g["initial_lr"] for g in state["param_groups"]] == pytest.approx(
        [cfg.learning_rate, cfg.learning_rate / 10]
    )
    resumed.close()


def test_an_optimizer_hook_that_returns_no_optimizer_fails_as_the_algorithms():
    from surreal.runtime.run import RoleFailed

    class Broken(PPO):
        def optimizer(self, params, cfg):
            return {"lr": 1.0}

    with pytest.raises(RoleFailed, match="its optimizer returned dict, not a torch.optim.Optimizer"):
        Learner(Broken(), CFG, spaces_for(ENV), 128, seed=1)


def test_a_network_of_the_algorithms_own_is_trained_run_by_actors_in_torch_and_loads(tmp_path, monkeypatch):
    """examples/ln_ppo.py's LayerNorm actor-critic (its `make`): the learner trains it, actors run
    its policy head in torch and send the log-probabilities the learner computes for their actions
    (what its importance ratio relies on), and its checkpoint is the policy load_policy runs."""
    from pathlib import Path

    from surreal.runtime.checkpoint import Envelope, load_checkpoint
    from surreal.runtime.envs.make import resolve_env
    from surreal.runtime.offpolicy.policy import TorchActor

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from examples.ln_ppo import LayerNormPPO

    algo = LayerNormPPO()
    learner = Learner(algo, CFG, spaces_for(ENV), 128, seed=1, exp_dir=tmp_path)
    assert any(isinstance(m, torch.nn.LayerNorm) for m in learner.net.modules())
    actor = Actor(CFG, ENV, num_envs=2, seed=3, algo=algo)
    for n in range(1, 3):
        actor.set_params(learner.params())
        assert isinstance(actor.policy.head, TorchActor)
        sent = [fragment(actor) for _ in range(2)]
        t = CFG.fragment_length
        for frag in sent:
            obs, actions = frag.tensors["obs"][:t], frag.tensors["actions"]
            rows = (torch.as_tensor(x.reshape(-1, x.shape[-1])) for x in (obs, actions))
            with torch.no_grad():
                logp = learner.net.evaluate(*rows)[0].numpy()
            np.testing.assert_allclose(logp, frag.tensors["logprobs"].reshape(-1), rtol=1e-4, atol=1e-4)
            learner.add_fragment(frag)
        learner.update()
        assert learner.counters.updates == n
    learner.save()
    weights = {k: v.clone() for k, v in learner.net.state_dict().items()}
    learner.close()

    _, state = Envelope.open(load_checkpoint(tmp_path / "checkpoints"))
    act = algo.checkpoint_policy(CFG, resolve_env(ENV), state, seed=0)
    assert act(np.zeros((3, 3), np.float32), True).shape == (3, 1)
    resumed = Learner(algo, CFG, spaces_for(ENV), 128, seed=9, exp_dir=tmp_path)
    assert all(torch.equal(v, weights[k]) for k, v in resumed.net.state_dict().items())
    resumed.close()


def test_a_make_hook_that_returns_no_module_fails_as_the_algorithms():
    from surreal.runtime.run import RoleFailed

    class Broken(PPO):
        def make(self, cfg, spaces):
            return [torch.nn.Linear(3, 1)]

    with pytest.raises(RoleFailed, match="its make returned list, not a torch.nn.Module"):
        Learner(Broken(), CFG, spaces_for(ENV), 128, seed=1)


@pytest.mark.parametrize(
    ("act", "said"),
    [(lambda a, logp: (a[:, None], logp), r"its policy act returned float32\[2, 1, 1\] and float32\[2\] "
      r"for 2 observations: float32\[2, 1\] and float32\[2\] expected"),
     (lambda a, logp: 5, "its policy act returned int, not \\(actions, log-probabilities\\)")],
    ids=["shape", "not-a-pair"],
)  # fmt: skip
def test_a_policy_hook_that_acts_wrong_fails_as_the_algorithms(act, said):
    """What an algorithm's policy returns is checked where the actor takes it, as off-policy's is:
    one line naming the hook, not a fragment the learner refuses or a crash of surreal's."""
    from types import SimpleNamespace

    from surreal.runtime.run import RoleFailed

    class Wrong(PPO):
        def policy(self, cfg, spaces, weights, rng):
            inner = super().policy(cfg, spaces, weights, rng)
            return SimpleNamespace(act=lambda obs: act(*inner.act(obs)))

    learner = Learner(Wrong(), CFG, spaces_for(ENV), 128, seed=1)
    actor = Actor(CFG, ENV, num_envs=2, seed=3, algo=Wrong())
    actor.set_params(learner.params())
    with pytest.raises(RoleFailed, match=said):
        actor.collect()
