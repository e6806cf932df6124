"""Where a collection's questions and their embeddings live: the :class:`Store` interface and SQLite's.

A store keeps rows ``(id, key, text, metadata)`` and one float32 vector per row. It knows nothing
of models or search; :class:`~dupq.search.collection.Collection` joins a store, a search index and the
model. Two implementations: :class:`SQLiteStore` (here, the default: a file in the collection
folder) and :class:`~dupq.search.milvus.MilvusStore` (Milvus, which also does the search).

What every store guarantees (the collection's promises rest on these):

* :meth:`Store.add` is **one transaction**: when it returns, every row is durable and readable by
  any reader; if it raises or the process dies first, none of them is stored.
* **Keys make retries idempotent**: a key stored already stores nothing and answers the stored
  id; the same key with another text or metadata raises :class:`KeyConflict`
  (:func:`place` is the rule, shared by both stores).
* Ids are what :meth:`Store.add` answered, for as long as the row is stored.

SQLite's layout (``questions.sqlite``, WAL journal, ``synchronous=FULL``)::

    questions (id INTEGER PRIMARY KEY, key TEXT UNIQUE, text, metadata JSON)
    embeddings (start INTEGER PRIMARY KEY, count, vectors BLOB)   -- (count, d) float32 of ids start..

Its ids are ``0, 1, 2, ...`` in order of addition, which is what lets the FAISS cache
(:mod:`dupq.search.cache`) use them as positions. Vectors go in rows of :data:`BLOB_ROWS`: reading one
vector (IVF-PQ re-ranking reads 100 per query) then touches a few pages, where a 65,536-vector
row (as collections written before held) made SQLite walk its overflow pages up to the offset.
Rows of any size are read correctly, so old collections open unchanged.

>>> store = SQLiteStore(Path("runs/faq/questions.sqlite"), dim=128)      # doctest: +SKIP
>>> store.add(["How do I learn Python?"], [None], [None], vectors)        # doctest: +SKIP
[0]
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from dupq.core.files import DupqError, file_lock
from dupq.search.rows import KeyConflict, StoreFailure, failure, same_metadata

log = logging.getLogger(__name__)

BLOB_ROWS = (
    64  # vectors in one embeddings row: one vector read touches one row's few pages (older folders hold up to 65,536)
)
WRITER_LOCK = "writer.lock"  # beside the database: held by the process adding to it
PARAMETERS = 900  # ids bound in one SQL statement (SQLite's limit is 999 in old builds)
BUSY_TIMEOUT = 30.0  # seconds a write waits while another process holds the write lock, then fails as "busy"

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

Row = tuple  # (key or None, text, metadata as JSON text or None)


def place(
    texts: list[str],
    meta: list[str | None],
    keys: list[str | None],
    stored: dict[str, tuple[int, str, str | None]],
    new_id: Callable[[int, str | None], int],
) -> tuple[list[int], list[int]]:
    """The id of each question, and the positions of those to store (the key rule of every store).

    ``stored`` maps the given keys that are stored already to ``(id, text, metadata)``; a key seen
    there, or earlier in the same call, keeps its id (:class:`KeyConflict` if its text or metadata
    differ); ``new_id(n, key)`` is the id of the ``n``-th new question.
    """
    stored = dict(stored)
    ids, new = [], []
    given: dict[str, int] = {}  # the keys new in this call: the question that brought each
    for j, (text, m, key) in enumerate(zip(texts, meta, keys)):
        if key is not None and key in stored:
            i, stored_text, stored_meta = stored[key]
            same = stored_text == text and same_metadata(stored_meta, m)
            if not same and key in given:  # no id is taken: nothing is stored
                raise KeyConflict(
                    f"the key {key!r} is given to questions {given[key] + 1} and {j + 1} of one add, "
                    "with another question or metadata; nothing was stored."
                )
            if not same:
                raise KeyConflict(f"the key {key!r} is stored already (id {i}) with another question or metadata.")
            ids.append(i)
            continue
        ids.append(new_id(len(new), key))
        new.append(j)
        if key is not None:
            stored[key], given[key] = (ids[-1], text, m), j
    return ids, new


class Store(ABC):
    """Rows and their vectors, by id. Thread-safe; :meth:`add` calls must not overlap (the collection serialises them)."""

    where: str  # the store's location, for messages
    dim: int  # width of the vectors

    @abstractmethod
    def count(self) -> int:
        """How many questions are stored (every committed add, this process's or another's)."""

    @abstractmethod
    def add(
        self, texts: list[str], keys: list[str | None], metadata: list[str | None], vectors: np.ndarray
    ) -> list[int]:
        """Store the questions (metadata as JSON text) and their ``vectors (M, d)`` in one transaction; their ids."""

    @abstractmethod
    def rows(self, ids: list[int]) -> dict[int, Row]:
        """``{id: (key, text, metadata JSON)}`` of the stored ``ids`` (missing ones left out)."""

    @abstractmethod
    def vectors_by_id(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of ``ids``, ``(len(ids), d)`` float32."""

    @abstractmethod
    def all_vectors(self) -> np.ndarray:
        """Every stored vector, ``(N, d)`` float32, in id order."""

    @abstractmethod
    def all_rows(self) -> list[tuple[int, Row]]:
        """Every stored ``(id, (key, text, metadata JSON))``, in id order."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; closing twice is harmless."""


def read_only_mount(path: Path) -> bool:
    """Whether ``path`` lies on a file system mounted read-only (nothing can change the file there)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the database at ``path``: read-write, or read-only where it cannot be written.

    On a read-only mount SQLite cannot create the WAL's ``-shm`` file, so a plain open fails; the
    file is then opened ``immutable`` (nothing can change it there, so no locks are needed). A file
    this process may not write elsewhere is opened ``mode=ro``. Either way searches work, and an
    add fails as a :class:`StoreFailure` with reason ``"read-only"``.
    """
    db = _connect(path)
    db.text_factory = _text
    return db


def _text(data: bytes) -> str | bytes:
    """A TEXT value as ``str``; bytes that are not UTF-8 stay bytes, for the reader to call the row damaged."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _connect(path: Path) -> sqlite3.Connection:
    uri = None
    if read_only_mount(path):
        uri = f"{path.absolute().as_uri()}?immutable=1"
    elif not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        uri = f"{path.absolute().as_uri()}?mode=ro"
    try:
        if uri is not None:
            return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
    except sqlite3.DatabaseError as e:
        raise DupqError(f"{path} cannot be read as a SQLite database ({e}).") from None
    return db


def insert(db: sqlite3.Connection, start: int, texts, keys, metadata, vectors: np.ndarray) -> None:
    """Insert questions ``start, start + 1, ...`` and their embeddings, ``BLOB_ROWS`` a row (inside the caller's transaction)."""
    if not np.isfinite(vectors).all():  # a NaN vector is never found again: store none
        raise DupqError("the model encoded a question to NaN or infinity; nothing was stored.")
    ids = range(start, start + len(texts))
    db.executemany(
        "INSERT INTO questions (id, key, text, metadata) VALUES (?, ?, ?, ?)", zip(ids, keys, texts, metadata)
    )
    for lo in range(0, len(vectors), BLOB_ROWS):
        block = np.ascontiguousarray(vectors[lo : lo + BLOB_ROWS], dtype=np.float32)
        db.execute(
            "INSERT INTO embeddings (start, count, vectors) VALUES (?, ?, ?)", (start + lo, len(block), block.tobytes())
        )


def stored_vectors(db: sqlite3.Connection, lo: int, hi: int, dim: int) -> Iterator[np.ndarray]:
    """The stored embeddings of questions ``lo .. hi - 1``, in order, a row at a time."""
    rows = db.execute(
        "SELECT start, count, vectors FROM embeddings WHERE start + count > ? AND start < ? ORDER BY start", (lo, hi)
    )
    for start, count, blob in rows:
        if not isinstance(blob, bytes) or len(blob) != count * dim * 4:
            size = len(blob) if isinstance(blob, bytes) else type(blob).__name__
            raise sqlite3.DatabaseError(
                f"the embeddings from question {start} hold {size} bytes, not {count} x {dim} float32"
            )
        block = np.frombuffer(blob, dtype=np.float32).reshape(count, dim)
        _check_finite(block, start)
        yield block[max(lo - start, 0) : hi - start]


def _check_finite(vectors: np.ndarray, first_id, ids=None) -> None:
    """A stored embedding holding NaN or infinity matches no query: refuse it as damage, never index it."""
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        i = int(ids[bad[0]]) if ids is not None else first_id + int(bad[0])
        raise sqlite3.DatabaseError(f"the stored embedding of question {i} holds NaN or infinity")


def vectors_by_id(db: sqlite3.Connection, ids: np.ndarray, dim: int) -> np.ndarray:
    """The stored embeddings of ``ids``, ``(len(ids), d)``, each read alone from its row's BLOB.

    Incremental BLOB reads (``blobopen``) return the 4 * d bytes of one vector without reading its
    whole row: this is how an ivfpq collection re-ranks its short list while memory holds codes
    only. SQLite walks a BLOB's overflow pages up to the offset, so the cost grows with the row:
    a vector deep in a 65,536-vector row (older collections) costs milliseconds, one in a row of
    :data:`BLOB_ROWS` a few page reads.
    """
    out = np.empty((len(ids), dim), dtype=np.float32)
    for n, i in enumerate(np.asarray(ids).tolist()):
        start = db.execute("SELECT start FROM embeddings WHERE start <= ? ORDER BY start DESC LIMIT 1", (i,)).fetchone()
        if start is None:
            raise sqlite3.DatabaseError(f"no stored embedding for question {i}")
        with db.blobopen("embeddings", "vectors", start[0], readonly=True) as blob:
            blob.seek((i - start[0]) * dim * 4)
            data = blob.read(dim * 4)
        if len(data) != dim * 4:
            raise sqlite3.DatabaseError(f"the embedding of question {i} is cut short")
        out[n] = np.frombuffer(data, dtype=np.float32)
    _check_finite(out, None, ids)
    return out


@contextmanager
def building(path: Path, where: str) -> Iterator[sqlite3.Connection]:
    """A new database at ``path`` for a build, filled in one transaction, committed and synced when the block ends.

    It is written unsynced and fsynced once at the end (the build's folder appears only after).
    A database error (a full disk) is one :class:`DupqError` naming ``where``, the collection being built.
    """
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.executescript(SCHEMA)
        db.execute("BEGIN")
        yield db
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.DatabaseError as e:
        raise DupqError(f"cannot build the collection {where} ({e}).") from None
    finally:
        db.close()
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


class SQLiteStore(Store):
    """The questions and embeddings in one SQLite file: ids ``0, 1, 2, ...`` in order of addition.

    Two connections: one for writes (and the range reads of a catch-up, which the collection
    makes under its write lock), one for the look-ups of searches.
    """

    def __init__(self, path: Path, dim: int):
        self.path, self.dim, self.where = Path(path), dim, str(path)
        self._db = connect(self.path)
        self._reader = connect(self.path)
        self._reader_lock = threading.Lock()

    def _read(self, fn):
        """``fn(reader connection)`` under the reader's lock, a database error as one sentence."""
        try:
            with self._reader_lock:
                return fn(self._reader)
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None

    def count(self) -> int:
        return self._read(lambda db: db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0])

    def check(self) -> int:
        """The number of questions, after checking that each has its embedding (as an open does)."""
        try:
            count, vector_count = self._db.execute(
                "SELECT (SELECT COALESCE(MAX(id) + 1, 0) FROM questions), (SELECT COALESCE(SUM(count), 0) FROM embeddings)"
            ).fetchone()
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None
        if count != vector_count:
            raise DupqError(f"{self.path} is corrupt: it holds {count} questions but {vector_count} embeddings.")
        return count

    def version(self) -> int:
        """SQLite's ``data_version``: it changes whenever another connection (this process's writer or another process) commits."""
        return self._read(lambda db: db.execute("PRAGMA data_version").fetchone()[0])

    def add(self, texts, keys, metadata, vectors) -> list[int]:
        """One transaction; writers of other processes (``dupq serve`` workers, ``index add``) wait on
        :data:`WRITER_LOCK` beside the database, which hands over at once, where SQLite's busy
        handler would sleep up to 100 ms between tries. After :data:`BUSY_TIMEOUT` seconds of waiting
        the add fails as ``"busy"`` (the service's 503), as SQLite's own wait does."""
        with ExitStack() as held:
            try:
                held.enter_context(file_lock(self.path.with_name(WRITER_LOCK), timeout=BUSY_TIMEOUT))
            except TimeoutError:
                raise StoreFailure(
                    f"cannot add to {self.path}: another process has held its write lock for {BUSY_TIMEOUT:g} s; "
                    "nothing was stored, try again.",
                    "busy",
                ) from None
            except OSError:  # a folder one cannot write to: SQLite says why the add fails
                pass
            return self._add(texts, keys, metadata, vectors)

    def _add(self, texts, keys, metadata, vectors) -> list[int]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                ids, new = self._place(texts, metadata, keys)
                if new:
                    insert(
                        self._db,
                        ids[new[0]],
                        [texts[j] for j in new],
                        [keys[j] for j in new],
                        [metadata[j] for j in new],
                        vectors[new],
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        except sqlite3.DatabaseError as e:
            raise failure("add to", self.path, e) from None
        return ids

    def _rollback(self) -> None:
        """Roll back the add's transaction, if SQLite has not already (it has after a full disk):
        the error that made the add fail is the one to report, not the rollback's."""
        if not self._db.in_transaction:
            return
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error as e:
            log.warning("rolling back an add to %s failed: %s", self.path, e)

    def _place(self, texts, meta, keys) -> tuple[list[int], list[int]]:
        """:func:`place` with the stored keys and the next id read inside the add's transaction."""
        given = sorted({k for k in keys if k is not None})
        stored = {}
        for lo in range(0, len(given), PARAMETERS):
            part = given[lo : lo + PARAMETERS]
            query = f"SELECT key, id, text, metadata FROM questions WHERE key IN ({','.join('?' * len(part))})"
            stored.update((key, tuple(row)) for key, *row in self._db.execute(query, part))
        start = self._db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM questions").fetchone()[0]
        return place(texts, meta, keys, stored, lambda n, key: start + n)

    def rows(self, ids) -> dict[int, Row]:
        wanted = sorted(set(ids))

        def read(db):
            found = {}
            for lo in range(0, len(wanted), PARAMETERS):
                part = wanted[lo : lo + PARAMETERS]
                marks = ",".join("?" * len(part))
                for i, *row in db.execute(f"SELECT id, key, text, metadata FROM questions WHERE id IN ({marks})", part):
                    found[i] = tuple(row)
            return found

        return self._read(read)

    def vectors_by_id(self, ids) -> np.ndarray:
        return self._read(lambda db: vectors_by_id(db, np.asarray(ids, dtype=np.int64), self.dim))

    def vectors(self, lo: int, hi: int) -> Iterator[np.ndarray]:
        """The vectors of ids ``lo .. hi - 1`` a row at a time, read on the writer's connection (adds must not overlap)."""
        try:
            yield from stored_vectors(self._db, lo, hi, self.dim)
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None

    def all_vectors(self) -> np.ndarray:
        count = self.count()
        blocks = self._read(lambda db: list(stored_vectors(db, 0, count, self.dim)))
        return np.concatenate(blocks) if blocks else np.zeros((0, self.dim), np.float32)

    def all_rows(self) -> list[tuple[int, Row]]:
        query = "SELECT id, key, text, metadata FROM questions ORDER BY id"
        return self._read(lambda db: [(i, tuple(row)) for i, *row in db.execute(query)])

    def close(self) -> None:
        self._db.close()
        with self._reader_lock:
            self._reader.close()
