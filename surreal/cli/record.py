"""`surreal record NAME -o agent.mp4`: evaluation episodes of an experiment's latest checkpoint,
rendered into a video (an .mp4, or a .gif with no encoder to install)."""

from __future__ import annotations

import gc
import signal
from pathlib import Path
from typing import Any

import click

from surreal.cli.common import fail
from surreal.orchestrator.home import ExperimentError
from surreal.spec import MAX_SEED

# The episodes play one after another into one video: a thousand CartPole episodes of 500 steps are
# 2.8 hours at 50 fps, more than anyone watches; a larger number is a slip of the keyboard.
MAX_EPISODES = 1000


@click.command()
@click.argument("where", metavar="NAME|PATH")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("agent.mp4"),
              show_default=True, help="The video: a .mp4 (needs surreal[video]) or a .gif (a short clip: it "
              "holds its frames in memory); replaced if it exists.")  # fmt: skip
@click.option("--episodes", type=click.IntRange(1, MAX_EPISODES), default=3, show_default=True,
              help="Episodes to play, one by one.")  # fmt: skip
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Seeds the environment (and sampling).")  # fmt: skip
@click.option("--sample/--mode", default=None,
              help="Sample actions, or take the policy's mode [default: as its evaluator did].")  # fmt: skip
@click.option("--fps", type=click.FloatRange(0, 1000, min_open=True),
              help="Frames per second [default: the environment's render_fps, else 30].")  # fmt: skip
def record(
    where: str, output: Path, episodes: int, seed: int, sample: bool | None, fps: float | None
) -> None:
    """Render evaluation episodes of an experiment's latest checkpoint into a video.

    NAME is an experiment on this machine (local or containers backend); a PATH is an experiment's
    folder or a checkpoint file in it (a copy of a cluster experiment's folder, for one). Ctrl-C or
    SIGTERM stops it within a second, the unfinished video removed (exit code 130 for both)."""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)  # before the imports of seconds
    try:
        from surreal.orchestrator import trained  # torch and the environment: only this command loads them

        trained.check_output(output)
        policy = trained.load_policy(where, seed=seed)
        playing = _count(episodes, "episode")
        click.echo(f"{policy.spec.name}: {policy.spec.algo} on {policy.env}, version {policy.version} "
                   f"({policy.env_steps:,} env steps); recording {playing}", err=True)  # fmt: skip

        def progress(done: int, episode: trained.Episode) -> None:
            line = f"episode {done}/{episodes}: return {episode.ret:.1f}, {episode.frames} frames"
            click.echo(line, err=True)

        if sample is None:  # PPO's Atari preset evaluates samples: a mode can stall a game (no FIRE)
            sample = not getattr(policy.spec.config, "eval_deterministic", True)
        rec = trained.record(policy, output, episodes=episodes, seed=seed, deterministic=not sample, fps=fps,
                             progress=progress)  # fmt: skip
    except KeyboardInterrupt:  # the unfinished video is removed by now
        gc.freeze()  # exit at once: the interpreter's last collections would walk torch's objects (0.5 s)
        fail("interrupted", 130)
    except ExperimentError as exc:
        fail(str(exc), exc.exit_code)
    finally:
        signal.signal(signal.SIGTERM, old)
    if rec.stopped:
        click.echo(f"{output}: {rec.stopped}", err=True)
    returns = [e.ret for e in rec.episodes]
    mean = f"mean return {sum(returns) / len(returns):.1f}" if returns else "none ended"
    played = f"{_count(len(returns), 'episode')} ({mean})"
    click.echo(f"{output}: {rec.frames} frames of {rec.size[0]}x{rec.size[1]}, {played}, "
               f"{rec.bytes / 1e6:.1f} MB in {rec.seconds:.1f} s")  # fmt: skip


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
