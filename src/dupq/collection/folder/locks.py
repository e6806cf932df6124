"""The lock between a collection's searches and its writes, within one process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class SharedLock:
    """Many holders of ``shared()`` at once, or one of ``exclusive()`` (which waiting readers yield to)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer)
            self._writer = True
            self._cond.wait_for(lambda: not self._readers)
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
