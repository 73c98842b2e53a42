"""The worker side of a lost learner: reconnect with exponential backoff, give up after a while."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from surreal.protocol.client import ExperienceStream, LearnerClient, ProtocolError
from surreal.runtime.exits import EXIT_LEARNER_GONE

log = logging.getLogger(__name__)

# A worker (or the evaluator) that cannot reach the learner this long exits EXIT_LEARNER_GONE. The backstop:
# on Kubernetes the component's watch of the learner's Job (orchestrator/kube/watch.py) ends it
# within seconds of that Job's end; this bound stays for a cluster whose API it cannot read.
GIVE_UP_SECONDS = 900.0
FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 0.5, 10.0
READY_SECONDS = 30.0  # how long one attempt waits for its peer to be ready
# A worker whose peer is not the learner (a replay shard) asks the learner whether the run is over
# at least this often while that peer is out of reach (a wait for it and a backoff): at the end the
# learner serves on for the workers that asked it lately (serving.ASKING_SECONDS) until they have
# heard the end. With 30 s waits, an actor that lost its shard near the end was no longer among
# them, found shard and learner gone, and retried until stopped (seen in CI, containers).
ENDED_CHECK_SECONDS = 3.0


def work_connected(
    client: LearnerClient,
    worker_id: str,
    work: Callable[[ExperienceStream], int],
    *,
    peer: str = "learner",
    on_connect: Callable[[], None] | None = None,
    give_up_seconds: float = GIVE_UP_SECONDS,
    ended: Callable[[], bool] | None = None,
) -> int:
    """Open an experience stream as `worker_id` and return `work(stream)`'s exit code.

    A lost connection (learner restart, network) is retried with exponential backoff; whatever was
    in flight is lost, which the algorithms here do not miss. After `give_up_seconds` of failures
    in a row this returns EXIT_LEARNER_GONE, so a worker whose learner is gone for good ends
    instead of hanging. `ended()`, asked after a failure: the run is over (exit 0), for a worker
    whose peer is not the learner (a replay shard that left at the end); it is then asked at least
    every 2 x ENDED_CHECK_SECONDS while the peer is out of reach.
    """
    backoff, failing_since = FIRST_BACKOFF_SECONDS, None  # monotonic time of the first failure
    wait, most = (READY_SECONDS, MAX_BACKOFF_SECONDS) if ended is None else (ENDED_CHECK_SECONDS,) * 2
    while True:
        try:
            client.wait_ready(timeout=wait)
            stream = client.experience(worker_id)
            if on_connect is not None:
                on_connect()
            backoff, failing_since = FIRST_BACKOFF_SECONDS, None
            try:
                return work(stream)
            finally:
                stream.close()
        except (ProtocolError, ConnectionError, TimeoutError) as e:
            if ended is not None and ended():
                log.info("%s connection lost (%s) after the run ended: done", peer, e)
                return 0
            failing_since = failing_since or time.monotonic()
            down = time.monotonic() - failing_since
            if down > give_up_seconds:
                log.error("%s unreachable for %.0fs, giving up: %s", peer, down, e)
                return EXIT_LEARNER_GONE
            log.warning("%s connection lost (%s); retrying in %.1fs", peer, e, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, most)
