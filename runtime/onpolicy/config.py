"""What the on-policy runtime reads from an algorithm's config: sampling, the batch, the optimizer,
normalization, the actor-critic network and bookkeeping. An algorithm's config is a frozen
dataclass deriving from `OnPolicyConfig` that adds its own settings (PPOConfig; A2C's in
examples/a2c.py) and their ranges (`BOUNDS`); `--set NAME=VALUE` reaches every field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from surreal.runtime import bounds
from surreal.runtime.device import DEVICE_RE, DEVICE_RULE
from surreal.runtime.envs.make import resolve_env, spaces_of
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv

FEATURES = 512  # width of the CNN trunk's output (cnn.py), which the MLPs take for images
TINY, HUGE = 1e-12, bounds.UNBOUNDED  # "> 0", and no natural upper bound


@dataclass(frozen=True)
class OnPolicyConfig(bounds.Settings):
    section: ClassVar[str] = "onpolicy"
    # Every numeric setting's range (bounds.py); a subclass adds its own: {**OnPolicyConfig.BOUNDS, ...}.
    BOUNDS: ClassVar[bounds.Bounds]

    # --- sampling (actors) ---
    envs_per_agent: int = 4  # envs one logical agent steps; a worker batches all of its agents'
    fragment_length: int = 128  # env steps per env in one fragment an actor sends (T)
    credits_per_worker: int = 2  # fragments a worker may have in flight (backpressure window)
    max_policy_lag: int = 4  # learner drops fragments more than this many versions old

    # --- the batch and the optimizer (learner) ---
    steps_per_update: int = 2048  # env steps (all workers) per update: the batch
    learning_rate: float = 3e-4  # Adam step size at the start
    anneal_lr: bool = True  # decay the learning rate linearly to 0 at total_steps
    adam_eps: float = 1e-5  # Adam epsilon (CleanRL's value; torch default 1e-8)
    max_grad_norm: float = 0.5  # global gradient norm clip
    gamma: float = 0.99  # discount factor
    gae_lambda: float = 0.95  # GAE lambda (1: Monte Carlo returns bootstrapped at the fragment's end)
    learner_threads: int = 1  # torch intra-op threads in the learner
    device: str = "auto"  # learner device: auto (CUDA when torch sees a GPU, else CPU), cpu, cuda, cuda:N

    # --- normalization ---
    norm_obs: bool = True  # normalize observations with running statistics
    norm_reward: bool = True  # scale rewards by the running std of discounted returns
    obs_clip: float = 10.0  # clip normalized observations to [-obs_clip, obs_clip]
    reward_clip: float = 10.0  # clip scaled rewards to [-reward_clip, reward_clip]
    # Dict observations: the top-level keys the policy observes (empty: all of them). Leaves a key
    # no network here encodes out (MiniGrid's Text `mission`: --set obs_keys=image,direction).
    obs_keys: tuple[str, ...] = ()

    # --- trust (what the learner accepts from actors; see fragment.py) ---
    max_abs_reward: float = 1e6  # a fragment with a larger raw reward is rejected as corrupt (a
    #   broken or unstable environment); raise it for environments whose rewards are this large

    # --- networks (separate policy and value MLPs) ---
    hidden_sizes: tuple[int, ...] = (64, 64)  # hidden layer widths of both MLPs
    activation: str = "tanh"  # "tanh" or "relu"
    log_std_init: float = 0.0  # initial log std of the Gaussian policy (Box actions)
    ortho_init: bool = True  # orthogonal init (gain sqrt(2), 0.01 policy head, 1 value head)

    # --- bookkeeping ---
    checkpoint_every: int = 50  # updates between checkpoints (and one at the end, and on SIGTERM)
    checkpoint_seconds: float = 60.0  # and at least this often: what a SIGKILL can lose at most
    progress_deadline_seconds: float = 600.0  # a learner that counts no env step, or applies no update,
    #   for this long while it trains fails the run, naming which (runtime/deadline.py)
    eval_interval: int = 50_000  # env steps between evaluations (the final policy always)
    eval_episodes: int = 10  # episodes per evaluation
    eval_deterministic: bool = True  # evaluate the policy's mode; False: its samples (an Atari
    #   policy's argmax can stall a game for its 27k-step limit, e.g. never FIRE after a lost life)
    final_eval_timeout: float = 600.0  # seconds the learner waits for the final evaluation
    # --learners N: seconds the ranks have to join their group from its start (then half as long
    # again to form it); a group that misses it fails the run, naming the ranks (ranks.JOIN_TIMEOUT)
    rank_join_seconds: float = 60.0

    def validate(self) -> None:
        super().validate()
        self.require(bool(DEVICE_RE.fullmatch(self.device)), "device", DEVICE_RULE)


# The counts and waits from what a worker, an evaluator and a learner can hold and finish, the
# coefficients from their meaning.
OnPolicyConfig.BOUNDS = {
    "envs_per_agent": (1, bounds.MAX_WORKER_ENVS), "fragment_length": (1, 100_000),
    "credits_per_worker": (1, 64), "max_policy_lag": (0, 1_000_000),
    "steps_per_update": (1, 10_000_000), "learning_rate": (TINY, 1.0), "adam_eps": (TINY, 1.0),
    "max_grad_norm": (TINY, HUGE), "gamma": (TINY, 1.0), "gae_lambda": (0.0, 1.0),
    "learner_threads": (1, 1024), "obs_clip": (TINY, HUGE), "reward_clip": (TINY, HUGE),
    "max_abs_reward": (TINY, 1e30), "log_std_init": (-20.0, 20.0), "checkpoint_every": (1, 10**9),
    "checkpoint_seconds": (1e-3, bounds.WEEK), "progress_deadline_seconds": (1.0, bounds.WEEK),
    "eval_interval": (1, 10**13),
    "eval_episodes": (1, bounds.MAX_EVAL_EPISODES), "final_eval_timeout": (1e-3, bounds.WEEK),
    "rank_join_seconds": (1e-3, bounds.WEEK),
}  # fmt: skip


def check_config(cfg: OnPolicyConfig, env: EnvRef | str, *, resolved: ResolvedEnv | None = None) -> None:
    """Raise ValueError if `cfg` cannot train on `env`: image observations are scaled to [0, 1]
    inside the CNN, so normalizing them is refused rather than ignored."""
    facts = resolved or resolve_env(env)
    if cfg.norm_obs and facts.pixels:
        raise ValueError(f"{cfg.section}.norm_obs must be false for image observations ({env}): the CNN "
                         "scales its uint8 input itself")  # fmt: skip
    spaces = spaces_of(facts).keep(cfg.obs_keys, str(env))  # what the policy observes: every leaf encodable
    # The policy and value MLPs (on the CNN's features for images), and the update's batch.
    width = spaces.obs_dim if not spaces.has_image else FEATURES
    params = sum(bounds.mlp_parameters([width, *cfg.hidden_sizes, out]) for out in (spaces.head_dim, 1))
    row = spaces.obs_dim * (1 if spaces.has_image else 4) + 4 * spaces.action_dim + 32
    bounds.check_learner_memory(cfg.section, params, cfg.steps_per_update * row)
