"""The ES master: what it accepts, what it rejects and counts, updates, normalization, resume."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from surreal.runtime.envs.make import spaces_for
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.master import ESMaster
from surreal.runtime.es.noise import pair_seed
from surreal.runtime.es.results import pack_batch

CFG = ESConfig(policy="linear", population=2, handout_ratio=1.0, max_staleness=1, checkpoint_every=5)
SPACES = spaces_for("CartPole-v1")


def batch_of(rows: list[tuple]) -> dict[str, np.ndarray]:
    """A batch of `rows` with the observation moments a worker would send: one sample per step."""
    steps = float(sum(r[6] + r[7] for r in rows))
    return pack_batch(rows, {"obs_count": np.array([steps]), "obs_mean": np.zeros(4), "obs_m2": np.zeros(4)})


def make_master(tmp_path=None, **kw) -> ESMaster:
    cfg = dataclasses.replace(CFG, **kw)
    return ESMaster(cfg, SPACES, total_steps=10_000, num_agents=2, seed=3, exp_dir=tmp_path)


def row(master: ESMaster, agent: int, pair: int = 0, version: int | None = None,
        returns=(10.0, 5.0), seed: int | None = None) -> tuple:  # fmt: skip
    """A result for `agent`'s `pair` of `version` (default: the current one), correct by default."""
    params = master.params()
    version = params.version if version is None else version
    nonce = master.handout.nonce(version) if version in master.handout._open else 0
    seed = pair_seed(nonce, agent, pair) if seed is None else seed
    return (agent, pair, seed, version, returns[0], returns[1], 20, 30)


def rejected(master: ESMaster) -> dict[str, int]:
    return {k: v for k, v in master.status()["results_rejected"].items() if v}


def test_hand_out_is_in_the_params_and_one_pair_per_agent_here():
    master = make_master()
    params = master.params()
    assert params.extras["pairs_per_agent"].tolist() == [1]  # ceil(1.0 * 2 / 2)
    assert params.extras["nonce"].dtype == np.int64
    assert params.weights["theta"].shape == (10,) and master.pairs_per_update == 2


def test_a_correct_result_is_accepted_and_counted():
    master = make_master()
    assert master.add_results(batch_of([row(master, 0)])) == 1
    st = master.status()
    assert st["env_steps"] == 50 and st["results_accepted"] == 1 and st["agents_reporting"] == 1
    assert st["episodes"] == 2 and not rejected(master)


def test_results_for_unknown_versions_unhanded_seeds_nan_and_duplicates_are_rejected():
    master = make_master()
    good = row(master, 1)
    batch = [
        row(master, 0, version=7),  # a version that was never published
        row(master, 0, seed=good[2]),  # agent 1's seed, reported by agent 0
        row(master, 0, seed=12345),  # a seed never handed out
        row(master, 0, pair=1),  # pair index beyond this version's hand-out (1 per agent)
        row(master, 0, returns=(float("nan"), 1.0)),
        row(master, 0, returns=(1.0, float("inf"))),
        good,
        good,  # the same result twice
    ]
    assert master.add_results(batch_of(batch)) == 1
    assert rejected(master) == {"unknown_version": 1, "unknown_seed": 3, "nan": 2, "duplicate": 1}
    st = master.status()
    assert st["env_steps"] == 50 and st["agents_reporting"] == 1 and st["dropped_fragments"] == 7
    assert not master.ready()  # only one pair pooled; two are needed


def test_an_inconsistent_batch_is_rejected_whole():
    master = make_master()
    batch = batch_of([row(master, 0), row(master, 1)])
    batch["lengths"] = batch["lengths"][:1]
    assert master.add_results(batch) == 0
    assert rejected(master) == {"invalid": 2}


def test_an_update_per_population_bumps_the_version_and_stale_results_are_dropped():
    master = make_master()
    theta0 = master.params().weights["theta"].copy()
    v0_results = [row(master, 0), row(master, 1, returns=(1.0, 9.0))]
    master.add_results(batch_of(v0_results))
    assert master.ready()
    stats = master.update()
    assert stats["pairs"] == 2 and master.params().version == 1
    assert not np.array_equal(master.params().weights["theta"], theta0)
    # One version behind is within max_staleness = 1 (but these were already received).
    assert master.add_results(batch_of(v0_results)) == 0
    assert rejected(master) == {"duplicate": 2}
    master.add_results(batch_of([row(master, 0), row(master, 1)]))
    master.update()  # version 2: version 0 is now two behind
    stale = row(master, 0, version=0, seed=v0_results[0][2])
    steps = master.status()["env_steps"]
    assert master.add_results(batch_of([stale])) == 0
    assert rejected(master)["stale"] == 1
    # The environments did those steps: they count in the budget, and as rejected steps.
    assert master.status()["env_steps"] == steps + 50 and master.status()["env_steps_rejected"] == 50


def test_the_update_follows_the_better_perturbation():
    master = make_master(weight_decay=0.0, learning_rate=0.1)
    # Both agents: theta + sigma eps scored higher than theta - sigma eps. The step must have a
    # positive inner product with the better perturbations' direction.
    rows = [row(master, 0, returns=(9.0, 1.0)), row(master, 1, returns=(8.0, 2.0))]
    master.add_results(batch_of(rows))
    master.update()
    from surreal.runtime.es.noise import perturbation

    direction = sum(perturbation(r[2], 10).astype(np.float64) for r in rows)
    assert master.theta @ direction > 0


def test_observation_moments_from_workers_are_merged_and_shipped():
    master = make_master()
    obs = np.array([[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 1.0, 0.0]] * 25)  # the row's 20 + 30 steps
    moments = {"obs_count": np.array([50.0]), "obs_mean": obs.mean(0),
               "obs_m2": ((obs - obs.mean(0)) ** 2).sum(0)}  # fmt: skip
    master.add_results(pack_batch([row(master, 0, returns=(float("nan"), 0.0))], moments))
    extras = master.params().extras
    np.testing.assert_allclose(extras["obs_mean"], [2, 2, 2, 2])
    np.testing.assert_allclose(extras["obs_var"], [1, 0, 1, 4])


def test_resume_restores_parameters_counters_and_moves_past_old_versions(tmp_path):
    master = make_master(tmp_path)
    old = [row(master, 0), row(master, 1)]
    master.add_results(batch_of(old))
    master.update()
    master.save()
    saved = master.params()
    master.close()
    resumed = make_master(tmp_path)
    np.testing.assert_array_equal(resumed.params().weights["theta"], saved.weights["theta"])
    st = resumed.status()
    assert st["updates"] == 1 and st["env_steps"] == 100 and st["agents_reporting"] == 2
    assert resumed.params().version > saved.version  # past the old ones (test_version_rule.py)
    # A worker still holding the old version gets its results rejected, not applied.
    late = row(master, 0, version=saved.version, seed=pair_seed(master.handout.nonce(1), 0, 0))
    assert resumed.add_results(batch_of([late])) == 0
    assert sum(rejected(resumed).values()) == 1


def test_a_clean_resume_hands_out_the_same_weights_under_the_next_version(tmp_path):
    """What a master saves on SIGTERM: its last published version, but not that version's pool. A
    worker that already evaluated its pairs of it would wait forever for the pool to fill; the
    same weights under version + 1 are a new hand-out, and no update is lost."""
    master = make_master(tmp_path)
    master.add_results(batch_of([row(master, 0), row(master, 1)]))
    master.update()
    master.add_results(batch_of([row(master, 0)]))  # half of the next round: lost with the pool
    master.save(clean=True)
    saved = master.params()
    master.close()
    resumed = make_master(tmp_path)
    assert resumed.params().version == saved.version + 1 and resumed.status()["updates"] == 1
    np.testing.assert_array_equal(resumed.params().weights["theta"], saved.weights["theta"])
    assert resumed.checkpoint_version == saved.version
    fresh = [row(resumed, 0), row(resumed, 1)]  # the workers evaluate the new hand-out
    assert resumed.add_results(batch_of(fresh)) == 2 and resumed.ready()


def test_a_burst_of_results_makes_several_updates_of_pairs_per_update():
    """512 agents finish their pairs together: one worker's batch holds hundreds of results. They
    feed updates of `pairs_per_update` pairs, oldest first, not one update of all of them."""
    master = ESMaster(CFG, SPACES, total_steps=10**9, num_agents=12, seed=0)
    assert master.pairs_per_update == 6  # half the agents (the population is 2)
    first = [row(master, a) for a in range(8)]
    assert master.add_results(batch_of(first)) == 8
    assert master.update()["pairs"] == 6 and not master.ready()  # two wait for the next results
    later = [row(master, a) for a in range(8, 12)]  # the new version's
    assert master.add_results(batch_of(later)) == 4
    stats = master.update()
    assert stats["pairs"] == 6 and stats["staleness"] == pytest.approx(2 / 6)  # the oldest first
    assert len(master._pool) == 0 and master.params().version == 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_round_waits_for_every_agents_pair_then_drains_in_updates(monkeypatch):
    """With more agents than two updates' worth, all of them start each round on one version: the
    first burst waits for the rest of the round, and the round then makes its updates back to
    back (the second from results one version old), as in the serial harness."""
    import surreal.runtime.es.master as master_module

    clock = Clock()
    monkeypatch.setattr(master_module, "time", clock)
    master = ESMaster(CFG, SPACES, total_steps=10**9, num_agents=12, seed=0)
    assert (master.pairs_per_update, master.round_pairs) == (6, 12)
    clock.now += 30.0  # the round's evaluation took 30 s
    master.add_results(batch_of([row(master, a) for a in range(6)]))  # one worker's burst
    clock.now += 5.0
    assert not master.ready()  # an update's worth, but the round is not in
    master.add_results(batch_of([row(master, a) for a in range(6, 12)]))
    assert master.ready()
    first = master.update()
    assert master.ready()  # the round's second update, before anything is published
    second = master.update()
    assert (first["staleness"], second["staleness"]) == (0.0, 1.0)
    assert not master.ready() and master.params().version == 2
    st = master.status()
    assert st["round_pairs"] == 12 and st["staleness"] == 0.5 and st["short_rounds"] == 0


def test_a_round_missing_a_worker_is_updated_after_waiting_as_long_as_it_took(monkeypatch):
    import surreal.runtime.es.master as master_module

    clock = Clock()
    monkeypatch.setattr(master_module, "time", clock)
    master = ESMaster(CFG, SPACES, total_steps=10**9, num_agents=12, seed=0)
    clock.now += 30.0
    master.add_results(batch_of([row(master, a) for a in range(8)]))  # the other worker is gone
    clock.now += 29.0
    assert not master.ready()
    clock.now += 1.0  # as long again as the round took to produce its first results
    assert master.ready() and master.ready()  # counted once, however often it is asked
    assert master.status()["short_rounds"] == 1
    master.update()
    assert not master.ready()  # two pairs left: less than an update; they wait for the next round
    clock.now += 40.0
    assert not master.ready()  # and do not start its clock, however long they wait
    master.add_results(batch_of([row(master, a) for a in range(4)]))  # the new version's first
    assert len(master._pool) == 6 and not master.ready()
    clock.now += 40.0  # as long again as the new version took to produce them
    assert master.ready()


def test_with_few_agents_updates_happen_as_soon_as_an_update_is_pooled():
    master = ESMaster(CFG, SPACES, total_steps=10**9, num_agents=3, seed=0)
    assert master.round_pairs == 0
    master.add_results(batch_of([row(master, 0), row(master, 1)]))
    assert master.ready()


def test_the_run_is_done_at_total_steps_and_takes_no_more_results():
    master = ESMaster(CFG, SPACES, total_steps=50, num_agents=2, seed=0)
    master.add_results(batch_of([row(master, 0)]))
    assert master.done and not master.ready()
    assert master.params().extras["done"].tolist() == [True]
    assert master.add_results(batch_of([row(master, 1)])) == 0


@pytest.mark.parametrize(
    ("agents", "per_agent", "per_update", "staleness", "round_pairs"),
    [(8, 6, 32, 1, 0), (16, 3, 32, 1, 0), (64, 1, 32, 3, 64), (512, 1, 256, 3, 512),
     (4096, 1, 2048, 3, 4096)],
)  # fmt: skip
def test_hand_out_sizes_scale_with_the_agents(agents, per_agent, per_update, staleness, round_pairs):
    cfg = ESConfig(population=32, handout_ratio=1.5, learning_rate=0.02)
    assert cfg.pairs_per_agent(agents) == per_agent
    assert cfg.pairs_per_update(agents) == per_update
    assert cfg.staleness(agents) == staleness
    assert cfg.round_pairs(agents) == round_pairs
    # while one pair is evaluated (every agent evaluates one at a time) at most two updates happen,
    # and the window holds those and one more
    assert agents / per_update <= 2 and (staleness + 1) * per_update >= agents
    # the step grows by the fourth root of the update's size against the population
    assert cfg.step_size(agents) == pytest.approx(0.02 * (per_update / 32) ** 0.25)


def test_reward_shift_ranks_returns_net_of_an_alive_bonus():
    # Raw returns favour theta + sigma eps (100 > 60), but it only survived longer: with one unit
    # subtracted per step the fitnesses are 100 - 100 = 0 and 60 - 20 = 40, so the step goes the
    # other way.
    from surreal.runtime.es.noise import perturbation

    for shift, sign in ((0.0, 1), (1.0, -1)):
        master = make_master(weight_decay=0.0, reward_shift=shift, population=1)
        r = row(master, 0, returns=(100.0, 60.0))
        master.add_results(batch_of([r[:6] + (100, 20)]))
        master.update()
        assert sign * (master.theta @ perturbation(r[2], 10)) > 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("obs_count", 49.0), ("obs_count", -50.0), ("obs_mean", np.nan), ("obs_m2", -1.0), ("obs_m2", np.inf)],
)
def test_a_batch_with_impossible_moments_is_rejected_whole(field, value):
    master = make_master()
    before = master.obs_rms.moments
    batch = batch_of([row(master, 0), row(master, 1)])
    batch[field] = np.full_like(batch[field], value)
    assert master.add_results(batch, "rogue") == 0
    assert rejected(master) == {"bad_moments": 2}
    assert master.obs_rms.moments is before and master.status()["env_steps"] == 0


def test_non_finite_returns_are_dropped_and_the_rest_of_the_batch_counts():
    master = make_master()
    batch = batch_of([row(master, 0, returns=(float("nan"), 1.0)), row(master, 1)])
    assert master.add_results(batch, "actor-1") == 1
    assert rejected(master) == {"nan": 1}
    assert master.status()["env_steps"] == 50  # only the accepted pair's steps


def test_an_update_that_is_not_finite_is_skipped_and_keeps_the_parameters(monkeypatch):
    master = make_master()
    master.add_results(batch_of([row(master, 0), row(master, 1)]))
    theta, version = master.theta.copy(), master.counters.version
    import surreal.runtime.es.master as master_module

    monkeypatch.setattr(master_module, "ascent_direction", lambda *a: np.full_like(theta, np.nan))
    assert master.update() == {}
    assert master.counters.skipped_updates == 1 and master.counters.version == version
    np.testing.assert_array_equal(master.theta, theta)
    assert np.isfinite(master._adam_m).all() and np.isfinite(master._adam_v).all()


def test_anneal_lr_decays_the_step_linearly_to_zero_at_total_steps():
    master = ESMaster(dataclasses.replace(CFG, anneal_lr=True), SPACES, total_steps=200,
                      num_agents=2, seed=0)  # fmt: skip
    assert master.current_step_size() == master.step_size
    master.add_results(batch_of([row(master, 0)]))  # 50 of 200 env steps
    assert master.current_step_size() == pytest.approx(0.75 * master.step_size)
    constant = ESMaster(CFG, SPACES, total_steps=200, num_agents=2, seed=0)
    constant.add_results(batch_of([row(constant, 0)]))
    assert constant.current_step_size() == constant.step_size


# ---- `surreal scale`: the master follows a new agent count


SCALE_CFG = dataclasses.replace(CFG, population=4, handout_ratio=1.5)  # 2 agents: 3 pairs each; 6: 1


def test_more_agents_get_smaller_hand_outs_from_the_next_version_and_the_current_one_still_counts():
    master = ESMaster(SCALE_CFG, SPACES, total_steps=10**9, num_agents=2, seed=0)
    step_size, cfg = master.step_size, master.cfg
    assert master.params().extras["pairs_per_agent"].tolist() == [3] and master.pairs_per_update == 4
    master.add_results(batch_of([row(master, 0, pair=0), row(master, 1, pair=0)]))
    master.set_agents(6)
    # No new version: new workers start on this one, whose hand-out stays 3 pairs per agent.
    assert master.params().version == 0 and master.params().extras["pairs_per_agent"].tolist() == [3]
    assert master.add_results(batch_of([row(master, 0, pair=2), row(master, 5, pair=1)])) == 2
    assert master.ready() and master.update()["pairs"] == 4  # the pairs pooled before the scale too
    assert master.params().extras["pairs_per_agent"].tolist() == [1]  # ceil(1.5 * 4 / 6)
    assert master.add_results(batch_of([row(master, 3, pair=1)])) == 0  # beyond the new hand-out
    st = master.status()
    assert st["pairs_per_agent"] == 1 and st["pairs_per_update"] == 4 and st["round_pairs"] == 0
    assert master.step_size == step_size and master.cfg is cfg  # the optimizer's settings stay


def test_fewer_agents_get_a_new_version_with_bigger_hand_outs_and_nothing_is_lost():
    """Six agents have one pair each; four of them go. The two left could never fill an update
    with this version's hand-out, so a new version (same weights) hands out three pairs each; the
    results pooled, and those of the old version still in flight, all count."""
    master = ESMaster(dataclasses.replace(SCALE_CFG, max_staleness=0), SPACES, total_steps=10**9,
                      num_agents=6, seed=0)  # fmt: skip
    theta = master.params().weights["theta"].copy()
    assert master.params().extras["pairs_per_agent"].tolist() == [1]
    master.add_results(batch_of([row(master, 0), row(master, 4)]))
    in_flight = row(master, 1)  # evaluated on version 0, arrives after the scale
    master.set_agents(2)
    params = master.params()
    assert params.version == 1 and params.extras["pairs_per_agent"].tolist() == [3]
    np.testing.assert_array_equal(params.weights["theta"], theta)
    assert master.counters.updates == 0 and len(master._pool) == 2
    assert master.add_results(batch_of([in_flight])) == 1  # version 0 still counts (staleness 0)
    assert master.add_results(batch_of([row(master, 1, pair=2)])) == 1
    assert master.ready() and master.update()["pairs"] == 4 and not rejected(master)
    assert master.status()["max_staleness"] == 0


def test_a_round_in_progress_keeps_its_results_when_the_count_changes(monkeypatch):
    import surreal.runtime.es.master as master_module

    clock = Clock()
    monkeypatch.setattr(master_module, "time", clock)
    master = ESMaster(CFG, SPACES, total_steps=10**9, num_agents=12, seed=0)
    assert (master.pairs_per_update, master.round_pairs) == (6, 12)
    clock.now += 30.0
    master.add_results(batch_of([row(master, a) for a in range(6)]))  # one worker's burst
    master.set_agents(24)  # twelve more agents join this round's version
    assert (master.pairs_per_update, master.round_pairs) == (12, 24) and master.params().version == 0
    master.add_results(batch_of([row(master, a) for a in range(6, 18)]))
    clock.now += 5.0
    assert not master.ready()  # 18 of the round's 24
    master.add_results(batch_of([row(master, a) for a in range(18, 24)]))
    assert master.ready() and master.update()["pairs"] == 12
    assert master.ready() and master.update()["pairs"] == 12  # the round drains, nothing lost
    assert not master.ready() and master.status()["short_rounds"] == 0

    # Scaled down mid-round: the workers of agents 12-23 are gone. The round now is the 12 left.
    master.add_results(batch_of([row(master, a) for a in range(12)]))
    master.set_agents(12)
    assert (master.pairs_per_update, master.round_pairs) == (6, 12)
    assert master.params().version == 2  # one pair per agent still: no new version needed
    assert master.ready() and master.update()["pairs"] == 6 and master.update()["pairs"] == 6
    assert master.status()["short_rounds"] == 0 and not rejected(master)


def test_a_restarted_master_serves_the_scaled_count_with_the_create_time_step(tmp_path):
    master = ESMaster(SCALE_CFG, SPACES, total_steps=10**9, num_agents=2, seed=0, agents=6)
    assert master.step_size == SCALE_CFG.step_size(2)
    assert master.params().extras["pairs_per_agent"].tolist() == [1] and master.num_agents == 6


def test_a_version_opened_by_a_scale_is_never_reused_after_a_restart(tmp_path):
    master = make_master(tmp_path, population=4, handout_ratio=1.5)
    master.set_agents(6)
    master.set_agents(1)  # 6 pairs per agent now: a new version without an update
    bumped = master.params().version
    assert bumped == 1 and master.counters.updates == 0
    resumed = make_master(tmp_path, population=4, handout_ratio=1.5)
    assert resumed.params().version > bumped


def test_a_scale_after_the_run_is_done_opens_no_version():
    master = ESMaster(SCALE_CFG, SPACES, total_steps=50, num_agents=6, seed=0)
    master.add_results(batch_of([row(master, 0)]))
    assert master.done
    master.set_agents(1)
    assert master.params().version == 0 and master.status()["pairs_per_agent"] == 6


def test_the_masters_time_in_updates_is_its_busy_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """What status's update_share and balance are made of (runtime/progress.py), as the on- and
    off-policy learners' are: the seconds spent in update(), a failed one's too."""
    import surreal.runtime.es.master as master_module

    clock = Clock()
    monkeypatch.setattr(master_module, "time", clock)
    master = ESMaster(CFG, SPACES, total_steps=10**9, num_agents=2, seed=0)

    def update() -> dict[str, float]:
        clock.now += 1.5
        raise RuntimeError("a bug in an update")

    monkeypatch.setattr(master, "_update", update)
    with pytest.raises(RuntimeError):
        master.update()
    assert master.busy_seconds() == 1.5
