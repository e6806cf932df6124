"""A persistent, searchable question collection: SQLite for the questions, FAISS for the search.

A collection is a folder::

    manifest.json      format, the model that built it (fingerprint + folder), dim, index config
    questions.sqlite   the source of truth: every question and its embedding (WAL journal)
    index.faiss        a cache of the FAISS index over the first ``ntotal`` embeddings

**Crash safety.** SQLite is the only thing an add must change to be durable: one ``add`` is one
transaction that inserts the question rows *and* their embeddings (a float32 BLOB per add, in
the ``embeddings`` table), committed with ``synchronous=FULL``; when ``add`` returns, the rows are
on disk, and a ``kill -9`` before the commit leaves none of them. The in-memory FAISS index is
updated after the commit; ``index.faiss`` is a cache, rewritten atomically (temporary file,
fsync, rename) now and then, and it knows how many vectors it holds (``ntotal``). Opening reads
it, checks it against SQLite (no more vectors than rows, its last vector equal to the stored
one; otherwise it is thrown away and rebuilt) and adds the rows beyond ``ntotal`` from the stored
embeddings. So after a crash at any moment the index and the stored questions agree, without
re-encoding anything. ``build`` writes into a hidden sibling folder and renames it into place
at the end: a killed build leaves no half collection behind.

Why embeddings in SQLite and not a separate ``.npy``: one transaction then covers text and
vector, so no second file can be ahead of or behind the other; it costs ~512 bytes a question.

Question ids are ``0, 1, 2, ...`` in order of addition, which is also their position in FAISS.
One process writes a collection at a time; another process's additions are picked up by the
next ``add`` or ``open``.

>>> coll = Collection.build("runs/faq", ["How do I learn Python?"], Model.load("runs/model"))  # doctest: +SKIP
>>> coll.search(["What is the best way to learn Python?"], k=1)[0][0].text                   # doctest: +SKIP
'How do I learn Python?'
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from dupq.files import DupqError, fsync_dir, read_json, write_json
from dupq.model import BUNDLED, Model
from dupq.search import IndexConfig, VectorIndex

FORMAT = "dupq-collection/1"
MANIFEST, DATABASE, INDEX_FILE = "manifest.json", "questions.sqlite", "index.faiss"
BUILD_CHUNK = 50_000  # questions encoded and stored per step of a build
BLOB_ROWS = 65_536  # most vectors in one embeddings row (keeps a BLOB far below SQLite's 1 GB cap)
SAVE_ON_CLOSE = 1_000  # close() rewrites index.faiss when at least this many rows are not in it
SAVE_DURING_ADD = 50_000  # add() rewrites it when this many are not (bounds the replay on open)

SCHEMA = """
CREATE TABLE IF NOT EXISTS questions (
    id INTEGER PRIMARY KEY,   -- 0, 1, 2, ...: the FAISS position
    key TEXT UNIQUE,          -- the caller's id (e.g. a Quora qid), or NULL
    text TEXT NOT NULL,
    metadata TEXT             -- a JSON object, or NULL
);
CREATE TABLE IF NOT EXISTS embeddings (
    start INTEGER PRIMARY KEY,  -- id of the first question in the block
    count INTEGER NOT NULL,
    vectors BLOB NOT NULL       -- (count, dim) float32, row-major
);
"""


@dataclass
class Hit:
    """One stored question found by a search."""

    id: int  # the question's id in the collection
    text: str
    score: float  # cosine similarity to the query
    duplicate: bool  # the model's verdict on (query, this question): similarity or probability above its threshold
    metadata: dict  # what was stored with it; a build's ``ids`` appear as "id" unless it has one
    probability: float | None = None  # calibrated P(duplicate), where the model has a calibration


class _SharedLock:
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


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
    return db


def _check_texts(texts, what: str) -> list[str]:
    if isinstance(texts, str):
        raise DupqError(f"give a list of {what}s, not a single string.")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise DupqError(f"{what} {i + 1} is empty; it needs at least one word.")
    return texts


def _check_metadata(metadata, n: int) -> list[str | None]:
    if metadata is None:
        return [None] * n
    metadata = list(metadata)
    if len(metadata) != n:
        raise DupqError(f"got {len(metadata)} metadata entries for {n} questions; give one dict per question.")
    out = []
    for i, m in enumerate(metadata):
        if not isinstance(m, dict):
            raise DupqError(f"the metadata of question {i + 1} is a {type(m).__name__}, not a dict.")
        try:
            out.append(json.dumps(m, ensure_ascii=False) if m else None)
        except (TypeError, ValueError) as e:
            raise DupqError(f"the metadata of question {i + 1} cannot be stored as JSON ({e}).") from None
    return out


def _insert(db: sqlite3.Connection, start: int, texts, keys, metadata, vectors: np.ndarray) -> None:
    """Insert questions ``start, start + 1, ...`` and their embeddings (inside the caller's transaction)."""
    ids = range(start, start + len(texts))
    db.executemany("INSERT INTO questions (id, key, text, metadata) VALUES (?, ?, ?, ?)", zip(ids, keys, texts, metadata))
    for lo in range(0, len(vectors), BLOB_ROWS):
        block = np.ascontiguousarray(vectors[lo : lo + BLOB_ROWS], dtype=np.float32)
        db.execute("INSERT INTO embeddings (start, count, vectors) VALUES (?, ?, ?)", (start + lo, len(block), block.tobytes()))


def _stored_vectors(db: sqlite3.Connection, lo: int, hi: int, dim: int) -> Iterator[np.ndarray]:
    """The stored embeddings of questions ``lo .. hi - 1``, in order, a block at a time."""
    rows = db.execute(
        "SELECT start, count, vectors FROM embeddings WHERE start + count > ? AND start < ? ORDER BY start", (lo, hi)
    )
    for start, count, blob in rows:
        block = np.frombuffer(blob, dtype=np.float32).reshape(count, dim)
        yield block[max(lo - start, 0) : hi - start]


class Collection:
    """Stored questions, their embeddings and a FAISS index, and the model that encodes them.

    Build one with :meth:`build`, reopen it with :meth:`open`. Searches may run in several
    threads at once; adds are serialised by a lock and block searches only while FAISS grows.
    """

    def __init__(self, folder: Path, model: Model, manifest: dict, index: VectorIndex, saved: int):
        self.folder = folder
        self.model = model
        self.manifest = manifest
        self._dim = int(manifest["dim"])
        self._index = index
        self._saved = saved  # vectors in index.faiss on disk
        self._db = _connect(folder / DATABASE)  # writes (and catch-up reads under the write lock)
        self._reader = _connect(folder / DATABASE)  # row look-ups for searches
        self._write_lock = threading.Lock()
        self._reader_lock = threading.Lock()
        self._index_lock = _SharedLock()
        self._closed = False

    # Building and opening.

    @classmethod
    def build(
        cls,
        folder,
        texts: list[str],
        model: Model,
        *,
        ids: list[str] | None = None,
        metadata: list[dict] | None = None,
        index: str | IndexConfig = "flat",
    ) -> Collection:
        """Encode ``texts`` and store them as a new collection in ``folder`` (which must not hold one).

        ``ids`` are the caller's unique ids for the questions (stored, and shown as ``metadata["id"]``);
        ``index`` is ``"flat"`` (exact) or ``"hnsw"`` (approximate), or an :class:`IndexConfig`.
        """
        folder = Path(folder)
        texts = _check_texts(texts, "question")
        meta = _check_metadata(metadata, len(texts))
        config = index if isinstance(index, IndexConfig) else IndexConfig(kind=index)
        keys: list[str | None] = [None] * len(texts)
        if ids is not None:
            keys = [str(k) for k in ids]
            if len(keys) != len(texts):
                raise DupqError(f"got {len(keys)} ids for {len(texts)} questions; give one id per question.")
            if len(set(keys)) != len(keys):
                raise DupqError("the ids given for the questions are not unique.")
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise DupqError(f"{folder} already exists and is not empty; choose a new folder for the collection.")
        dim = model.config.out_dim
        bundled = model.folder is not None and model.folder == BUNDLED.resolve()
        manifest = {
            "format": FORMAT,
            "model": {
                "fingerprint": model.fingerprint(),
                "path": None if bundled or model.folder is None else str(model.folder),
                "bundled": bundled,
            },
            "dim": dim,
            "index": asdict(config),
            "count": len(texts),  # vectors in index.faiss when it was last written; SQLite is the truth
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".{folder.name}.building-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            vectors_index = VectorIndex(dim, config)
            db = sqlite3.connect(tmp / DATABASE, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")  # nothing is visible before the final rename; fsync once below
            db.executescript(SCHEMA)
            db.execute("BEGIN")
            for lo in range(0, len(texts), BUILD_CHUNK):
                hi = min(lo + BUILD_CHUNK, len(texts))
                vectors = model.encode(texts[lo:hi])  # (B, dim)
                _insert(db, lo, texts[lo:hi], keys[lo:hi], meta[lo:hi], vectors)
                vectors_index.add(vectors)
            db.execute("COMMIT")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
            with open(tmp / DATABASE, "rb+") as f:
                os.fsync(f.fileno())
            vectors_index.save(tmp / INDEX_FILE)
            write_json(tmp / MANIFEST, manifest)
            if folder.exists():
                folder.rmdir()
            os.rename(tmp, folder)
            fsync_dir(folder.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(folder, model, manifest, vectors_index, saved=len(vectors_index))

    @classmethod
    def open(cls, folder, model: Model | None = None) -> Collection:
        """Open a collection; with no ``model``, load the one it was built with.

        A model whose fingerprint differs from the recorded one is refused: its vectors would
        not be comparable with the stored ones.
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise DupqError(f"no collection at {folder}: the folder does not exist; build one with `dupq index build`.")
        if not (folder / MANIFEST).is_file() or not (folder / DATABASE).is_file():
            raise DupqError(f"{folder} is not a dupq collection: it lacks {MANIFEST} or {DATABASE}.")
        manifest = read_json(folder / MANIFEST, f"the manifest of collection {folder}")
        try:
            if manifest.get("format") != FORMAT:
                raise KeyError("format")
            recorded = manifest["model"]
            config = IndexConfig(**manifest["index"])
            dim = int(manifest["dim"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DupqError(f"{folder / MANIFEST} is not a dupq collection manifest ({type(e).__name__}: {e}).") from None
        built_with = "the bundled model" if recorded.get("bundled") else f"the model at {recorded.get('path')}"
        if model is None:
            if not recorded.get("bundled") and not recorded.get("path"):
                raise DupqError(f"{folder} does not record which model folder built it; pass that model (--model).")
            try:
                model = Model.load(None if recorded.get("bundled") else recorded["path"])
            except DupqError as e:
                raise DupqError(f"cannot load {built_with}, which built {folder}: {e}") from None
        given = model.fingerprint()
        if given != recorded["fingerprint"]:
            where = f"the model at {model.folder}" if model.folder else "the model given"
            raise DupqError(
                f"{folder} was built with {built_with} (fingerprint {recorded['fingerprint']}) but {where} has "
                f"fingerprint {given}; search it with the model that built it, or build a new collection."
            )
        db = _connect(folder / DATABASE)
        try:
            count, vector_count = db.execute(
                "SELECT (SELECT COALESCE(MAX(id) + 1, 0) FROM questions), (SELECT COALESCE(SUM(count), 0) FROM embeddings)"
            ).fetchone()
            if count != vector_count:
                raise DupqError(f"{folder / DATABASE} is corrupt: it holds {count} questions but {vector_count} embeddings.")
            index, saved = cls._cached_index(folder, db, dim, config, count)
            for block in _stored_vectors(db, len(index), count, dim):
                index.add(block)
        except sqlite3.DatabaseError as e:
            raise DupqError(f"{folder / DATABASE} cannot be read ({e}).") from None
        finally:
            db.close()
        return cls(folder, model, manifest, index, saved)

    @staticmethod
    def _cached_index(folder: Path, db, dim: int, config: IndexConfig, count: int) -> tuple[VectorIndex, int]:
        """``index.faiss`` if it agrees with the stored embeddings, else an empty index to refill."""
        try:
            index = VectorIndex.load(folder / INDEX_FILE, dim, config)
        except DupqError:
            return VectorIndex(dim, config), 0
        n = len(index)
        if n > count:  # ahead of the stored rows: not this database's cache
            return VectorIndex(dim, config), 0
        if n and not np.array_equal(index.vector(n - 1), next(_stored_vectors(db, n - 1, n, dim))[0]):
            return VectorIndex(dim, config), 0
        return index, n

    # Using it.

    @property
    def threshold(self) -> float:
        return self.model.threshold

    def __len__(self) -> int:
        with self._reader_lock:
            return self._reader.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0]

    def search(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        """The ``k`` stored questions most similar to each query, best first."""
        self._check_open()
        queries = _check_texts(queries, "query")
        if k < 1:
            raise DupqError(f"k must be at least 1, got {k}.")
        if not queries:
            return []
        vectors = self.model.encode(queries)  # (Q, d)
        with self._index_lock.shared():
            scores, ids = self._index.search(vectors, k)  # (Q, k'), (Q, k')
        wanted = sorted({int(i) for i in ids.ravel() if i >= 0})
        rows = {}
        with self._reader_lock:
            for lo in range(0, len(wanted), 900):  # SQLite's limit on bound parameters
                part = wanted[lo : lo + 900]
                marks = ",".join("?" * len(part))
                for row in self._reader.execute(f"SELECT id, key, text, metadata FROM questions WHERE id IN ({marks})", part):
                    rows[row[0]] = row[1:]
        threshold = self.threshold
        out = []
        for query, row_scores, row_ids in zip(vectors, scores, ids):
            found = row_ids >= 0
            probabilities, judged = self._judge(query, row_ids[found], np.clip(row_scores[found], -1.0, 1.0))
            hits = []
            for score, i, p, s in zip(np.clip(row_scores[found], -1.0, 1.0).tolist(), row_ids[found].tolist(), probabilities, judged):
                key, text, metadata = rows[i]
                metadata = json.loads(metadata) if metadata else {}
                if key is not None:
                    metadata.setdefault("id", key)
                hits.append(Hit(id=i, text=text, score=score, duplicate=bool(s > threshold), metadata=metadata, probability=p))
            out.append(hits)
        return out

    def _judge(self, query: np.ndarray, ids: np.ndarray, cosines: np.ndarray) -> tuple[list[float | None], np.ndarray]:
        """Each hit's probability (None without a calibration) and the score its verdict compares."""
        model = self.model
        if model.calibration is None and model.head is None:
            return [None] * len(ids), cosines
        if model.needs_vectors:  # a pair head reads both vectors: take the hits' from the index
            with self._index_lock.shared():
                stored = np.stack([self._index.vector(int(i)) for i in ids]) if len(ids) else np.zeros((0, len(query)), np.float32)
            probabilities = model.probabilities_from_vectors(np.repeat(query[None], len(ids), 0), stored)
        else:  # the logit is a function of the cosine alone
            probabilities = model.probabilities_from_cosines(cosines)
        judged = probabilities if model.threshold_on == "probability" else cosines
        return probabilities.tolist(), judged

    def add(self, texts: list[str], metadata: list[dict] | None = None) -> list[int]:
        """Store ``texts`` (and their metadata) in one transaction; returns their ids.

        When this returns, the questions are on disk and searchable; if the process dies
        before, none of them is stored.
        """
        self._check_open()
        texts = _check_texts(texts, "question")
        meta = _check_metadata(metadata, len(texts))
        if not texts:
            return []
        vectors = self.model.encode(texts)  # (M, d)
        with self._write_lock:
            self._check_open()
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    start = self._db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0]
                    _insert(self._db, start, texts, [None] * len(texts), meta, vectors)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                with self._index_lock.exclusive():
                    for block in _stored_vectors(self._db, len(self._index), start, self._dim):
                        self._index.add(block)  # rows another process added since we opened
                    self._index.add(vectors)
            except sqlite3.DatabaseError as e:
                raise DupqError(f"cannot add to {self.folder / DATABASE} ({e}).") from None
            if len(self._index) - self._saved >= SAVE_DURING_ADD:
                self._save_index()
        return list(range(start, start + len(texts)))

    def _save_index(self) -> None:
        """Rewrite ``index.faiss`` (caller holds the write lock, so FAISS does not change meanwhile)."""
        self._index.save(self.folder / INDEX_FILE)
        self._saved = len(self._index)
        self.manifest["count"] = self._saved
        write_json(self.folder / MANIFEST, self.manifest)

    def close(self) -> None:
        """Write the index cache if many rows are missing from it, and release the database."""
        with self._write_lock:
            if self._closed:
                return
            if len(self._index) - self._saved >= SAVE_ON_CLOSE:
                self._save_index()
            self._closed = True
            self._db.close()
            with self._reader_lock:
                self._reader.close()

    def _check_open(self) -> None:
        if self._closed:
            raise DupqError(f"the collection {self.folder} is closed.")

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
