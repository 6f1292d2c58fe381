"""A bounded, thread-safe memo: the app's caches of validated configurations and of estimates (app/backend.py).

Unlike st.cache_data it works on any thread (exercise 2 searches its best choice on one of its own) and hands out
the value itself, not a copy, so a cached estimate costs nothing to read; callers read values and never change them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future


class Memo:
    """Results by key, the least recently used dropped past `size`; concurrent calls for one key compute it once,
    and a failure is not kept (the next call computes again), nor is the result for a key that cannot be hashed."""

    def __init__(self, size: int):
        self._size, self._lock, self._items = size, threading.Lock(), OrderedDict()

    def get(self, key, compute):
        try:
            hash(key)
        except TypeError:
            return compute()
        with self._lock:
            future = self._items.get(key)
            owner = future is None
            if owner:
                future = self._items[key] = Future()
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
            else:
                self._items.move_to_end(key)
        if owner:
            try:
                future.set_result(compute())
            except BaseException as exc:
                future.set_exception(exc)
                with self._lock:
                    if self._items.get(key) is future:
                        del self._items[key]
        return future.result()
