"""`surreal record NAME -o agent.mp4`: evaluation episodes of an experiment's latest checkpoint,
rendered into a video (an .mp4, or a .gif with no encoder to install)."""

from __future__ import annotations

from pathlib import Path

import click

from surreal.cli.common import fail


@click.command()
@click.argument("where", metavar="NAME|PATH")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("agent.mp4"), show_default=True,
              help="The video: a .mp4 (needs surreal[video]) or a .gif (replaced if it exists).")  # fmt: skip
@click.option("--episodes", type=int, default=3, show_default=True, help="Episodes to play, one by one.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the environment (and sampling).")
@click.option("--sample/--mode", default=None,
              help="Sample actions, or take the policy's mode [default: as its evaluator did].")  # fmt: skip
@click.option("--fps", type=float, help="Frames per second [default: the environment's render_fps, else 30].")
def record(
    where: str, output: Path, episodes: int, seed: int, sample: bool | None, fps: float | None
) -> None:
    """Render evaluation episodes of an experiment's latest checkpoint into a video.

    NAME is an experiment on this machine (local or containers backend); a PATH is an experiment's
    folder or a checkpoint file in it (a copy of a cluster experiment's folder, for one)."""
    from surreal.orchestrator import trained  # torch and the environment: only this command loads them

    if output.suffix.lower() not in trained.VIDEO_SUFFIXES:
        fail(f"{output}: write a .mp4 or a .gif", code=2)
    if episodes < 1 or (fps is not None and not 0 < fps <= 1000):
        fail("--episodes must be at least 1 and --fps within (0, 1000]", code=2)
    if not output.parent.is_dir():
        fail(f"no folder {output.parent} to write {output.name} in", code=2)
    try:
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
    except trained.ExperimentError as exc:
        fail(str(exc))
    frames = sum(e.frames for e in rec.episodes)
    mean = sum(e.ret for e in rec.episodes) / len(rec.episodes)
    played = _count(len(rec.episodes), "episode")
    click.echo(f"{output}: {frames} frames of {rec.size[0]}x{rec.size[1]}, {played} "
               f"(mean return {mean:.1f}), {rec.bytes / 1e6:.1f} MB in {rec.seconds:.1f} s")  # fmt: skip


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
