"""What the runtime reads from every algorithm's config, whatever its family: how actors sample,
the learner's basics, its MLPs, what it trusts and the bookkeeping. A family's config
(OnPolicyConfig, OffPolicyConfig) derives from it, sets its own defaults and adds its own fields;
`--set NAME=VALUE` reaches every field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from surreal.runtime import bounds
from surreal.runtime.device import DEVICE_RE, DEVICE_RULE
from surreal.runtime.numpy_mlp import ACTIVATIONS

FEATURES = 512  # width of a CNN trunk's output (onpolicy/cnn.py), which the MLPs take for images
TINY, HUGE = 1e-12, bounds.UNBOUNDED  # "> 0", and no natural upper bound


@dataclass(frozen=True)
class RunConfig:
    """Its section names it in error lines ("ppo.learning_rate": a subclass's name without
    "Config", lowercased, unless it sets its own)."""

    section: ClassVar[str] = "settings"
    # Every numeric setting's range (bounds.py); a subclass adds its own: {**Base.BOUNDS, ...}.
    BOUNDS: ClassVar[bounds.Bounds]

    # --- sampling (actors) ---
    envs_per_agent: int = 4  # envs one logical agent steps; a worker batches all of its agents'
    fragment_length: int = 128  # env steps per env in one fragment an actor sends
    credits_per_worker: int = 2  # fragments a worker may have in flight (backpressure window)

    # --- the learner ---
    learning_rate: float = 3e-4  # the optimizer's step size (at the start, when annealed)
    anneal_lr: bool = False  # decay every optimizer's lr linearly to 0 at total_steps
    gamma: float = 0.99  # discount factor
    learner_threads: int = 1  # torch intra-op threads in the learner
    device: str = "auto"  # learner device: auto (CUDA when torch sees a GPU, else CPU), cpu, cuda, cuda:N

    # --- networks: MLPs after the observation's encoder ---
    hidden_sizes: tuple[int, ...] = (64, 64)  # hidden layer widths
    activation: str = "tanh"  # "tanh" or "relu"
    # Dict observations: the top-level keys the policy observes (empty: all of them). Leaves a key
    # no network here encodes out (MiniGrid's Text `mission`: --set obs_keys=image,direction).
    obs_keys: tuple[str, ...] = ()

    # --- trust: what the learner (or a replay shard) accepts from actors ---
    max_abs_reward: float = 1e6  # experience with a larger raw reward is rejected as corrupt (a
    #   broken or unstable environment); raise it for environments whose rewards are this large

    # --- bookkeeping ---
    checkpoint_every: int = 50  # updates between checkpoints (and one at the end, and on SIGTERM)
    checkpoint_seconds: float = 60.0  # and at least this often: what a SIGKILL can lose at most
    progress_deadline_seconds: float = 600.0  # a learner that counts no env step, or applies no update,
    #   for this long while it trains fails the run, naming which (runtime/deadline.py)
    eval_interval: int = 50_000  # env steps between evaluations (the final policy always)
    eval_episodes: int = 10  # episodes per evaluation
    final_eval_timeout: float = 600.0  # seconds the learner waits for the final evaluation

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "section" not in cls.__dict__:
            cls.section = cls.__name__.removesuffix("Config").lower()

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        bounds.check(self.section, self, self.BOUNDS)
        bounds.check_widths(self.section, self.hidden_sizes)
        self.require(self.activation in ACTIVATIONS, "activation",
                     f"must be one of {', '.join(ACTIVATIONS)}")  # fmt: skip
        self.require(bool(DEVICE_RE.fullmatch(self.device)), "device", DEVICE_RULE)

    def require(self, ok: bool, name: str, rule: str) -> None:
        """Raise ValueError("SECTION.NAME RULE, got VALUE") unless `ok`."""
        if not ok:
            raise ValueError(f"{self.section}.{name} {rule}, got {getattr(self, name)!r}")


# The counts and waits from what a worker, an evaluator and a learner can hold and finish, the
# coefficients from their meaning.
RunConfig.BOUNDS = {
    "envs_per_agent": (1, bounds.MAX_WORKER_ENVS), "fragment_length": (1, 100_000),
    "credits_per_worker": (1, 64), "learning_rate": (TINY, 1.0), "gamma": (TINY, 1.0),
    "learner_threads": (1, 1024), "max_abs_reward": (TINY, 1e30), "checkpoint_every": (1, 10**12),
    "checkpoint_seconds": (1e-3, bounds.WEEK), "progress_deadline_seconds": (1.0, bounds.WEEK),
    "eval_interval": (1, 10**13), "eval_episodes": (1, bounds.MAX_EVAL_EPISODES),
    "final_eval_timeout": (1e-3, bounds.WEEK),
}  # fmt: skip
