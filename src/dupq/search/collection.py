"""A persistent, searchable question collection: a store for the questions, a search index, the model.

A collection joins three parts: a **store** that keeps every question, its key, metadata and
embedding (:mod:`dupq.search.store`), a **search index** over the embeddings, and the model that
encodes them. Two stores exist:

* a folder (the default), with SQLite as the store and FAISS as the index::

      manifest.json      format, the model that built it (fingerprint + folder), dim, index config
      questions.sqlite   the source of truth: every question and its embedding (WAL journal)
      index.faiss        a cache of the FAISS index over the first ``count`` embeddings (:mod:`dupq.search.cache`)

* Milvus (``milvus:PATH.db`` for the embedded milvus-lite, ``milvus+http://HOST:19530?collection=NAME``
  for a server), which stores and searches (:mod:`dupq.search.milvus`); the manifest is a property of
  the Milvus collection.

**Crash safety.** The store is the only thing an add must change to be durable: one ``add`` is
one transaction of the store that inserts the question rows *and* their embeddings; when
``add`` returns, the rows are on disk, and a ``kill -9`` before the commit leaves none of them.
The in-memory FAISS index is updated after the commit, and its file is a cache checked whole on
open and caught up from the stored embeddings (see :mod:`dupq.search.cache`): after a crash at any
moment the index and the stored questions agree, without re-encoding anything.

**After the commit nothing fails an add.** Once its transaction is committed, an add answers
its ids: if growing FAISS or rewriting ``index.faiss`` then fails (a full disk), the index catches
up from the stored embeddings on the next read and the cache is rewritten later, so a caller
never sees an error for questions that are stored (and never stores them again on a retry).
A question may carry a **key** (the caller's id: a Quora qid, an ``Idempotency-Key``): adding
a key that is stored already stores nothing and answers the stored id, so a retried add is
safe. ``build`` writes into a hidden sibling folder (Milvus: a collection under a temporary name)
and renames it into place at the end: a killed build leaves no half collection behind.

Why embeddings in SQLite and not a separate ``.npy``: one transaction then covers text and
vector, so no second file can be ahead of or behind the other; it costs ~512 bytes a question.

In a folder, question ids are ``0, 1, 2, ...`` in order of addition, which is also their position
in FAISS (Milvus gives other ids: see :mod:`dupq.search.milvus`). Another process may add to the
collection meanwhile (SQLite serialises the writes): before every search, SQLite's
``data_version`` says whether anything was committed since, and if so FAISS catches up from the
stored embeddings, so reads see every committed add.

>>> coll = Collection.build("runs/faq", ["How do I learn Python?"], Model.load("runs/model"))  # doctest: +SKIP
>>> coll.search(["What is the best way to learn Python?"], k=1)[0][0].text                   # doctest: +SKIP
'How do I learn Python?'
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from dupq.core.files import DupqError, check_new_folder, check_path, new_folder, read_json, remove_stale, write_json
from dupq.data.tokenizer import MAX_QUESTION, check_questions
from dupq.modeling.model import Model
from dupq.modeling.verdict import from_cosines
from dupq.search import store as sqlite
from dupq.search.cache import INDEX_FILE, FaissCache
from dupq.search.locks import SharedLock
from dupq.search.manifest import FORMAT, check_manifest, model_for, new_manifest
from dupq.search.rows import KeyConflict, StoreFailure, check_keys, check_metadata, read_metadata
from dupq.search.store import BLOB_ROWS, SQLiteStore, Store
from dupq.search.vectors import IndexConfig, VectorIndex

log = logging.getLogger(__name__)

__all__ = ["BLOB_ROWS", "DATABASE", "INDEX_FILE", "Collection", "Hit", "KeyConflict", "is_milvus"]

MANIFEST, DATABASE = "manifest.json", "questions.sqlite"
BUILD_CHUNK = 50_000  # questions encoded and stored per step of a build


def is_milvus(location) -> bool:
    """Whether ``location`` names a Milvus collection (``milvus:PATH.db``, ``milvus+http(s)://...``), not a folder."""
    return isinstance(location, str) and location.startswith(("milvus:", "milvus+"))


@dataclass
class Hit:
    """One stored question found by a search."""

    id: int  # the question's id in the collection
    text: str
    score: float  # cosine similarity to the query
    duplicate: bool  # the model's verdict on (query, this question): similarity or probability above its threshold
    metadata: dict  # what was stored with it; a build's ``ids`` appear as "id" unless it has one
    probability: float | None = None  # calibrated P(duplicate), where the model has a calibration


class SearchIndex(Protocol):
    """What a collection searches with: :class:`~dupq.search.cache.FaissCache` over SQLite, or Milvus itself."""

    exact: bool  # whether scores are exact inner products
    cache_error: str | None  # why a cache file could not be written, if one could not

    def search(
        self, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]: ...  # (Q, k') scores, ids (-1: none)
    def vectors(self, ids) -> np.ndarray: ...  # the vectors of ids, for a pair head
    def stale(self) -> bool: ...  # whether another writer committed since the last catch_up
    def catch_up(self) -> None: ...  # index every stored vector (under the write lock)
    def after_add(self) -> None: ...
    def close(self) -> None: ...


def _build_inputs(
    texts, ids, metadata, index, stored: bool = False
) -> tuple[list[str], list[str | None], list[str | None], IndexConfig]:
    """The checked texts, keys, metadata (JSON text) and index config of a build (``stored``: see :meth:`Collection.build`)."""
    texts = check_questions(texts, longest=None if stored else MAX_QUESTION)
    meta = check_metadata(metadata, len(texts))
    config = index if isinstance(index, IndexConfig) else IndexConfig(kind=index)
    keys: list[str | None] = [None] * len(texts)
    if ids is not None:  # None for a question without one (a re-encoded collection's questions added without a key)
        keys = [None if k is None else str(k) for k in ids]
        if len(keys) != len(texts):
            raise DupqError(f"got {len(keys)} ids for {len(texts)} questions; give one id per question.")
        given = [k for k in keys if k is not None]
        if len(set(given)) != len(given):
            raise DupqError("the ids given for the questions are not unique.")
    return texts, keys, meta, config


def encoded_chunks(texts: list[str], keys: list, meta: list, model: Model) -> Iterator[tuple]:
    """``(start, texts, keys, metadata, vectors (B, d))`` of ``BUILD_CHUNK`` questions at a time: what a build stores."""
    for lo in range(0, len(texts), BUILD_CHUNK):
        hi = min(lo + BUILD_CHUNK, len(texts))
        yield lo, texts[lo:hi], keys[lo:hi], meta[lo:hi], model.encode(texts[lo:hi])


class Collection:
    """Stored questions, their embeddings and a search index, and the model that encodes them.

    Build one with :meth:`build`, reopen it with :meth:`open`; ``location`` is a folder or a Milvus
    URI. Searches may run in several threads at once; adds are serialised by a lock and block
    searches only while FAISS grows.
    """

    def __init__(self, location, model: Model, manifest: dict, store: Store, index: SearchIndex):
        self.location = location  # what open() takes: a folder (Path) or a Milvus URI (str)
        self.folder = None if is_milvus(location) else Path(location)
        self.model = model
        self.manifest = manifest
        self._store = store
        self._index = index
        self._write_lock = threading.Lock()
        self._index_lock = SharedLock()
        self._closed = False
        self._damaged: set[int] = set()  # questions whose stored metadata was found damaged (warned once)

    # Building and opening.

    @classmethod
    def build(
        cls,
        folder,
        texts: list[str],
        model: Model,
        *,
        ids: list[str | None] | None = None,
        metadata: list[dict] | None = None,
        index: str | IndexConfig = "flat",
        stored: bool = False,
    ) -> Collection:
        """Encode ``texts`` and store them as a new collection in ``folder`` (a folder that must not hold one, or a Milvus URI).

        ``ids`` are the caller's unique ids for the questions (stored, and shown as ``metadata["id"]``);
        ``index`` is ``"flat"`` (exact), ``"hnsw"`` (approximate) or ``"ivfpq"`` (compressed, re-ranked
        exactly; at least :func:`~dupq.search.vectors.training_size` questions), or an :class:`IndexConfig`.
        ``stored``: the texts are another collection's questions (a re-encoding), so one stored before
        the 1,000-character rule is kept whole rather than refused; the other rules of a question hold.
        """
        texts, keys, meta, config = _build_inputs(texts, ids, metadata, index, stored)
        manifest = new_manifest(model, config)
        if is_milvus(folder):
            from dupq.search.milvus import MilvusStore

            store = MilvusStore.build(folder, manifest, encoded_chunks(texts, keys, meta, model))
            return cls(folder, model, manifest, store, store.search_index())
        return cls._build_folder(Path(folder), model, manifest, encoded_chunks(texts, keys, meta, model))

    @classmethod
    def _build_folder(cls, folder: Path, model: Model, manifest: dict, chunks: Iterator[tuple]) -> Collection:
        """SQLite and FAISS written in a hidden sibling folder, renamed into place when complete."""
        check_new_folder(folder, overwrite=None)  # a collection is never replaced
        with new_folder(folder) as tmp:
            vectors_index = VectorIndex(manifest["dim"], IndexConfig(**manifest["index"]))
            with sqlite.building(tmp / DATABASE, str(folder)) as db:  # nothing is visible before the final rename
                for start, texts, keys, meta, vectors in chunks:
                    sqlite.insert(db, start, texts, keys, meta, vectors)
                    vectors_index.add(vectors)
            manifest["checksum"] = vectors_index.save(tmp / INDEX_FILE)
            manifest["count"] = len(
                vectors_index
            )  # vectors in index.faiss when it was last written; SQLite is the truth
            if vectors_index.trained_on is not None:  # ivfpq: a rebuilt cache trains on the same first vectors
                manifest["trained_on"] = vectors_index.trained_on
            write_json(tmp / MANIFEST, manifest)
        store = SQLiteStore(folder / DATABASE, manifest["dim"])
        return cls(
            folder, model, manifest, store, FaissCache(folder, store, manifest, vectors_index, saved=len(vectors_index))
        )

    @classmethod
    def open(cls, folder, model: Model | None = None) -> Collection:
        """Open a collection (a folder or a Milvus URI); with no ``model``, load the one it was built with.

        A model whose fingerprint differs from the recorded one is refused: its vectors would
        not be comparable with the stored ones.
        """
        if is_milvus(folder):
            from dupq.search.milvus import MilvusStore

            store = MilvusStore.open(folder, FORMAT)
            try:
                model = model_for(store.manifest, model, folder)
            except BaseException:
                store.close()
                raise
            return cls(folder, model, store.manifest, store, store.search_index())
        folder = Path(folder)
        if not folder.exists():
            raise DupqError(f"no collection at {folder}: the folder does not exist; build one with `dupq index build`.")
        check_path(folder, "the collection", folder=True)
        if not (folder / MANIFEST).is_file() or not (folder / DATABASE).is_file():
            raise DupqError(f"{folder} is not a dupq collection: it lacks {MANIFEST} or {DATABASE}.")
        remove_stale(folder)  # temporary files of a writer killed mid-write
        manifest = check_manifest(
            read_json(folder / MANIFEST, f"the manifest of collection {folder}"), folder / MANIFEST, FORMAT
        )
        model = model_for(manifest, model, folder)
        store = SQLiteStore(folder / DATABASE, manifest["dim"])
        try:
            index = FaissCache.open(folder, store, manifest)
        except BaseException:
            store.close()
            raise
        return cls(folder, model, manifest, store, index)

    # Using it.

    @property
    def threshold(self) -> float:
        return self.model.threshold

    @property
    def cache_error(self) -> str | None:
        """Why the index cache could not be written (the questions are stored all the same), or None."""
        return self._index.cache_error

    def __len__(self) -> int:
        return self._store.count()

    def stored_vectors(self) -> np.ndarray:
        """Every stored question's embedding, ``(N, d)`` float32, in id order (read from the store, not the index)."""
        self._check_open()
        return self._store.all_vectors()

    def stored_rows(self) -> list[tuple[int, str | None, str, dict | None]]:
        """Every stored question as ``(id, key, text, metadata)``, in id order: what a build with another model takes."""
        self._check_open()
        return [
            (i, key, text, read_metadata(meta)[0] if meta else None) for i, (key, text, meta) in self._store.all_rows()
        ]

    def nearest(self, vectors: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` of the index's ``k`` nearest stored vectors to each row of ``vectors``: no text, no judging."""
        self._check_open()
        self._refresh()
        with self._index_lock.shared():
            return self._index.search(np.asarray(vectors, dtype=np.float32), k)

    def search(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        """The ``k`` stored questions most similar to each query, best first (every committed add included)."""
        self._check_open()
        queries = check_questions(queries, "query")
        if k < 1:
            raise DupqError(f"k must be at least 1, got {k}.")
        if not queries:
            return []
        vectors = self.model.encode(queries)  # (Q, d)
        self._refresh()
        with self._index_lock.shared():
            scores, ids = self._index.search(vectors, k)  # (Q, k'), (Q, k')
        scores = np.clip(scores, -1.0, 1.0)  # float32 rounding can give 1.0000001
        found = ids >= 0  # (Q, k') FAISS pads with -1 where it found fewer than k
        owner = np.repeat(np.arange(len(queries)), found.sum(1))  # (H,) the query of each hit
        hit_scores, hit_ids = scores[found], ids[found]  # (H,) every query's hits, query after query
        rows = self._store.rows(hit_ids.tolist())
        # every hit of every query judged in one call (one pass of a pair head for a batch of queries)
        judged = from_cosines(self.model, hit_scores, vectors=lambda: self._pair_vectors(vectors[owner], hit_ids))
        probabilities = [None] * len(hit_ids) if judged.probability is None else judged.probability.tolist()
        duplicates = judged.duplicate.tolist()
        bounds = np.concatenate([[0], np.cumsum(found.sum(1))]).tolist()
        return [
            self._hits(hit_scores[a:b], hit_ids[a:b], probabilities[a:b], duplicates[a:b], rows)
            for a, b in zip(bounds, bounds[1:])
        ]

    def _hits(
        self, scores: np.ndarray, ids: np.ndarray, probabilities: list, duplicates: list, rows: dict
    ) -> list[Hit]:
        """One query's judged hits with their stored text and metadata (a row deleted meanwhile is left out)."""
        hits = []
        for score, i, p, d in zip(scores.tolist(), ids.tolist(), probabilities, duplicates):
            if i not in rows:
                continue
            key, text, stored = rows[i]
            if not isinstance(text, str):  # not UTF-8, or not text at all: written by something else
                self._damage(
                    i, f"the text of question {i} is damaged ({type(text).__name__}, not text); it is left out"
                )
                continue
            metadata, damage = read_metadata(stored)
            if damage:
                self._damage(i, f"the metadata of question {i} is damaged and left out: {damage}")
            if key is not None:
                metadata.setdefault("id", key if isinstance(key, (str, int)) else repr(key))
            hits.append(Hit(id=i, text=text, score=score, duplicate=d, metadata=metadata, probability=p))
        return hits

    def _damage(self, i: int, what: str) -> None:
        """Warn of a damaged row once, not on every search that finds it (the search goes on without it)."""
        if i not in self._damaged:
            self._damaged.add(i)
            log.warning("%s (%s).", what, self.location)

    def _pair_vectors(self, queries: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(query, hit)`` vectors of hits, ``queries`` holding each hit's query ``(H, d)``, for a pair head
        (ivfpq, Milvus: the hits' vectors come from the store)."""
        with self._index_lock.shared():
            stored = self._index.vectors(np.asarray(ids, dtype=np.int64))
        return queries, stored

    def add(
        self, texts: list[str], metadata: list[dict] | None = None, keys: list[str | None] | None = None
    ) -> list[int]:
        """Store ``texts`` (and their metadata) in one transaction; returns their ids.

        When this returns, the questions are on disk and searchable; if the process dies
        before, none of them is stored. A question whose ``key`` is stored already is not stored
        again: its stored id is returned (the same key with another text or metadata raises
        :class:`KeyConflict`). Once the transaction is committed, this returns the ids whatever
        happens to the FAISS cache (see the module docstring).
        """
        self._check_open()
        texts = check_questions(texts)
        meta = check_metadata(metadata, len(texts))
        keys = check_keys(keys, len(texts))
        if not texts:
            return []
        vectors = self.model.encode(texts)  # (M, d)
        with self._write_lock:
            self._check_open()
            ids = self._store.add(texts, keys, meta, vectors)
            try:  # committed: from here on a failure only delays the cache, never the answer
                self._catch_up()
                self._index.after_add()
            except Exception as e:  # noqa: BLE001 -- the rows are stored; the next search or open catches up
                log.warning("questions %s stored, but the search index lags: %s", ids, e)
        return ids

    def _catch_up(self) -> None:
        """Index the stored rows the index lacks (write lock held; searches wait meanwhile)."""
        with self._index_lock.exclusive():
            self._index.catch_up()

    def _refresh(self) -> None:
        """Catch the index up when anything was committed to the store since it last did (one cheap check otherwise)."""
        if not self._index.stale():
            return
        with self._write_lock:
            self._check_open()
            self._catch_up()

    def close(self) -> None:
        """Write the index cache if many rows are missing from it, and release the store."""
        with self._write_lock:
            if self._closed:
                return
            self._index.close()
            self._closed = True
            self._store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreFailure(f"the collection {self.location} is closed.", "unreachable")

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
