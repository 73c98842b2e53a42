"""Bytes on the wire per env step of a pixel environment's fragments: whole frame stacks against
each new frame once (runtime/onpolicy/frames.py).

A real Actor of the environment's default preset (one worker of `--agents` agents, the preset's
envs per agent and fragment length, a freshly initialized policy) collects `--fragments` fragments
in a row, as it sends them. Each is encoded into the message the actor's stream sends (the
protocol's codec, surreal.protocol.codec), once as it travels now and once with the old encoding,
every step's whole [C, H, W] stack in `obs` [T+1, N, C, H, W] (kept here only as the comparison).
Prints the encoded bytes per env step of both, their ratio, the key stacks per fragment (row 0 of
each env and the resets after lost lives), the time to encode and to rebuild the stacks, and the
create-time bound (fragment.fragment_bytes) per env step.

    python benchmarks/pixel_bytes.py [--env ALE/Breakout-v5] [--agents 1] [--fragments 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def old_encoding(sent: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fragment as it travelled before frames.py: the rebuilt stacks whole in `obs`."""
    from surreal.runtime.onpolicy.frames import WIRE_TENSORS, with_stacks

    old = with_stacks(sent)
    return {"obs": old.pop("obs"), **{k: v for k, v in old.items() if k not in WIRE_TENSORS}}


def message_bytes(tensors: dict[str, np.ndarray]) -> int:
    """The size of the ExperienceRequest the actor's stream sends for `tensors` (client.py)."""
    from surreal.protocol.codec import encode_map
    from surreal.protocol.v1 import surreal_pb2 as pb

    fragment = pb.Fragment(policy_version=0, tensors=encode_map(tensors))
    return int(pb.ExperienceRequest(fragment=fragment).ByteSize())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Breakout-v5", help="a pixel environment")
    parser.add_argument("--agents", type=int, default=1, help="agents in the worker")
    parser.add_argument("--fragments", type=int, default=4, help="fragments collected in a row")
    args = parser.parse_args()

    from surreal.algorithms.ppo import PPO
    from surreal.algorithms.ppo.presets import preset_for
    from surreal.runtime.envs.make import resolve_env, spaces_for
    from surreal.runtime.onpolicy.actor import Actor
    from surreal.runtime.onpolicy.fragment import fragment_bytes
    from surreal.runtime.onpolicy.frames import encode_stacks
    from surreal.runtime.onpolicy.learner import Learner

    cfg, spaces = preset_for(args.env), spaces_for(args.env)
    if not spaces.pixels:
        raise SystemExit(f"{args.env} has vector observations: they travel as they are")
    actor = Actor(cfg, args.env, args.agents * cfg.envs_per_agent, seed=0)
    actor.set_params(Learner(PPO(), cfg, spaces, 10**12).params())
    old_total = new_total = steps = keys = 0
    encode_s = rebuild_s = 0.0
    for _ in range(args.fragments):
        sent = actor.collect()
        start = time.perf_counter()
        old = old_encoding(sent)
        rebuild_s += time.perf_counter() - start
        start = time.perf_counter()
        encode_stacks(old["obs"])
        encode_s += time.perf_counter() - start
        old_total += message_bytes(old)
        new_total += message_bytes(sent)
        steps += sent["rewards"].size
        keys += len(sent["obs_key_index"])
    actor.close()
    t_len, n = cfg.fragment_length, actor.envs.num_envs
    bound = fragment_bytes(cfg, resolve_env(args.env), args.agents) / (t_len * n)
    print(f"{args.env}, default preset: {args.fragments} fragments of {t_len} steps x {n} envs, "
          f"{spaces.image_shape} uint8 stacks; {keys / args.fragments:.1f} key stacks per fragment "
          f"({n} of them row 0)", flush=True)  # fmt: skip
    print(f"  whole stacks (old): {old_total / steps:10,.0f} bytes per env step")
    print(f"  new frames (new):   {new_total / steps:10,.0f} bytes per env step  "
          f"({old_total / new_total:.2f}x fewer)")  # fmt: skip
    print(f"  create-time bound:  {bound:10,.0f} bytes per env step (fragment.fragment_bytes)")
    print(f"  per fragment: encode {encode_s / args.fragments * 1e3:.1f} ms (actor), "
          f"rebuild {rebuild_s / args.fragments * 1e3:.1f} ms (learner)")  # fmt: skip


if __name__ == "__main__":
    main()
