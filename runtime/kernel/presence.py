"""Which tasks a caller is watching on a stream, for the operator's task page.

Counted in Django's cache: shared by the web processes when a shared cache is configured,
per process with the default local-memory cache. A count lives for ``ttl`` seconds after
its last sign of life (a stream's keep-alive), so a web process that died does not leave a
stream shown as attached for ever.
"""

from django.core.cache import cache


def _key(task_pk: int) -> str:
    return f"countersign:streams:{task_pk}"


def stream_attach(task_pk: int, ttl: float) -> None:
    key = _key(task_pk)
    if not cache.add(key, 1, ttl):
        try:
            cache.incr(key)
        except ValueError:  # expired between the two calls
            cache.set(key, 1, ttl)
        cache.touch(key, ttl)


def stream_alive(task_pk: int, ttl: float) -> None:
    cache.touch(_key(task_pk), ttl)


def stream_detach(task_pk: int) -> None:
    key = _key(task_pk)
    try:
        if cache.decr(key) <= 0:
            cache.delete(key)
    except ValueError:  # already expired
        pass


def streams_attached(task_pk: int) -> int:
    """How many streams watch the task now (as of their last keep-alive)."""
    return max(0, cache.get(_key(task_pk)) or 0)
