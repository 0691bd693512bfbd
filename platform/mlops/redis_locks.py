"""Entity locks held in Redis, so that replicas sharing one online store never lose an update.

The write-through reads an entity's history, appends the event and writes the history back. Two
replicas doing that at once for one card would each write a history without the other's event.
A read-modify-write therefore holds the Redis locks of its entities: all of them taken in one
server-side script (all or none, so two batches can never hold each other's keys), released by a
second script that deletes only the keys still holding this holder's token. A lock expires after
``ttl_s``, so a replica killed while holding one delays the others by at most that, never forever.
Waiting longer than ``wait_s`` is a FeatureStoreError (503): fail closed and fast.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mlops.errors import FeatureStoreError

if TYPE_CHECKING:
    import redis

# KEYS: the lock keys; ARGV: token, ttl in ms. 1 when every key was free and is now held, else 0.
_ACQUIRE = """
for _, key in ipairs(KEYS) do
    if redis.call('EXISTS', key) == 1 then return 0 end
end
for _, key in ipairs(KEYS) do
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
"""
_RELEASE = """
local released = 0
for _, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[1] then
        redis.call('DEL', key)
        released = released + 1
    end
end
return released
"""
_FIRST_PAUSE_S = 0.0005
_LONGEST_PAUSE_S = 0.02


class RedisEntityLocks:
    """Locks named ``<namespace>:lock:<join key>=<entity>`` in the Redis at ``url``."""

    def __init__(self, url: str, namespace: str, *, ttl_s: float = 10.0, wait_s: float = 5.0) -> None:
        import redis

        self.client: redis.Redis = redis.Redis.from_url(url, socket_timeout=wait_s, socket_connect_timeout=wait_s)
        self.namespace = namespace
        self.ttl_ms = int(ttl_s * 1000)
        self.wait_s = wait_s
        self._acquire: Any = self.client.register_script(_ACQUIRE)
        self._release: Any = self.client.register_script(_RELEASE)

    def key(self, join_key: str, entity: str) -> str:
        return f"{self.namespace}:lock:{join_key}={entity}"

    @contextmanager
    def holding(self, entities: Iterable[tuple[str, str]]) -> Iterator[None]:
        """Hold the locks of these (join key, entity) pairs for the duration of the block."""
        keys = sorted({self.key(join_key, entity) for join_key, entity in entities})
        if not keys:
            yield
            return
        token = secrets.token_hex(16)
        deadline, pause = time.monotonic() + self.wait_s, _FIRST_PAUSE_S
        try:
            while not self._acquire(keys=keys, args=[token, self.ttl_ms]):
                if time.monotonic() > deadline:
                    raise FeatureStoreError(f"online store entity locks still held by another replica after "
                                            f"{self.wait_s:g} s ({len(keys)} entities)")
                time.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE_S)
        except FeatureStoreError:
            raise
        except Exception as exc:  # the lock server failing is the store failing
            raise FeatureStoreError(f"online store entity locks failed: {type(exc).__name__}") from exc
        try:
            yield
        finally:
            self._release(keys=keys, args=[token])

    def close(self) -> None:
        self.client.close()
