"""Surreal's off-policy algorithms beside Stable-Baselines3's (`--algo sac|td3|dqn`) in one run, on
the same cores, at equal networks, batch, learning rate, warm-up and replay ratio (Spreeze's measures):

(a) SB3's SAC, TD3 or DQN, built from surreal's preset config after the `--set`s (`*_peer` below);
(b) surreal's through the real CLI and local backend, for each agents x shards of the grid.

The mapping. The replay ratio (rows trained per env step) is SB3's batch x gradient_steps /
train_freq: below the batch, one gradient step every round(batch / ratio) env steps, else
round(ratio / batch) gradient steps every env step (exact where one divides the other; the `ratio`
column is what each held). SB3 acts uniformly until learning_starts, surreal for `random_steps`
(the header names both). TD3's exploration_noise is SB3's NormalActionNoise sigma, both on the
[-1, 1] action scale. DQN's target_update_interval counts updates in surreal and env steps in SB3:
SB3's is surreal's x train_freq / gradient_steps, the env steps those updates take (CartPole's
preset: 128 updates at 1 per 2 env steps, 256); with gradient_steps > 1 SB3 copies between bursts,
so every round(interval / gradient_steps) bursts; SB3 counts from its first env step, surreal from
its first update (the same interval, another phase). SB3's DQN has no double Q: double_q is refused.

For each: wall seconds of the run (the learner's elapsed time; SB3's learn()), env steps/s
(sampling), gradient updates/s and rows trained/s (update Hz), the final policy's eval return and
the replay ratio held; the seconds to a return (`--target`; Pendulum -200, HalfCheetah 3,000,
CartPole 475, Acrobot -100): the wall time of the first evaluation, every `--eval-every` env
steps, whose mean reaches it; where the time goes: the share of the learner's time in gradient
updates (SB3's in `train()` from its first call on; surreal's `update_share`, over its last
half minute of training): near 1, the update is the cap, not sampling, the transport or the
replay; then surreal's wall time, rates and time to the return over SB3's.

Both evaluate the deterministic policy on the same cadence: SB3 in line with its clock paused
(its wall time is training only), surreal's evaluator beside the learner on the same cores (its
clock runs on), so the comparison leans SB3's way. SB3 plays `eval_episodes` episodes an
evaluation, surreal's evaluator at least 5,000 steps' worth.

    python benchmarks/offpolicy_vs_sb3.py [--algo sac|td3|dqn] [--env Pendulum-v1] [--steps 10000] \\
        [--agents 2,4,8] [--shards 1,2] [--set hidden_sizes=[64,64] --set replay_ratio=128] \\
        [--target -200] [--device cuda]

Defaults: sac 10,000 env steps with the sets above (Pendulum in about a minute a run); td3 and dqn
their presets and the algorithm's steps for the env (Pendulum-v1 20,000, CartPole-v1 50,000).
Shared machines are noisy: read the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_SETS = {"sac": ("hidden_sizes=[64,64]", "replay_ratio=128")}  # td3, dqn: their presets
DEFAULT_STEPS = {"sac": 10_000}  # Pendulum in about a minute a run; td3, dqn: their default for the env
TARGETS = {"Pendulum-v1": -200.0, "HalfCheetah-v5": 3000.0, "CartPole-v1": 475.0, "Acrobot-v1": -100.0}
SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent)) or "surreal"


def cadence(cfg: Any) -> tuple[int, int]:
    """SB3's (train_freq, gradient_steps) for surreal's replay_ratio at its batch."""
    batch, ratio = cfg.batch_size, cfg.replay_ratio
    return (round(batch / ratio), 1) if ratio < batch else (1, round(ratio / batch))


def sac_peer(cfg: Any, env: Any) -> dict[str, Any]:
    return {"tau": cfg.tau, "ent_coef": f"auto_{cfg.init_ent_coef}" if cfg.ent_coef is None else cfg.ent_coef,
            "target_entropy": "auto" if cfg.target_entropy is None else cfg.target_entropy}  # fmt: skip


def td3_peer(cfg: Any, env: Any) -> dict[str, Any]:
    import numpy as np
    from stable_baselines3.common.noise import NormalActionNoise

    n = env.action_space.shape[0]
    return {"tau": cfg.tau, "action_noise": NormalActionNoise(np.zeros(n), np.full(n, cfg.exploration_noise)),
            "policy_delay": cfg.policy_delay, "target_policy_noise": cfg.target_policy_noise,
            "target_noise_clip": cfg.target_noise_clip}  # fmt: skip


def dqn_peer(cfg: Any, env: Any) -> dict[str, Any]:
    if cfg.double_q:
        sys.exit("--algo dqn: SB3's DQN has no double Q learning, so no peer for double_q=true")
    train_freq, gradient_steps = cadence(cfg)  # SB3 (tau 1): a copy every this many env steps
    return {"target_update_interval": max(1, round(cfg.target_update_interval * train_freq / gradient_steps)),
            "exploration_fraction": cfg.exploration_fraction, "max_grad_norm": cfg.max_grad_norm,
            "exploration_initial_eps": cfg.exploration_initial_eps,
            "exploration_final_eps": cfg.exploration_final_eps}  # fmt: skip


PEERS = {"sac": sac_peer, "td3": td3_peer, "dqn": dqn_peer}  # each: its SB3 class's own arguments


def first_reaching(points: list[tuple[int, float, float]], target: float | None) -> float | None:
    """Seconds of the first (env steps, seconds, mean return) evaluation at or above `target`."""
    return next((sec for _, sec, mean in points if target is not None and mean >= target), None)


def surreal_run(algo: str, env: str, steps: int, agents: int, shards: int, sets: list[str], seed: int,
                eval_every: int, target: float | None) -> dict:  # fmt: skip
    from surreal.orchestrator.plot import read_local

    home = Path(tempfile.mkdtemp(prefix=f"surreal-{algo}-bench-"))
    try:
        argv = [SURREAL, "create", "b", "--algo", algo, "--env", env, "--steps", str(steps),
                "--seed", str(seed), "--agents", str(agents), "--replay-shards", str(shards)]  # fmt: skip
        for s in [*sets, f"eval_interval={eval_every}"]:
            argv += ["--set", s]
        env_vars = {"SURREAL_HOME": str(home), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
        subprocess.run(argv, env=env_vars, check=True, capture_output=True, timeout=7200)
        st = json.loads(subprocess.run([SURREAL, "status", "b", "-o", "json"], env=env_vars, check=True,
                                       capture_output=True, text=True).stdout)  # fmt: skip
        evals = read_local(home, "b").eval
    finally:
        shutil.rmtree(home, ignore_errors=True)
    seconds, replay = st["elapsed_seconds"], st["replay"]
    points = list(zip(evals.steps, evals.seconds, evals.values, strict=True))
    return {"seconds": seconds, "env_steps_s": st["env_steps"] / seconds,
            "updates_s": st["updates"] / seconds,
            "rows_s": st["rows_trained"] / seconds, "eval_return": st["eval_return"],
            "ratio_held": sum(s["sampled"] for s in replay["shards"]) / max(1, st["env_steps"]),
            "update_share": st["update_share"], "to_target": first_reaching(points, target)}  # fmt: skip


def sb3_run(model: Any, env: str, steps: int, cfg: Any, eval_every: int, target: float | None) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    class Evals(BaseCallback):
        """Every `eval_every` env steps, the deterministic policy's mean return, the clock paused."""

        def __init__(self) -> None:
            super().__init__()
            self.env, self.started, self.paused = Monitor(gym.make(env)), time.perf_counter(), 0.0
            self.points: list[tuple[int, float, float]] = []  # (env steps, training seconds, mean)
            self.updating = 0.0  # seconds in model.train(), and the training clock at its first call
            self.first_update: float | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                begun = time.perf_counter()
                mean, _ = evaluate_policy(self.model, self.env, n_eval_episodes=cfg.eval_episodes,
                                          deterministic=True)  # fmt: skip
                self.points.append((self.num_timesteps, begun - self.started - self.paused, float(mean)))
                self.paused += time.perf_counter() - begun
            return True

    torch.set_num_threads(1)
    evals = Evals()
    train = model.train

    def timed_train(*args: object, **kwargs: object) -> None:
        begun = time.perf_counter()
        if evals.first_update is None:
            evals.first_update = begun - evals.started - evals.paused
        train(*args, **kwargs)
        evals.updating += time.perf_counter() - begun

    model.train = timed_train
    model.learn(steps, callback=evals)
    seconds = time.perf_counter() - evals.started - evals.paused
    since_updates = seconds - (evals.first_update or 0.0)
    mean, _ = evaluate_policy(model, evals.env, n_eval_episodes=10, deterministic=True)
    updates, batch = model._n_updates, cfg.batch_size
    return {"seconds": seconds, "env_steps_s": steps / seconds, "updates_s": updates / seconds,
            "rows_s": updates * batch / seconds, "eval_return": float(mean),
            "ratio_held": updates * batch / steps,
            "update_share": evals.updating / since_updates if since_updates > 0 else None,
            "to_target": first_reaching(evals.points, target)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", choices=sorted(PEERS), default="sac")
    parser.add_argument("--env", help="default: Pendulum-v1, CartPole-v1 for dqn")
    parser.add_argument("--steps", type=int, help="default: 10,000 for sac, else the algorithm's for the env")
    parser.add_argument("--agents", default="2,4,8")
    parser.add_argument("--shards", default="1,2")
    parser.add_argument("--seed", type=int, default=0)
    # Given sets replace these (argparse would append them to a default list).
    parser.add_argument("--set", action="append", help="KEY=VALUE over the preset; default: "
                        f"{' '.join(DEFAULT_SETS['sac'])} for sac, none for td3 and dqn")  # fmt: skip
    parser.add_argument("--target", type=float, help="the return to time; default: -200 on Pendulum, "
                        "3,000 on HalfCheetah, 475 on CartPole, -100 on Acrobot")  # fmt: skip
    parser.add_argument("--eval-every", type=int, help="env steps between evaluations; default: steps / 20")
    parser.add_argument(
        "--device", default="cpu", help="both learners' torch device (cpu, cuda); default cpu"
    )
    args = parser.parse_args()
    import gymnasium as gym
    import stable_baselines3
    import torch

    from surreal.spec import SpecError, build_spec, parse_set

    args.env = args.env or ("CartPole-v1" if args.algo == "dqn" else "Pendulum-v1")
    args.set = args.set or list(DEFAULT_SETS.get(args.algo, ()))
    sets = [*args.set, f"device={args.device}"]  # surreal's default (auto) would take a GPU SB3 is not given
    steps = args.steps or DEFAULT_STEPS.get(args.algo)
    try:  # the preset after the sets as `surreal create` makes it, and its steps for the env
        spec = build_spec("b", flags={"algo": args.algo, "env": args.env, "agents": 2, "steps": steps},
                          overrides=parse_set(sets))  # fmt: skip
    except SpecError as exc:
        sys.exit(f"surreal refuses it: {exc}")
    cfg, steps = spec.config, spec.steps
    target = args.target if args.target is not None else TARGETS.get(args.env)
    every = args.eval_every or max(1, steps // 20)
    train_freq, gradient_steps = cadence(cfg)
    own = PEERS[args.algo](cfg, env := gym.make(args.env))
    activation = torch.nn.ReLU if cfg.activation == "relu" else torch.nn.Tanh
    model = getattr(stable_baselines3, args.algo.upper())(
        "MlpPolicy", env, learning_rate=cfg.learning_rate, batch_size=cfg.batch_size,
        buffer_size=cfg.buffer_size, learning_starts=cfg.learning_starts, gamma=cfg.gamma,
        train_freq=train_freq, gradient_steps=gradient_steps, seed=args.seed, device=cfg.device,
        policy_kwargs={"net_arch": list(cfg.hidden_sizes), "activation_fn": activation}, **own)  # fmt: skip
    print(f"{args.algo} on {args.env}, {steps:,} env steps, seed {args.seed}, learners on {cfg.device}: "
          f"batch {cfg.batch_size}, replay ratio {cfg.replay_ratio:g}, hidden {list(cfg.hidden_sizes)}, "
          f"learning_starts {cfg.learning_starts}, random_steps {cfg.random_steps}; evaluations every "
          f"{every:,} env steps, time to return {target}\nSB3 {args.algo.upper()}: train_freq {train_freq}, "
          f"gradient_steps {gradient_steps}, " + ", ".join(f"{k} {v}" for k, v in own.items()),
          flush=True)  # fmt: skip
    print(f"{'run':<28}{'wall s':>8}{'steps/s':>9}{'updates/s':>10}{'rows/s':>10}{'eval':>9}{'ratio':>8}"
          f"{'upd share':>10}{'to ret s':>9}{'wall/SB3':>10}{'upd/SB3':>9}{'to/SB3':>8}",
          flush=True)  # fmt: skip
    base = sb3_run(model, args.env, steps, cfg, every, target)
    row(f"SB3 {args.algo.upper()}", base, base)  # each row as it ends: a long run shows what it has
    for shards in (int(s) for s in args.shards.split(",")):
        for agents in (int(a) for a in args.agents.split(",")):
            figures = surreal_run(args.algo, args.env, steps, agents, shards, sets, args.seed, every, target)
            row(f"surreal {agents} agents {shards} shard{'s' if shards > 1 else ''}", figures, base)


def row(name: str, f: dict, base: dict) -> None:
    """One run's figures and its ratios to SB3's; a return not reached (or not timed) is "-"."""
    to, base_to, share = f["to_target"], base["to_target"], f["update_share"]
    print(f"{name:<28}{f['seconds']:>8.0f}{f['env_steps_s']:>9.0f}{f['updates_s']:>10.0f}{f['rows_s']:>10.0f}"
          f"{f['eval_return']:>9.1f}{f['ratio_held']:>8.1f}{'-' if share is None else f'{share:.2f}':>10}"
          f"{'-' if to is None else f'{to:.0f}':>9}"
          f"{f['seconds'] / base['seconds']:>10.2f}{f['updates_s'] / base['updates_s']:>9.2f}"
          f"{'-' if to is None or not base_to else f'{to / base_to:.2f}':>8}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
