"""The Redis cache (core.cache.RedisCache): Django's, with one client per connection pool
instead of one per call. It must still be a working cache on the real Redis: values and
timeouts round-trip, counters count, and threads sharing the backend see one another's writes."""

from __future__ import annotations

import threading
import time
import uuid

from core.cache import RedisCache


def backend(redis_url: str) -> RedisCache:
    return RedisCache(redis_url, {"KEY_PREFIX": f"test-cache-{uuid.uuid4().hex[:12]}"})


def test_the_cache_keeps_one_client_and_still_stores_expires_and_counts(redis_url):
    cache = backend(redis_url)
    first = cache._cache.get_client()
    cache.set("history", [1.5, 2.5], 60)
    assert cache.get("history") == [1.5, 2.5]
    cache.set("brief", "x", 1)
    assert cache.add("counter", 1, 60) is True
    assert cache.add("counter", 5, 60) is False  # already there: add leaves it
    assert cache.incr("counter", 2) == 3
    assert cache._cache.get_client() is first
    assert cache._cache.get_client(write=True) is first  # one server: one pool, one client
    time.sleep(1.2)
    assert cache.get("brief") is None
    cache.delete_many(["history", "counter"])  # not clear(): that empties the whole database
    assert cache.get("history") is None


def test_threads_sharing_the_backend_see_each_others_writes(redis_url):
    cache = backend(redis_url)
    errors: list[BaseException] = []

    def bump() -> None:
        try:
            for _ in range(50):
                cache.incr("hits")
        except BaseException as exc:
            errors.append(exc)

    cache.set("hits", 0, 60)
    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.get("hits") == 200
    cache.delete("hits")
