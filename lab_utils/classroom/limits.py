"""How often one learner may write to the class server: a token bucket per pseudonym.

A notebook sends a handful of messages a minute (a commit, a reveal, an exercise check). A bucket
holds ``burst`` tokens and refills at ``per_second``; each request takes one, and a request that
finds the bucket empty is refused (HTTP 429) with the rate in the message. A loop gone wrong in
one notebook (or a learner testing the server) then costs the others nothing.
"""

from __future__ import annotations

import threading
import time

BURST, PER_SECOND = 20, 2.0
MAX_BUCKETS = 5000  # bounded memory: oldest buckets are dropped beyond this


class RateLimit:
    def __init__(self, burst: int = BURST, per_second: float = PER_SECOND, clock=time.monotonic):
        self.burst, self.per_second, self.clock = burst, per_second, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # who -> (tokens, when)
        self._lock = threading.Lock()

    def allow(self, who: str) -> bool:
        """Take one token from ``who``'s bucket; False if it is empty."""
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.pop(who, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - then) * self.per_second)
            allowed = tokens >= 1
            self._buckets[who] = (tokens - 1 if allowed else tokens, now)  # newest last
            if len(self._buckets) > MAX_BUCKETS:
                del self._buckets[next(iter(self._buckets))]
            return allowed

    def describe(self) -> str:
        return f"at most {self.burst} requests at once, then {self.per_second:g} per second"
