"""A dedup run's work folder: what the run has read, encoded and found, kept on disk so a killed run resumes.

:class:`Work` is the folder: flat files of the questions' texts, keys and hashes (:class:`Strings`), their vectors
(``vectors.npy``), the candidate pairs found (``edges.*``) and ``state.json``, the stages done. A folder is
dupq's only when it holds :data:`MARKER`: only such a folder is reused or deleted (:mod:`dupq.dedup.run`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import read_json, write_json
from dupq.dedup.clusters import Edges

MARKER = "dupq-dedup-work"  # the file that says dupq made the work folder: only such a folder is reused or deleted


class Work:
    """The work folder: flat files of texts, keys, hashes, vectors and edges, and ``state.json``."""

    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def state(self) -> dict:
        p = self.path("state.json")
        state = read_json(p, "the work folder's state") if p.is_file() else {}
        if not isinstance(state, dict):
            raise DupqError(f"the work folder's state is corrupt: {p} is not a JSON object.")
        return state

    def record(self, **changes) -> None:
        write_json(self.path("state.json"), {**self.state, **changes})

    def strings(self, name: str) -> Strings:
        return Strings(self.path(f"{name}.bin"), self.path(f"{name}.offsets"))

    @property
    def vectors(self) -> np.ndarray:
        return np.load(self.path("vectors.npy"), mmap_mode="r+")

    def edges(self, upto: int | None = None) -> Edges:
        """The edges the search has written (its first ``upto`` of them)."""
        count = self.state.get("edges", 0) if upto is None else upto
        a, b, s = (np.fromfile(self.path(n), dtype=t, count=count) for n, t in EDGE_FILES)
        return Edges(a.astype(np.int64), b.astype(np.int64), s)


EDGE_FILES = (("edges.a", np.int64), ("edges.b", np.int64), ("edges.score", np.float32))


class Strings:
    """Strings appended to one file, found again by their offsets (memory-mapped when read)."""

    def __init__(self, data: Path, offsets: Path):
        self.data, self.offsets = data, offsets

    def writer(self):
        return _StringWriter(self)

    def __len__(self) -> int:
        return max(0, self.offsets.stat().st_size // 8 - 1)

    def read(self) -> Callable[[int], str]:
        offsets = np.fromfile(self.offsets, dtype=np.int64)
        data = np.memmap(self.data, dtype=np.uint8, mode="r") if offsets[-1] else np.zeros(0, np.uint8)
        return lambda i: bytes(data[offsets[i] : offsets[i + 1]]).decode("utf-8")

    def chunks(self, size: int, start: int = 0) -> Iterator[tuple[int, list[str]]]:
        get = self.read()
        for lo in range(start, len(self), size):
            yield lo, [get(i) for i in range(lo, min(len(self), lo + size))]


class _StringWriter:
    def __init__(self, strings: Strings):
        self.data, self.offsets = open(strings.data, "wb"), open(strings.offsets, "wb")
        self.end, self.pending = 0, [0]

    def add(self, s: str) -> None:
        b = s.encode("utf-8")
        self.data.write(b)
        self.end += len(b)
        self.pending.append(self.end)
        if len(self.pending) >= 65_536:
            self._flush()

    def _flush(self) -> None:
        np.asarray(self.pending, dtype=np.int64).tofile(self.offsets)
        self.pending = []

    def close(self) -> None:
        self._flush()
        for f in (self.data, self.offsets):
            f.flush()
            os.fsync(f.fileno())
            f.close()
