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
fsync, rename) now and then; the manifest records how many vectors it holds and a CRC-32 of its
bytes. Opening reads it and checks it whole (the checksum and count recorded when it was written,
and its first and last vectors against the stored ones; otherwise it is thrown away and rebuilt
from the stored embeddings) and adds the rows beyond it from the stored embeddings. So after a
crash at any moment the index and the stored questions agree, without re-encoding anything.

**After the commit nothing fails an add.** Once its transaction is committed, an add answers
its ids: if growing FAISS or rewriting ``index.faiss`` then fails (a full disk), the index catches
up from the stored embeddings on the next read and the cache is rewritten later, so a caller
never sees an error for questions that are stored (and never stores them again on a retry).
A question may carry a **key** (the caller's id: a Quora qid, an ``Idempotency-Key``): adding
a key that is stored already stores nothing and answers the stored id, so a retried add is safe. ``build`` writes into a hidden sibling folder and renames it into place
at the end: a killed build leaves no half collection behind.

Why embeddings in SQLite and not a separate ``.npy``: one transaction then covers text and
vector, so no second file can be ahead of or behind the other; it costs ~512 bytes a question.

Question ids are ``0, 1, 2, ...`` in order of addition, which is also their position in FAISS.
Another process may add to the collection meanwhile (SQLite serialises the writes): before every
search, SQLite's ``data_version`` says whether anything was committed since, and if so FAISS
catches up from the stored embeddings, so reads see every committed add.

>>> coll = Collection.build("runs/faq", ["How do I learn Python?"], Model.load("runs/model"))  # doctest: +SKIP
>>> coll.search(["What is the best way to learn Python?"], k=1)[0][0].text                   # doctest: +SKIP
'How do I learn Python?'
"""

from __future__ import annotations

import json
import logging
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

from dupq.files import DupqError, check_path, fsync_dir, read_json, remove_stale, write_json
from dupq.model import BUNDLED, Model
from dupq.schema import check_manifest
from dupq.vectors import IndexConfig, VectorIndex
from dupq.tokenizer import check_questions

log = logging.getLogger(__name__)

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


class KeyConflict(DupqError):
    """A key that is stored already, with another question or other metadata."""


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
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
    except sqlite3.DatabaseError as e:
        raise DupqError(f"{path} cannot be read as a SQLite database ({e}).") from None
    return db


def _one_each(values, n: int, what: str) -> list:
    """``values`` as a list of ``n`` (one per question), or ``n`` Nones when none were given."""
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise DupqError(f"got {len(values)} {what} for {n} questions; give one per question.")
    return values


def _check_metadata(metadata, n: int) -> list[str | None]:
    out = []
    for i, m in enumerate(_one_each(metadata, n, "metadata entries")):
        if m is not None and not isinstance(m, dict):
            raise DupqError(f"the metadata of question {i + 1} is a {type(m).__name__}, not a dict.")
        try:
            text = json.dumps(m, ensure_ascii=False, allow_nan=False) if m else None
            if text is not None:
                text.encode("utf-8")  # a lone surrogate is not text SQLite can store
        except (TypeError, ValueError) as e:  # NaN and Infinity are not JSON either
            raise DupqError(f"the metadata of question {i + 1} cannot be stored as JSON ({e}).") from None
        out.append(text)
    return out


def _check_keys(keys, n: int) -> list[str | None]:
    keys = _one_each(keys, n, "keys")
    for i, k in enumerate(keys):
        if k is not None and (not isinstance(k, str) or not k.strip()):
            raise DupqError(f"the key of question {i + 1} must be a non-empty string or None, not {k!r}.")
    return keys


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
        if not isinstance(blob, bytes) or len(blob) != count * dim * 4:
            size = len(blob) if isinstance(blob, bytes) else type(blob).__name__
            raise sqlite3.DatabaseError(f"the embeddings from question {start} hold {size} bytes, not {count} x {dim} float32")
        block = np.frombuffer(blob, dtype=np.float32).reshape(count, dim)
        yield block[max(lo - start, 0) : hi - start]


def _vectors_by_id(db: sqlite3.Connection, ids: np.ndarray, dim: int) -> np.ndarray:
    """The stored embeddings of the questions ``ids``, ``(len(ids), d)``, each read alone from its block's BLOB.

    Incremental BLOB reads (``blobopen``) return the 4 * d bytes of one vector without holding its
    block in memory: this is how an ivfpq collection re-ranks its short list while memory holds
    codes only. They are not cheap: SQLite walks a BLOB's overflow pages up to the offset, so a
    vector deep in a 65,536-vector block costs milliseconds (bench/search_speed.py: 435 ms for
    100 candidates); smaller blocks are the fix (branch ``ivfpq`` stores 64 vectors a row).
    """
    out = np.empty((len(ids), dim), dtype=np.float32)
    for n, i in enumerate(ids.tolist()):
        start = db.execute("SELECT start FROM embeddings WHERE start <= ? ORDER BY start DESC LIMIT 1", (i,)).fetchone()
        if start is None:
            raise sqlite3.DatabaseError(f"no stored embedding for question {i}")
        with db.blobopen("embeddings", "vectors", start[0], readonly=True) as blob:
            blob.seek((i - start[0]) * dim * 4)
            data = blob.read(dim * 4)
        if len(data) != dim * 4:
            raise sqlite3.DatabaseError(f"the embedding of question {i} is cut short")
        out[n] = np.frombuffer(data, dtype=np.float32)
    return out


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
        self._version = None  # SQLite's data_version when FAISS last caught up with it
        self.cache_error: str | None = None  # why index.faiss could not be written, if it could not

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
        ``index`` is ``"flat"`` (exact), ``"hnsw"`` (approximate) or ``"ivfpq"`` (compressed, re-ranked
        exactly; at least :func:`~dupq.vectors.training_size` questions), or an :class:`IndexConfig`.
        """
        folder = Path(folder)
        texts = check_questions(texts)
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
        remove_stale(folder.parent)  # builds killed before their rename
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
            manifest["checksum"] = vectors_index.save(tmp / INDEX_FILE)
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
        if not folder.exists():
            raise DupqError(f"no collection at {folder}: the folder does not exist; build one with `dupq index build`.")
        check_path(folder, "the collection", folder=True)
        if not (folder / MANIFEST).is_file() or not (folder / DATABASE).is_file():
            raise DupqError(f"{folder} is not a dupq collection: it lacks {MANIFEST} or {DATABASE}.")
        remove_stale(folder)  # temporary files of a writer killed mid-write
        manifest = check_manifest(read_json(folder / MANIFEST, f"the manifest of collection {folder}"), folder / MANIFEST, FORMAT)
        recorded, config, dim = manifest["model"], IndexConfig(**manifest["index"]), manifest["dim"]
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
        if dim != model.config.out_dim:
            raise DupqError(f"{folder / MANIFEST} is corrupt: it says dim {dim}, but its model encodes {model.config.out_dim} dimensions.")
        db = _connect(folder / DATABASE)
        try:
            count, vector_count = db.execute(
                "SELECT (SELECT COALESCE(MAX(id) + 1, 0) FROM questions), (SELECT COALESCE(SUM(count), 0) FROM embeddings)"
            ).fetchone()
            if count != vector_count:
                raise DupqError(f"{folder / DATABASE} is corrupt: it holds {count} questions but {vector_count} embeddings.")
            index, saved = cls._cached_index(folder, db, manifest, config, count)
            for block in _stored_vectors(db, len(index), count, dim):
                index.add(block)
        except sqlite3.DatabaseError as e:
            raise DupqError(f"{folder / DATABASE} cannot be read ({e}).") from None
        finally:
            db.close()
        return cls(folder, model, manifest, index, saved)

    @staticmethod
    def _cached_index(folder: Path, db, manifest: dict, config: IndexConfig, count: int) -> tuple[VectorIndex, int]:
        """``index.faiss`` if it is the file the manifest describes and agrees with the stored embeddings, else an empty index."""
        dim = manifest["dim"]
        if manifest.get("checksum") is None:  # written before checksums were recorded: rebuild once
            return VectorIndex(dim, config), 0
        try:
            index = VectorIndex.load(folder / INDEX_FILE, dim, config, checksum=manifest.get("checksum"))
        except DupqError as e:
            log.info("rebuilding the index of %s from the stored embeddings: %s", folder, e)
            return VectorIndex(dim, config), 0
        n = len(index)
        if n != manifest.get("count") or n > count:  # not the file the manifest describes, or not this database's
            return VectorIndex(dim, config), 0
        for i in {0, n - 1} if n and index.exact else ():  # ivfpq keeps codes: the checksum alone vouches for it
            if not np.array_equal(index.vector(i), next(_stored_vectors(db, i, i + 1, dim))[0]):
                return VectorIndex(dim, config), 0
        return index, n

    # Using it.

    @property
    def threshold(self) -> float:
        return self.model.threshold

    def __len__(self) -> int:
        with self._reader_lock:
            return self._reader.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0]

    def stored_vectors(self) -> np.ndarray:
        """Every stored question's embedding, ``(N, d)`` float32, in id order (read from the database, not the index)."""
        self._check_open()
        count = len(self)
        with self._reader_lock:
            blocks = list(_stored_vectors(self._reader, 0, count, self._dim))
        return np.concatenate(blocks) if blocks else np.zeros((0, self._dim), np.float32)

    def nearest(self, vectors: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` of the index's ``k`` nearest stored vectors to each row of ``vectors``: no text, no judging."""
        self._check_open()
        self._refresh()
        with self._index_lock.shared():
            return self._index.search(np.asarray(vectors, dtype=np.float32), k, self._fetch)

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
            scores, ids = self._index.search(vectors, k, self._fetch)  # (Q, k'), (Q, k')
        scores = np.clip(scores, -1.0, 1.0)  # float32 rounding can give 1.0000001
        wanted = sorted({int(i) for i in ids.ravel() if i >= 0})
        rows = {}
        try:
            with self._reader_lock:
                for lo in range(0, len(wanted), 900):  # SQLite's limit on bound parameters
                    part = wanted[lo : lo + 900]
                    marks = ",".join("?" * len(part))
                    for row in self._reader.execute(f"SELECT id, key, text, metadata FROM questions WHERE id IN ({marks})", part):
                        rows[row[0]] = row[1:]
        except sqlite3.DatabaseError as e:
            raise DupqError(f"cannot read {self.folder / DATABASE} ({e}).") from None
        threshold = self.threshold
        out = []
        for query, row_scores, row_ids in zip(vectors, scores, ids):
            found = row_ids >= 0
            probabilities, judged = self._judge(query, row_ids[found], np.clip(row_scores[found], -1.0, 1.0))
            hits = []
            for score, i, p, s in zip(np.clip(row_scores[found], -1.0, 1.0).tolist(), row_ids[found].tolist(), probabilities, judged):
                if i not in rows:
                    continue
                key, text, metadata = rows[i]
                metadata = json.loads(metadata) if metadata else {}
                if key is not None:
                    metadata.setdefault("id", key)
                hits.append(Hit(id=i, text=text, score=score, duplicate=bool(s > threshold), metadata=metadata, probability=p))
            out.append(hits)
        return out

    def _fetch(self, ids: np.ndarray) -> np.ndarray:
        """Stored vectors of ``ids`` ``(len(ids), d)``, read from the database (an ivfpq index's re-ranking)."""
        try:
            with self._reader_lock:
                return _vectors_by_id(self._reader, ids, self._dim)
        except sqlite3.DatabaseError as e:
            raise DupqError(f"cannot read {self.folder / DATABASE} ({e}).") from None

    def _judge(self, query: np.ndarray, ids: np.ndarray, cosines: np.ndarray) -> tuple[list[float | None], np.ndarray]:
        """Each hit's probability (None without a calibration) and the score its verdict compares."""
        model = self.model
        if model.calibration is None and model.head is None:
            return [None] * len(ids), cosines
        if model.needs_vectors:  # a pair head reads both vectors: take the hits' from the index (ivfpq: from the store)
            if self._index.exact:
                with self._index_lock.shared():
                    stored = np.stack([self._index.vector(int(i)) for i in ids]) if len(ids) else np.zeros((0, len(query)), np.float32)
            else:
                stored = self._fetch(np.asarray(ids, dtype=np.int64))
            probabilities = model.probabilities_from_vectors(np.repeat(query[None], len(ids), 0), stored)
        else:  # the logit is a function of the cosine alone
            probabilities = model.probabilities_from_cosines(cosines)
        judged = probabilities if model.threshold_on == "probability" else cosines
        return probabilities.tolist(), judged

    def add(self, texts: list[str], metadata: list[dict] | None = None, keys: list[str | None] | None = None) -> list[int]:
        """Store ``texts`` (and their metadata) in one transaction; returns their ids.

        When this returns, the questions are on disk and searchable; if the process dies
        before, none of them is stored. A question whose ``key`` is stored already is not stored
        again: its stored id is returned (the same key with another text or metadata raises
        :class:`KeyConflict`). Once the transaction is committed, this returns the ids whatever
        happens to the FAISS cache (see the module docstring).
        """
        self._check_open()
        texts = check_questions(texts)
        meta = _check_metadata(metadata, len(texts))
        keys = _check_keys(keys, len(texts))
        if not texts:
            return []
        vectors = self.model.encode(texts)  # (M, d)
        with self._write_lock:
            self._check_open()
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    ids, new = self._place(texts, meta, keys)
                    if new:
                        rows = [(texts[j], keys[j], meta[j]) for j in new]
                        t, k, m = (list(c) for c in zip(*rows))
                        _insert(self._db, ids[new[0]], t, k, m, vectors[new])
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as e:
                raise DupqError(f"cannot add to {self.folder / DATABASE} ({e}).") from None
            try:  # committed: from here on a failure only delays the cache, never the answer
                self._catch_up()
                if len(self._index) - self._saved >= SAVE_DURING_ADD:
                    self._save_index()
            except Exception as e:  # noqa: BLE001 -- the rows are stored; the next search or open catches up
                log.warning("questions %s stored, but the FAISS index lags: %s", ids, e)
        return ids

    def _place(self, texts: list[str], meta: list[str | None], keys: list[str | None]) -> tuple[list[int], list[int]]:
        """The id of each question, and which of them are new (inside the add's transaction).

        A key stored already, or given earlier in the same call, keeps the id it has.
        """
        given = sorted({k for k in keys if k is not None})
        stored = {}
        for lo in range(0, len(given), 900):
            part = given[lo : lo + 900]
            query = f"SELECT key, id, text, metadata FROM questions WHERE key IN ({','.join('?' * len(part))})"
            stored.update((key, row) for key, *row in self._db.execute(query, part))
        start = self._db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0]
        ids, new = [], []
        for j, (text, m, key) in enumerate(zip(texts, meta, keys)):
            if key is not None and key in stored:
                i, stored_text, stored_meta = stored[key]
                if (stored_text, stored_meta) != (text, m):
                    raise KeyConflict(f"the key {key!r} is stored already (id {i}) with another question or metadata.")
                ids.append(i)
                continue
            ids.append(start + len(new))
            new.append(j)
            if key is not None:
                stored[key] = (ids[-1], text, m)
        return ids, new

    def _catch_up(self) -> None:
        """Add to FAISS the stored rows it lacks: another process's adds, or ours after a failure (write lock held)."""
        count = self._db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0]
        if count > len(self._index):
            with self._index_lock.exclusive():
                for block in _stored_vectors(self._db, len(self._index), count, self._dim):
                    self._index.add(block)

    def _refresh(self) -> None:
        """Catch FAISS up when anything was committed to SQLite since it last did (one cheap PRAGMA otherwise)."""
        try:
            with self._reader_lock:
                version = self._reader.execute("PRAGMA data_version").fetchone()[0]
            if version == self._version:
                return
            with self._write_lock:
                self._check_open()
                self._catch_up()
        except sqlite3.DatabaseError as e:
            raise DupqError(f"cannot read {self.folder / DATABASE} ({e}).") from None
        self._version = version

    def _save_index(self) -> None:
        """Rewrite ``index.faiss`` and the manifest that describes it (caller holds the write lock).

        A failure (a full disk) is kept in :attr:`cache_error`, not raised: the questions are in
        SQLite, and the next open rebuilds what the cache lacks.
        """
        try:
            checksum = self._index.save(self.folder / INDEX_FILE)
            self.manifest.update(count=len(self._index), checksum=checksum)
            write_json(self.folder / MANIFEST, self.manifest)
        except OSError as e:
            self.cache_error = (
                f"could not write {self.folder / INDEX_FILE} ({e.strerror or e}); the questions are stored, "
                "and the index is rebuilt from them when the collection is next opened"
            )
            log.warning(self.cache_error)
            return
        self._saved = len(self._index)
        self.cache_error = None

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
