"""ES hyperparameters (OpenAI-style evolution strategies). Per-environment values: presets.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

from surreal.runtime import bounds
from surreal.runtime.numpy_mlp import ACTIVATIONS

POLICIES = ("linear", "mlp")


@dataclass(frozen=True)
class ESConfig:
    # --- policy ---
    policy: str = "mlp"  # "linear" (actions = W x + b, as ARS) or "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)  # MLP hidden widths (ignored by "linear")
    activation: str = "tanh"  # MLP hidden activation: "tanh" or "relu"

    # --- search distribution and update (master) ---
    population: int = 32  # antithetic pairs (2 episodes each) per update, at least
    sigma: float = 0.02  # std of the parameter perturbations
    learning_rate: float = 0.01  # Adam step size
    anneal_lr: bool = False  # decay the step linearly to 0 at total_steps (as PPO's anneal_lr)
    adam_beta1: float = 0.9  # Adam first-moment decay
    adam_beta2: float = 0.999  # Adam second-moment decay
    weight_decay: float = 0.005  # L2 coefficient: the step follows g - weight_decay * theta
    top_fraction: float = 1.0  # keep only this best fraction of pairs (by max return), as ARS's b/N
    reward_shift: float = 0.0  # subtracted per env step from a return before ranking: ARS's shift,
    #   which stops an alive bonus from making "survive, don't move" a local optimum (Hopper)

    # --- hand-out of perturbations ---
    handout_ratio: float = 1.5  # pairs handed out per version / pairs per update: slack that keeps
    #   workers busy while stragglers finish; results of the extra pairs count for the next update
    max_staleness: int = 1  # results evaluated this many versions behind the master still count

    # --- observation normalization ---
    norm_obs: bool = True  # normalize observations with statistics merged on the master
    obs_clip: float = 10.0  # clip normalized observations to [-obs_clip, obs_clip]

    # --- workers ---
    flush_interval: float = 0.2  # seconds between result batches a worker sends (when it has any)
    credits_per_worker: int = 4  # result batches a worker may have in flight (backpressure window)

    # --- bookkeeping ---
    checkpoint_every: int = 20  # updates between checkpoints (and one at the end, and on SIGTERM)
    checkpoint_seconds: float = 60.0  # and at least this often: what a SIGKILL can lose at most
    progress_deadline_seconds: float = 600.0  # a learner that counts no env step, or applies no update,
    #   for this long while it trains fails the run, naming which (runtime/deadline.py)
    eval_interval: int = 100_000  # env steps between evaluations (the final policy always)
    eval_episodes: int = 10  # deterministic episodes per evaluation
    final_eval_timeout: float = 600.0  # seconds the master waits for the final evaluation

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        bounds.check("es", self, BOUNDS)
        for name, known in (("policy", POLICIES), ("activation", ACTIVATIONS)):
            if getattr(self, name) not in known:
                raise ValueError(f"es.{name} must be one of {', '.join(known)}, got {getattr(self, name)!r}")
        bounds.check_widths("es", self.hidden_sizes, empty=self.policy == "linear")

    def pairs_per_agent(self, num_agents: int) -> int:
        """Perturbations handed to each logical agent per version: together at least
        `handout_ratio * population`, and at least one each, so every agent has work."""
        return max(1, math.ceil(self.handout_ratio * self.population / num_agents))

    def pairs_per_update(self, num_agents: int) -> int:
        """Pairs the master waits for before an update: the population, or half the agents when
        there are more. Every agent evaluates one pair at a time, so while a pair is evaluated
        `num_agents / pairs_per_update` updates happen, and that is how many versions old its
        result is when it counts: at most about two. (Agents that start a version together also
        finish it together: 512 agents' results arrive in bursts of hundreds.)"""
        return max(self.population, math.ceil(num_agents / 2))

    def step_size(self, num_agents: int) -> float:
        """Adam's learning rate for `num_agents` agents: `learning_rate`, grown by the fourth root
        of how much larger than the population an update is (as PPO's presets grow theirs with
        the batch, algorithms/ppo/scaling.py): a less noisy estimate takes a longer step."""
        return self.learning_rate * (self.pairs_per_update(num_agents) / self.population) ** 0.25

    def round_pairs(self, num_agents: int) -> int:
        """Pairs the master waits for before the updates of a round, when every agent's hand-out
        is smaller than an update (more agents than twice the population): the whole hand-out, so
        that all agents start each round on one version, as the serial harness does (0: no
        waiting; updates happen as soon as `pairs_per_update` pairs are pooled)."""
        if num_agents < 2 * self.pairs_per_update(num_agents):
            return 0
        return num_agents * self.pairs_per_agent(num_agents)

    def staleness(self, num_agents: int) -> int:
        """Versions a result may lag and still count: `max_staleness`, or, when several updates
        happen while a pair is evaluated, those updates and one more (a worker may fetch its
        version just before another worker's burst of results moves the master on)."""
        per_update = self.pairs_per_update(num_agents)
        if num_agents < 2 * per_update:
            return self.max_staleness
        return max(self.max_staleness, math.ceil(num_agents / per_update) + 1)


HUGE = bounds.UNBOUNDED  # a setting with no natural upper bound
# Every numeric setting's range (bounds.py): the counts and waits from what the master, a worker
# and the evaluator can hold and finish, the coefficients from their meaning.
BOUNDS: bounds.Bounds = {
    "population": (1, 1_000_000), "sigma": (1e-12, 1e3), "learning_rate": (1e-12, 1.0),
    "adam_beta1": (0.0, 1 - 1e-12), "adam_beta2": (0.0, 1 - 1e-12), "weight_decay": (0.0, HUGE),
    "top_fraction": (1e-12, 1.0), "reward_shift": (-HUGE, HUGE),
    # hand-outs of handout_ratio x population pairs: slack past 100x is only unused work
    "handout_ratio": (1.0, 100.0), "max_staleness": (0, 1_000_000), "obs_clip": (1e-12, HUGE),
    "flush_interval": (1e-3, 60.0), "credits_per_worker": (1, 64), "checkpoint_every": (1, 10**9),
    "checkpoint_seconds": (1e-3, bounds.WEEK), "progress_deadline_seconds": (1.0, bounds.WEEK),
    "eval_interval": (1, 10**13),
    "eval_episodes": (1, bounds.MAX_EVAL_EPISODES), "final_eval_timeout": (1e-3, bounds.WEEK),
}  # fmt: skip
