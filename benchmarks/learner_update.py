"""The PPO learner's update alone, on a device: how many env steps per second it can train on.

For the HalfCheetah-v5 preset (MLPs) and the Atari preset (Nature CNN on uint8 frames), scaled to
each agent count, the learner takes real fragments (one Actor's, collected once) until a batch is
due, then runs full updates (values and GAE, the epochs, publishing the weights) back to back; the
first ones warm up and are not timed.

    python benchmarks/learner_update.py [--env ENV --agents 2,64,512] [--devices cpu,cuda] [--updates 6]

Without --env: HalfCheetah-v5 at 2, 64 and 512 agents and ALE/Breakout-v5 at 2 and 8. A device
torch cannot see is skipped with a line saying so (run it on a GPU machine for the cuda figures).
The CPU figures use the preset's torch threads (one), as the learner component does by default.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

CASES = {"HalfCheetah-v5": "2,64,512", "ALE/Breakout-v5": "2,8"}  # env -> agent counts to time
WARMUP = 2


def measure(env_id: str, agents: int, device: str, updates: int) -> dict[str, float]:
    import torch

    from surreal.algorithms.ppo import PPO
    from surreal.algorithms.ppo.presets import preset_for
    from surreal.protocol.types import Fragment
    from surreal.runtime.envs.make import spaces_for
    from surreal.runtime.onpolicy.actor import Actor
    from surreal.runtime.onpolicy.learner import Learner

    cfg = preset_for(env_id, agents)
    torch.set_num_threads(cfg.learner_threads)
    learner = Learner(PPO(), dataclasses.replace(cfg, device=device), spaces_for(env_id), 10**12)
    actor = Actor(cfg, env_id, cfg.envs_per_agent * min(agents, 16), seed=0)
    actor.set_params(learner.params())
    fragment = actor.collect()
    actor.close()
    times = []
    for i in range(WARMUP + updates):
        while not learner.ready():
            learner.add_fragment(Fragment("bench", learner.counters.version, fragment))
        start = time.perf_counter()
        assert learner.update(), "the update was skipped"
        learner.params()  # what the serving loop publishes after every update
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    seconds = sorted(times)[len(times) // 2]  # the median update
    return {"batch": cfg.steps_per_update, "seconds": seconds, "steps_per_s": cfg.steps_per_update / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", help="time this environment's preset only (with --agents)")
    parser.add_argument("--agents", default="2", help="agent counts whose preset to time (with --env)")
    parser.add_argument("--devices", default="cpu,cuda", help="torch devices, comma-separated")
    parser.add_argument("--updates", type=int, default=6, help="timed updates per measurement")
    args = parser.parse_args()
    import torch

    cases = {args.env: args.agents} if args.env else CASES
    for device in args.devices.split(","):
        if device.startswith("cuda") and not torch.cuda.is_available():
            print(f"{device}: torch {torch.__version__} sees no CUDA device here; skipped", flush=True)
            continue
        name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU, 1 thread"
        for env_id, agents in ((e, int(a)) for e, counts in cases.items() for a in counts.split(",")):
            r = measure(env_id, agents, device, args.updates)
            print(f"{env_id} preset for {agents:4d} agents on {device} ({name}): batch {r['batch']:6,d}  "
                  f"update {r['seconds'] * 1e3:8.1f} ms  {r['steps_per_s']:10,.0f} env steps/s trained",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
