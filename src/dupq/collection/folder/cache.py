"""The FAISS index of a SQLite-stored collection, and its cache file ``index.faiss``.

The store is the truth; the index lives in memory and is cached in ``index.faiss`` (rewritten atomically now and then;
the manifest records its count and CRC-32) so that an open need not re-add every vector. :meth:`FaissCache.open` checks
it whole (checksum, count, its first and last vectors against the stored ones; else it is rebuilt from the stored
vectors) and adds the rows beyond it, so after a crash at any moment index and store agree without re-encoding. A
failure to write the cache (a full disk) is kept in :attr:`FaissCache.cache_error`, never raised: the questions are
stored and the next open rebuilds what the file lacks. A question's FAISS position is its id.

Past :data:`REBUILD_SHARE` removed vectors in an HNSW graph, a graph of the others is built in the background
(:meth:`FaissCache.replace`) and written with the manifest's ``rebuilt`` generation raised; other processes load it at
their next search (:meth:`FaissCache.stale`).

Not thread-safe: the collection holds its lock around :meth:`search` (shared) and :meth:`catch_up` (exclusive).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from dupq.collection.folder.store import SQLiteStore
from dupq.core.errors import DupqError
from dupq.core.files import file_lock, read_json, write_json
from dupq.index.vectors import IndexConfig, VectorIndex

log = logging.getLogger(__name__)

INDEX_FILE = "index.faiss"
LOCK_FILE = "index.lock"  # held while index.faiss and the manifest are rewritten
SAVE_ON_CLOSE = 1_000  # close() rewrites index.faiss when at least this many rows are not in it
SAVE_DURING_ADD = 50_000  # an add rewrites it when this many are not (bounds the replay on open)
# Vectors added to FAISS at a time when catching up: a rebuilt ivfpq index trains on the first
# chunk, as its build did (building.BUILD_CHUNK), not on one 64-vector store row.
CATCH_UP_CHUNK = 50_000
# An HNSW graph is built again without the removed questions once they are this share of its vectors
# (searches walk past them, and memory keeps them; Qdrant's vacuum starts at the same 20 %).
REBUILD_SHARE = 0.2


class FaissCache:
    """A :class:`~dupq.index.vectors.VectorIndex` over a SQLite store's vectors, with ``index.faiss`` as its cache."""

    def __init__(self, folder: Path, store: SQLiteStore, manifest: dict, index: VectorIndex, saved: int):
        self.folder, self.store, self.manifest = folder, store, manifest  # the manifest is written with the file
        self.index = index
        self._saved = saved  # vectors in index.faiss on disk
        self._version = None  # the store's version when the index last caught up with it
        self.cache_error: str | None = None  # why index.faiss could not be written, if it could not
        self.live: np.ndarray | None = None  # (len(index),) bool: False for removed ids; None when none is removed
        self.removed_share = 0.0  # the share of the index's vectors that are removed questions'
        self.removed_held = 0  # how many of the index's vectors are removed questions'
        self.refreshed = 0.0  # time.time() of the last catch-up
        self._file = _identity(folder / INDEX_FILE)  # index.faiss as this process last saw it (a new one: a rebuild?)

    @classmethod
    def open(cls, folder: Path, store: SQLiteStore, manifest: dict) -> FaissCache:
        """The cached index if it is the file the manifest describes, caught up with the store (else rebuilt from it)."""
        count = store.check()
        index, saved = cls._cached(folder, store, manifest, count)
        cache = cls(folder, store, manifest, index, saved)
        cache.catch_up()
        return cache

    @staticmethod
    def _cached(folder: Path, store: SQLiteStore, manifest: dict, count: int) -> tuple[VectorIndex, int]:
        """``index.faiss`` if it is the file the manifest describes and agrees with the stored vectors, else an empty index."""
        dim, config = manifest["dim"], IndexConfig(**manifest["index"])
        if manifest.get("checksum") is None:  # written before checksums were recorded: rebuild once
            return VectorIndex(dim, config), 0
        try:
            index = VectorIndex.load(
                folder / INDEX_FILE, dim, config, checksum=manifest.get("checksum"), extent=manifest.get("count")
            )
        except DupqError as e:
            log.info("rebuilding the index of %s from the stored embeddings: %s", folder, e)
            return VectorIndex(dim, config), 0
        n, ids = len(index), index.ids()
        if n != manifest.get("count") or n > count:  # not the file the manifest describes, or not this database's
            return VectorIndex(dim, config), 0
        for i in {int(ids[0]), int(ids[-1])} if len(ids) and index.exact else ():  # ivfpq: the checksum vouches
            if not np.array_equal(index.vector(i), next(store.vectors(i, i + 1))[0]):
                return VectorIndex(dim, config), 0
        return index, n

    def __len__(self) -> int:
        return len(self.index)

    @property
    def exact(self) -> bool:
        return self.index.exact

    def search(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``scores (Q, k')``, ``ids (Q, k')`` (-1: none) among the ``allowed`` ids (a bool mask; None: every
        stored one); removed ids are never found. ivfpq re-ranks its short list with the stored vectors."""
        if self.live is not None:
            allowed = self.live if allowed is None else allowed & self.live
        return self.index.search(vectors, k, self.store.vectors_by_id, allowed)

    def vectors(self, ids) -> np.ndarray:
        """The vectors of ``ids`` ``(len(ids), d)``: from memory (flat, hnsw) or from the store (ivfpq keeps codes)."""
        return self.index.vectors(ids) if self.exact else self.store.vectors_by_id(ids)

    def stale(self) -> bool:
        """Whether anything was committed to the store since the index last caught up (one cheap PRAGMA), or
        another process rewrote ``index.faiss`` (one ``stat``), which may be a rebuilt graph to load."""
        return self.store.version() != self._version or _identity(self.folder / INDEX_FILE) != self._file

    def catch_up(self) -> None:
        """Load a graph another process rebuilt, add the stored vectors the index lacks and mark the removed ids:
        another process's writes, or ours (caller holds the write lock)."""
        self._load_rebuilt()
        version, count = self.store.version(), self.store.extent()
        lo = len(self.index)
        while lo < count:
            # An untrained ivfpq index trains on its first add: the vectors its build trained on, so a
            # rebuilt cache quantizes as the lost one did (FAISS's k-means is seeded).
            step = (self.manifest.get("trained_on") or CATCH_UP_CHUNK) if lo == 0 else CATCH_UP_CHUNK
            blocks = list(self.store.vectors(lo, min(lo + step, count)))
            self.index.add(np.concatenate(blocks) if len(blocks) > 1 else blocks[0])
            lo = min(lo + step, count)
        removed = self.store.removed()
        self.live, self.removed_share, self.removed_held = None, 0.0, 0
        if len(removed):
            self.live = np.ones(len(self.index), dtype=bool)
            self.live[removed[removed < len(self.index)]] = False
            held = np.isin(removed, self.index.ids(), assume_unique=True).sum() if self.index.mapped else None
            held = int((removed < len(self.index)).sum()) if held is None else int(held)
            self.removed_held, self.removed_share = held, held / max(self.index.stored, 1)
        self._version = version
        self.refreshed = time.time()

    @property
    def generation(self) -> int:
        """How many times the graph in this process's index was rebuilt (the manifest's ``rebuilt``)."""
        return self.manifest.get("rebuilt") or 0

    def wants_rebuild(self) -> bool:
        """Whether the graph holds so many removed questions that it should be built again without them."""
        return self.config.kind == "hnsw" and self.removed_share >= REBUILD_SHARE

    @property
    def config(self) -> IndexConfig:
        return self.index.config

    def replace(self, index: VectorIndex) -> None:
        """Put a rebuilt graph in place of this process's index and catch it up (caller holds the write lock and
        the index's exclusive lock); :meth:`save` then publishes it to the other processes."""
        self.index = index
        self.manifest["rebuilt"] = self.generation + 1
        self._saved = 0  # index.faiss does not hold it yet
        self.catch_up()

    def _load_rebuilt(self) -> None:
        """Load ``index.faiss`` in place of this process's index when another process wrote a rebuilt graph there."""
        identity = _identity(self.folder / INDEX_FILE)
        if identity == self._file:
            return
        self._file = identity
        try:
            with file_lock(self.folder / LOCK_FILE):  # the file and its manifest, as one
                manifest = read_json(self.folder / "manifest.json", "the manifest")
                if not isinstance(manifest, dict) or (manifest.get("rebuilt") or 0) <= self.generation:
                    return  # an ordinary save of vectors this process has already
                checksum, extent = manifest.get("checksum"), manifest.get("count")
                index = VectorIndex.load(self.folder / INDEX_FILE, self.index.dim, self.config, checksum, extent)
                self._file = _identity(self.folder / INDEX_FILE)
        except (OSError, DupqError) as e:  # keep this process's graph: it is correct, only slower
            log.warning("could not load the rebuilt index of %s: %s", self.folder, e)
            return
        if len(index) > self.store.extent():
            return  # not this database's
        self.index = index
        self.manifest.update(rebuilt=manifest["rebuilt"], count=len(index), checksum=manifest.get("checksum"))
        self._saved = len(index)

    def after_add(self) -> None:
        """Rewrite ``index.faiss`` when it lacks many of the indexed vectors (after an add's catch-up)."""
        if len(self.index) - self._saved >= SAVE_DURING_ADD:
            self.save()

    def save(self) -> None:
        """Rewrite ``index.faiss`` and the manifest that describes it; a failure lands in :attr:`cache_error`.

        Several processes may hold the collection open (``dupq serve --workers``, an ``index add`` beside a server): the
        file and the manifest are written under an exclusive lock on ``index.lock``, so the manifest always describes
        the file beside it, and a process whose index holds no more vectors than the file already does writes nothing.
        """
        try:
            with file_lock(self.folder / LOCK_FILE):
                count, generation = _saved(self.folder)
                # a newer graph on disk is never replaced by an older one (this process loads it instead)
                if generation < self.generation or (generation == self.generation and count < len(self.index)):
                    checksum = self.index.save(self.folder / INDEX_FILE)
                    self.manifest.update(count=len(self.index), checksum=checksum)
                    write_json(self.folder / "manifest.json", self.manifest)
                    self._file = _identity(self.folder / INDEX_FILE)
        except OSError as e:
            self.cache_error = (
                f"could not write {self.folder / INDEX_FILE} ({e.strerror or e}); the questions are stored, "
                "and the index is rebuilt from them when the collection is next opened"
            )
            log.warning(self.cache_error)
            return
        self._saved = len(self.index)
        self.cache_error = None

    def close(self) -> None:
        """Write the cache if many rows are missing from it."""
        if len(self.index) - self._saved >= SAVE_ON_CLOSE:
            self.save()


def _saved(folder: Path) -> tuple[int, int]:
    """How many ids the ``index.faiss`` on disk covers, and its generation, by the manifest beside it (0 if it says nothing)."""
    try:
        manifest = read_json(folder / "manifest.json", "the manifest")
    except (OSError, DupqError):
        return 0, 0
    if not isinstance(manifest, dict):
        return 0, 0
    count = manifest.get("count") if manifest.get("checksum") else None
    generation = manifest.get("rebuilt")
    return (count if isinstance(count, int) else 0), (generation if isinstance(generation, int) else 0)


def saved_generation(folder: Path) -> int:
    """The generation of the graph in the ``index.faiss`` on disk (how many rebuilds; 0 for none)."""
    return _saved(folder)[1]


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` is now (inode and modification time; None when there is none): a rename makes a new one."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns
