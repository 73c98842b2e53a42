"""The actor role, written once for every family: connect to where the experience goes (the learner,
or the replay shard of the actor's index), take the learner's parameters when they change, and
send what the family's core makes until the parameters say the run is done (exit 0). A lost peer
is retried with backoff (reconnect.work_connected); what was in flight is lost.

A family gives only its core (`Core`): the on-policy fragments (onpolicy/actor.py), the off-policy
transitions (offpolicy/actor.py), ES's evaluated pairs (es/actor.py).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from surreal.protocol.client import ExperienceStream, LearnerClient, ProtocolError
from surreal.protocol.types import Params
from surreal.runtime.reconnect import GIVE_UP_SECONDS, work_connected
from surreal.runtime.run import RunContext, extras_done

log = logging.getLogger(__name__)

PROGRESS_LOG_SECONDS = 30.0  # how often an actor logs what it has sent
IDLE_POLL_SECONDS = (0.02, 0.5)  # polling while the core has nothing to do: first and longest
#   interval; doubling in between keeps hundreds of idle workers from flooding the learner


class Core(Protocol):
    version: int  # of the parameters it holds; -1 before the first

    def set_params(self, params: Params) -> None: ...

    def work(self, stream: ExperienceStream) -> bool:
        """Make experience with the parameters held and send it; False when there was nothing to
        make (ES: every pair of this version handed out is done), and the loop asks again later."""
        ...

    def close(self) -> None: ...


def actor_seed(seed: int, index: int) -> int:
    """Distinct env seeds per worker: worker `index`'s envs use [seed_i, seed_i + num_envs)."""
    return seed * 1_000_003 + 10_007 * (index + 1)


def idle_backoff(idle_polls: int) -> float:
    """Seconds to wait before the next parameter poll after `idle_polls` fruitless ones."""
    first, longest = IDLE_POLL_SECONDS
    return min(longest, first * 2 ** min(idle_polls, 16))


def run_actor(core: Core, ctx: RunContext, sink: str | None = None, name: str = "actor") -> int:
    """Run `core` as worker `ctx.index`, its experience sent to `sink` (a replay shard's address)
    or, without one, to the learner rank that serves it. The core is closed at the end."""
    learner = LearnerClient(ctx.learner_for(ctx.index), ctx.token)
    target = learner if sink is None else LearnerClient(sink, ctx.token)

    def ended() -> bool:
        """The shard went away: the learner says whether the run is over."""
        try:
            params = learner.get_params(-1, timeout=5.0)
        except ProtocolError:
            return False
        return params is not None and extras_done(params.extras)

    apart = sink is not None
    peer = "replay shard" if apart else "learner"

    def connected() -> None:
        log.info("%s-%d connected to the %s at %s: %d agents of %s", name, ctx.index, peer,
                 sink or ctx.learner_for(ctx.index), ctx.agents_in_worker, ctx.env_id)  # fmt: skip

    try:
        return work_connected(
            target,
            f"{name}-{ctx.index}",
            lambda stream: serve(learner, stream, core, apart),
            peer=peer,
            on_connect=connected,
            ended=ended if apart else None,
        )
    finally:
        if target is not learner:
            target.close()
        learner.close()
        core.close()


def serve(learner: LearnerClient, stream: ExperienceStream, core: Core, apart: bool = False) -> int:
    """The loop: parameters in, experience out, until the learner says the run is done.

    The learner's credits say which version is current: the actor asks only when it is not the one
    held, when nobody said (a shard's credits), or when the core is idle. When the stream is not the
    learner's (`apart`), an unreachable learner (restarting) is asked again for GIVE_UP_SECONDS.
    Its idle time is noted on the stream (the actors' waiting share, as their credit waits are)."""
    sent, idle = 0, 0
    next_report, heard_at = time.monotonic() + PROGRESS_LOG_SECONDS, time.monotonic()
    while True:
        if time.monotonic() >= next_report:
            log.info("sent %d batches; policy version %d", sent, core.version)
            next_report = time.monotonic() + PROGRESS_LOG_SECONDS
        params = None
        if idle or stream.latest_version != core.version:
            try:
                params = learner.get_params(core.version)
            except ProtocolError as exc:
                if not apart or time.monotonic() - heard_at > GIVE_UP_SECONDS:
                    raise  # the learner's own stream: work_connected reconnects
                log.info("learner unreachable (%s); asking again", exc)
                wait(stream, 1.0)
                continue
            heard_at = time.monotonic()
        if params is not None:
            core.set_params(params)
            if extras_done(params.extras):
                log.info("the run is done after %d batches: exiting", sent)
                return 0
        if core.version >= 0 and core.work(stream):
            sent, idle = sent + 1, 0
        else:  # no parameters yet, or nothing to do with them
            wait(stream, idle_backoff(idle))
            idle += 1


def wait(stream: ExperienceStream, seconds: float) -> None:
    """Sleep `seconds` on the learner's side's account: the next fragment says it was waited."""
    started = time.monotonic()
    time.sleep(seconds)
    stream.note_wait(time.monotonic() - started)
