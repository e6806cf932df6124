"""A collection in a folder: SQLite keeps the questions, FAISS searches them.

::

    manifest.json      format, the model that built it (fingerprint + folder), dim, index config
    questions.sqlite   the truth: every question and its embedding (WAL), and a reranker's vectors
    index.faiss        a cache of the FAISS index (:mod:`dupq.collection.folder.cache`)

A write is one transaction of the store (:class:`~dupq.collection.folder.store.SQLiteStore`); FAISS follows after the
commit. A question's id is its FAISS position; FAISS cannot take a vector out of HNSW, so a removed id is marked (the
``removed`` table) and filtered out of every search, and a new text for a key is a new id. Once removed questions are
:data:`~dupq.collection.folder.cache.REBUILD_SHARE` of a graph, a thread builds one of the others from a snapshot (one
process at a time, by ``rebuild.lock``), swaps it in, catches it up and publishes it (temporary file, rename): a crash
leaves the old graph or the new one. Before every search SQLite's ``data_version`` says whether another process
committed since, and if so FAISS catches up from the stored embeddings. Searches run in several threads; writes are
serialised and block searches only while FAISS grows.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dupq.collection.backend import HIDDEN, Backend, IndexStats, Where, hidden
from dupq.collection.folder import sqlite
from dupq.collection.folder.cache import INDEX_FILE, FaissCache, saved_generation
from dupq.collection.folder.locks import SharedLock
from dupq.collection.folder.store import WRITER_LOCK, SQLiteStore
from dupq.collection.manifest import FORMAT, check_manifest
from dupq.collection.rows import PENDING, read_metadata
from dupq.core.errors import DupqError
from dupq.core.files import check_new_folder, check_path, file_lock, new_folder, read_json, remove_stale, write_json
from dupq.index.vectors import IndexConfig, VectorIndex

MANIFEST, DATABASE = "manifest.json", "questions.sqlite"
REBUILD_LOCK = "rebuild.lock"  # held by the one process that is building the graph again
log = logging.getLogger(__name__)

FILTERS_KEPT = 32  # filters whose matching ids are kept until the next write


class FolderBackend(Backend):
    """SQLite rows and a FAISS index over their vectors, in a folder."""

    reranks = True

    def __init__(self, folder: Path, manifest: dict, store: SQLiteStore, cache: FaissCache):
        self.folder, self.manifest, self.store, self.cache = folder, manifest, store, cache
        self._write_lock = threading.Lock()
        self._index_lock = SharedLock()
        self._filters: OrderedDict[str, np.ndarray] = OrderedDict()  # where (JSON) -> its mask, until the next catch-up
        self._rebuilding = False  # a thread of this process is building the graph again
        self._closed = False

    @classmethod
    def build(cls, location, manifest: dict, chunks: Iterator[tuple]) -> FolderBackend:
        """SQLite and FAISS written in a hidden sibling folder, renamed into place when complete."""
        folder = check_new_folder(location.path, overwrite=None)  # a collection is never replaced
        with new_folder(folder) as tmp:
            index = VectorIndex(manifest["dim"], IndexConfig(**manifest["index"]))
            with sqlite.building(tmp / DATABASE, str(folder)) as db:  # nothing is visible before the final rename
                for start, texts, keys, meta, vectors in chunks:
                    sqlite.insert(db, start, texts, keys, meta, vectors)
                    index.add(vectors)
            manifest["checksum"] = index.save(tmp / INDEX_FILE)
            manifest["count"] = len(index)  # vectors in index.faiss when it was last written; SQLite is the truth
            if index.trained_on is not None:  # ivfpq: a rebuilt cache trains on the same first vectors
                manifest["trained_on"] = index.trained_on
            write_json(tmp / MANIFEST, manifest)
        store = SQLiteStore(folder / DATABASE, manifest["dim"])
        cache = FaissCache(folder, store, manifest, index, saved=len(index))
        cache.catch_up()
        return cls(folder, manifest, store, cache)

    @classmethod
    def open(cls, location) -> FolderBackend:
        folder = Path(location.path)
        if not folder.exists():
            raise DupqError(f"no collection at {folder}: the folder does not exist; build one with `dupq index build`.")
        check_path(folder, "the collection", folder=True)
        if not (folder / MANIFEST).is_file() or not (folder / DATABASE).is_file():
            raise DupqError(f"{folder} is not a dupq collection: it lacks {MANIFEST} or {DATABASE}.")
        remove_stale(folder)  # temporary files of a writer killed mid-write
        manifest = check_manifest(
            read_json(folder / MANIFEST, f"the manifest of collection {folder}"), folder / MANIFEST, FORMAT
        )
        store = SQLiteStore(folder / DATABASE, manifest["dim"])
        try:
            cache = FaissCache.open(folder, store, manifest)
        except BaseException:
            store.close()
            raise
        return cls(folder, manifest, store, cache)

    @classmethod
    def holds(cls, location) -> bool:
        return (Path(location.path) / MANIFEST).is_file()

    @property
    def exact(self) -> bool:
        return self.cache.exact

    @property
    def cache_error(self) -> str | None:
        return self.cache.cache_error

    def count(self) -> int:
        return self.store.count()

    def _write(self, fn):
        """``fn()`` (a store transaction) under the write lock, then the index caught up; a failure after the
        commit only delays the index (the next search catches up), never the answer."""
        with self._write_lock:
            result = fn()
            try:
                self._catch_up()
                self.cache.after_add()
            except Exception as e:  # noqa: BLE001 -- committed: the next search or open catches up
                log.warning("%s committed, but the search index lags: %s", self.folder, e)
        return result

    def add(self, texts, keys, metadata, vectors) -> list[int]:
        return self._write(lambda: self.store.add(texts, keys, metadata, vectors))

    def remove(self, keys) -> list[int]:
        return self._write(lambda: self.store.remove(keys))

    def update(self, key, text, metadata, vector) -> int:
        return self._write(lambda: self.store.update(key, text, metadata, vector))

    def edit(self, key, change, others):
        return self._write(lambda: self.store.edit(key, change, others))

    def find(self, keys):
        return self.store.find(keys)

    def reranked(self, ids, dim):
        return self.store.reranked(ids, dim)

    def keep_reranked(self, ids, digests, vectors) -> None:
        with self._write_lock:  # a store transaction; the FAISS index does not change
            self.store.keep_reranked(ids, digests, vectors)

    def _catch_up(self) -> None:
        """Index the stored rows the index lacks (write lock held; searches wait meanwhile)."""
        with self._index_lock.exclusive():
            self.cache.catch_up()
            self._filters.clear()
        self._maybe_rebuild()

    def _maybe_rebuild(self) -> None:
        """Start building the graph again without its removed questions, in a thread, once they are many."""
        if self._rebuilding or self._closed or not self.cache.wants_rebuild():
            return
        self._rebuilding = True
        threading.Thread(target=self._rebuild, name=f"dupq-rebuild {self.folder}", daemon=True).start()

    def _rebuild(self) -> None:
        """Build a graph of the stored questions from a snapshot, swap it in and publish it (see the module's text)."""
        try:
            with file_lock(self.folder / REBUILD_LOCK, timeout=0):  # one process builds; the others load its file
                generation = self.cache.generation
                if saved_generation(self.folder) > generation:
                    return  # another process has just published one: the next search loads it
                ids, vectors, extent = self.store.live_vectors()
                index = VectorIndex.rebuilt(self.manifest["dim"], self.cache.config, ids, vectors, extent)
                with self._write_lock:
                    if self._closed or self.cache.generation != generation:
                        return  # closed, or another process's graph was loaded meanwhile
                    with self._index_lock.exclusive():
                        self.cache.replace(index)  # then the rows written meanwhile, and the removals
                        self._filters.clear()
                    self.cache.save()
                log.info("%s: the search graph was built again without its removed questions", self.folder)
        except TimeoutError:
            pass  # another process is building it
        except Exception as e:  # noqa: BLE001 -- the old graph stays, correct and only slower
            log.warning("building the search graph of %s again failed: %s", self.folder, e)
        finally:
            self._rebuilding = False

    def _refresh(self) -> None:
        """Catch the index up when anything was committed to the store since it last did (one cheap check otherwise)."""
        if not self.cache.stale():
            return
        with self._write_lock:
            self._catch_up()

    def indexed(self) -> int:
        return len(self.cache)

    def index_stats(self) -> IndexStats:
        cache = self.cache
        return IndexStats(
            cache.config.kind, cache.index.stored, cache.removed_held, cache.generation, cache.exact, self._rebuilding
        )

    def writers_held(self):
        """The folder's writer lock (``dupq serve``'s workers and ``index add`` wait on it)."""
        return file_lock(self.folder / WRITER_LOCK)

    def refreshed(self) -> float:
        return self.cache.refreshed

    def search(self, vectors, k, where: Where | None = None, pending: bool = False):
        self._refresh()
        with self._index_lock.shared():
            allowed = self._allowed(where, pending)
            return self.cache.search(np.asarray(vectors, dtype=np.float32), k, allowed)

    def _allowed(self, where: Where | None, pending: bool) -> np.ndarray | None:
        """``(len(index),)`` bool: the ids a search may answer (None: all of them), the pending ones left out unless asked."""
        allowed = self._mask(where, lambda: self.store.matching(where)) if where else None
        if not pending:
            waiting = self._mask(HIDDEN, self._pending_ids)
            if waiting.any():
                allowed = ~waiting if allowed is None else allowed & ~waiting
        return allowed

    def _pending_ids(self) -> np.ndarray:
        return np.array(
            [i for i, (_, _, meta) in self.store.naming(PENDING) if hidden(read_metadata(meta)[0])], np.int64
        )

    def _mask(self, where: Where, matching) -> np.ndarray:
        """``(len(index),)`` bool: the ids ``matching()`` answers for ``where`` (kept until the next catch-up)."""
        name = json.dumps(where, sort_keys=True)
        mask = self._filters.get(name)
        if mask is None:
            ids = matching()
            mask = np.zeros(len(self.cache), dtype=bool)
            mask[ids[ids < len(mask)]] = True  # a row committed by another process since the catch-up: next search
            self._filters[name] = mask
            while len(self._filters) > FILTERS_KEPT:
                self._filters.popitem(last=False)
        return mask

    def rows_naming(self, field: str):
        return self.store.naming(field)

    def rows(self, ids):
        return self.store.rows(ids)

    def vectors(self, ids) -> np.ndarray:
        with self._index_lock.shared():
            return self.cache.vectors(np.asarray(ids, dtype=np.int64))

    def all_vectors(self) -> np.ndarray:
        return self.store.all_vectors()

    def all_rows(self):
        return self.store.all_rows()

    def page(self, after, limit, where=None):
        return self.store.page(after, limit, where)

    def close(self) -> None:
        with self._write_lock:
            self._closed = True
            self.cache.close()
            self.store.close()
