"""The master's ledger of handed-out perturbations: which results it may accept.

Each published version carries a nonce; logical agent `a` may evaluate the pairs
`pair_seed(nonce, a, j)` for j < that version's pairs_per_agent. A result is accepted once, if its
version is one this master published and at most `max_staleness` behind, and its seed is the one
that version handed to that agent at that index. State is O(window x results per version),
whatever the run's length.

`pairs_per_agent` and `max_staleness` may change (the agent count was scaled): a version keeps the
hand-out it was opened with, and the window changes at the next `open`, so nothing already handed
out is refused for it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from surreal.runtime.es.noise import pair_seed, version_nonce

REJECT_REASONS = (
    "stale",  # evaluated more than max_staleness versions ago
    "unknown_version",  # a version this master never published (the future, or before a restart)
    "unknown_seed",  # a seed never handed to that agent at that index
    "duplicate",  # the same (version, agent, pair) came back before
    "nan",  # a return that is NaN or infinite
    "invalid",  # a batch whose tensors do not fit together (every row is counted)
    "bad_moments",  # a batch whose observation moments are impossible (every row is counted)
)


@dataclass
class _Version:
    nonce: int
    pairs_per_agent: int  # the hand-out's size when the version was opened
    returned: set[tuple[int, int]] = field(default_factory=set)  # (agent_id, pair) seen


class Handout:
    def __init__(self, experiment_seed: int, pairs_per_agent: int, max_staleness: int) -> None:
        self.experiment_seed = experiment_seed
        self.pairs_per_agent = pairs_per_agent
        self.max_staleness = max_staleness
        self.current = -1
        self.oldest = -1  # the oldest version whose results are accepted
        self._open: dict[int, _Version] = {}
        self.rejected: Counter[str] = Counter(dict.fromkeys(REJECT_REASONS, 0))

    def open(self, version: int, *, keep_window: bool = False) -> int:
        """Hand out `version` (newer than every earlier one) with `pairs_per_agent` pairs per
        agent; forget versions that fell out of the window (`keep_window`: none that is accepted
        now, whatever `max_staleness`; for a new hand-out without an update). Returns the
        version's nonce."""
        if version <= self.current:
            raise ValueError(f"version {version} is not newer than {self.current}")
        oldest = version - self.max_staleness
        if keep_window and self.current >= 0:
            oldest = min(oldest, self.oldest)
        self.current, self.oldest = version, oldest
        nonce = version_nonce(self.experiment_seed, version)
        self._open[version] = _Version(nonce, self.pairs_per_agent)
        for old in [v for v in self._open if v < oldest]:
            del self._open[old]
        return nonce

    def nonce(self, version: int) -> int:
        return self._open[version].nonce

    def pairs_of(self, version: int) -> int:
        """Pairs per agent that `version` handed out."""
        return self._open[version].pairs_per_agent

    def check(
        self, version: int, agent_id: int, pair: int, seed: int, returns: tuple[float, float]
    ) -> str | None:
        """Accept the result (None) or name the reason it is rejected (counted)."""
        reason = self._reason(version, agent_id, pair, seed, returns)
        if reason is None:
            self._open[version].returned.add((agent_id, pair))
        else:
            self.rejected[reason] += 1
        return reason

    def _reason(
        self, version: int, agent_id: int, pair: int, seed: int, returns: tuple[float, float]
    ) -> str | None:
        if version > self.current:
            return "unknown_version"
        if version < self.oldest:
            return "stale"
        opened = self._open.get(version)
        if opened is None:
            return "unknown_version"
        if not 0 <= pair < opened.pairs_per_agent or seed != pair_seed(opened.nonce, agent_id, pair):
            return "unknown_seed"
        if (agent_id, pair) in opened.returned:
            return "duplicate"
        if not all(r == r and abs(r) != float("inf") for r in returns):
            return "nan"
        return None
