"""Rows the A2A hot path reads on every request (tokens, agents), kept per process for at
most ``LOOKUP_CACHE_SECONDS``.

A change made anywhere takes effect within that time: an entry is stamped with the time its
query *started*, so a row read just before a change committed is dropped no later than one
TTL after the change. A change made in this process (a save, a delete, a revoke) clears the
cache at once, and again when its transaction commits.
"""

import time

from django.db import transaction

# The bound the A2A endpoint promises: a revoked token, a deactivated tenant or a changed
# agent takes effect within one second in every web process.
LOOKUP_CACHE_SECONDS = 1.0
# A caller sending many different keys (say, guessed token prefixes) must not grow the cache
# without end: past this many entries it starts over.
LOOKUP_CACHE_MAX_ENTRIES = 10_000

MISSING = object()


class LookupCache:
    """A per-process map key -> (read at, value) whose entries live ``seconds``."""

    def __init__(self, seconds: float = LOOKUP_CACHE_SECONDS):
        self.seconds = seconds
        self.entries: dict = {}

    def get(self, key):
        """The value read less than ``seconds`` ago, or MISSING."""
        hit = self.entries.get(key)
        if hit is None or time.monotonic() - hit[0] >= self.seconds:
            return MISSING
        return hit[1]

    def load(self, key, loader, *, keep_none: bool = True):
        """Run ``loader()`` (a query) and keep its value under ``key``; return the value."""
        started = time.monotonic()
        value = loader()
        if value is None and not keep_none:
            self.entries.pop(key, None)
            return None
        if len(self.entries) >= LOOKUP_CACHE_MAX_ENTRIES:
            self.entries.clear()
        self.entries[key] = (started, value)
        return value

    def clear(self) -> None:
        self.entries.clear()

    def invalidate(self, **_signal_kwargs) -> None:
        """A signal receiver: clear now, and again once the change is committed (a request
        that read the old row in between would otherwise keep it for one more TTL)."""
        self.clear()
        transaction.on_commit(self.clear)
