"""The rule every learner keeps across restarts, PPO and ES alike (checkpoint.resumed_version): a
version number never names two sets of weights, because workers take "unchanged" from the number.

A run publishes versions (its start, every update, the announcement of the end) and checkpoints as
it does in production (every `checkpoint_every` updates). It can die right after any publication
(SIGKILL: the checkpoint on disk is what the next learner starts from) or be stopped (SIGTERM, the
end: a clean save). For every such point, the next learner's versions, on restore and after an
update of its own, must not reuse a number the dead one published with other weights."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
from test_learner import CFG as PPO_CFG
from test_learner import ENV as PPO_ENV
from test_learner import fragment

from surreal.algorithms.ppo import PPO
from surreal.protocol.types import Params
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.learner import Learner

PPO_TOTAL = PPO_CFG.steps_per_update * 7


def digest(params: Params) -> str:
    data = b"".join(np.ascontiguousarray(w).tobytes() for _, w in sorted(params.weights.items()))
    return hashlib.sha256(data).hexdigest()


def assert_keeps_the_rule(published: list[tuple[int, str]], later: list[Params], when: str) -> None:
    seen = dict(published)
    for p in later:
        assert seen.get(p.version, digest(p)) == digest(p), (
            f"{when}: version {p.version} names other weights than the dead learner's"
        )
        seen[p.version] = digest(p)


def ppo_learner(exp_dir: Path, actor_seed: int) -> tuple[Learner, Actor]:
    learner = Learner(PPO(), PPO_CFG, spaces_for(PPO_ENV), PPO_TOTAL, seed=1, exp_dir=exp_dir)
    actor = Actor(PPO_CFG, PPO_ENV, num_envs=2, seed=actor_seed)
    actor.set_params(learner.params())
    return learner, actor


def ppo_update(learner: Learner, actor: Actor) -> Params:
    while not learner.ready():
        learner.add_fragment(fragment(actor))
    learner.update()
    actor.set_params(params := learner.params())
    return params


def run_and_kill_everywhere(
    tmp_path: Path,
    start: Callable[[Path], tuple[object, Callable[[], Params], Callable[[], Params], Callable[[], None]]],
    updates: int,
) -> int:
    """Run `updates` updates and the end's announcement; then, for each publication, a learner
    started from the checkpoint on disk at that moment (and, last, from the clean save at the end).
    `start(exp_dir)` gives (core, params, update, end). Returns how many restarts were checked."""
    run = tmp_path / "run"
    core, params, update, end = start(run)
    published: list[tuple[int, str]] = []
    snapshots: list[bytes | None] = []  # None: no checkpoint on disk yet
    ckpt = run / "checkpoints" / "latest.pt"

    def publish(p: Params) -> None:
        published.append((p.version, digest(p)))
        assert_keeps_the_rule(published[:-1], [p], "the run itself")
        snapshots.append(ckpt.read_bytes() if ckpt.exists() else None)

    publish(params())
    for _ in range(updates):
        publish(update())
    end()
    publish(params())  # the announcement of the end, under a new number
    core.save(clean=True)  # type: ignore[attr-defined]  # SIGTERM, or the end
    clean = ckpt.read_bytes()
    for i, saved in enumerate([*snapshots, clean]):
        exp = tmp_path / f"restart-{i}"
        (exp / "checkpoints").mkdir(parents=True)
        if saved is not None:
            (exp / "checkpoints" / "latest.pt").write_bytes(saved)
        next_core, next_params, next_update, _ = start(exp)
        died_after = published[: i + 1] if i < len(snapshots) else published
        assert_keeps_the_rule(died_after, [next_params(), next_update()], f"restart {i}")
        next_core.close()  # type: ignore[attr-defined]
    core.close()  # type: ignore[attr-defined]
    return len(snapshots) + 1


def test_ppo_no_version_number_names_two_sets_of_weights(tmp_path: Path) -> None:
    def start(exp_dir: Path):  # noqa: ANN202
        # A restarted learner trains on other experience than its predecessor did (the actors'
        # environments went on), so equal numbers with equal weights cannot happen by replay.
        learner, actor = ppo_learner(exp_dir, actor_seed=3 if exp_dir.name == "run" else 11)
        return learner, learner.params, lambda: ppo_update(learner, actor), learner.new_version

    # 5 updates with checkpoint_every 2: the end comes one update after the last periodic save,
    # where a restore that jumps only checkpoint_every would reuse the end's number.
    assert PPO_CFG.checkpoint_every == 2
    assert run_and_kill_everywhere(tmp_path, start, updates=5) == 8


def test_es_no_version_number_names_two_sets_of_weights(tmp_path: Path) -> None:
    from es.test_es_master import CFG as ES_CFG
    from es.test_es_master import SPACES, batch_of, row

    from surreal.runtime.es.master import ESMaster

    def start(exp_dir: Path):  # noqa: ANN202
        master = ESMaster(ES_CFG, SPACES, total_steps=10**6, num_agents=2, seed=3, exp_dir=exp_dir)
        # A restarted master hears other returns than its predecessor did (see the PPO test): the
        # other side of each pair wins, which centered ranks cannot shape away.
        better, worse = (10.0, 5.0) if exp_dir.name == "run" else (5.0, 10.0)

        def update() -> Params:
            master.add_results(batch_of([row(master, 0, returns=(better, worse)),
                                         row(master, 1, returns=(worse, better))]))  # fmt: skip
            master.update()
            return master.params()

        return master, master.params, update, master.new_version

    # 9 updates with checkpoint_every 5: the end comes 4 updates after the last periodic save.
    assert ES_CFG.checkpoint_every == 5
    assert run_and_kill_everywhere(tmp_path, start, updates=9) == 12
