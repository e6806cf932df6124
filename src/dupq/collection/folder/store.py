"""A folder collection's questions and their embeddings: SQLite (:class:`SQLiteStore`).

The store keeps rows ``(id, key, text, metadata)`` and one float32 vector per row. It knows nothing
of models or search; :class:`~dupq.collection.folder.backend.FolderBackend` joins it and the FAISS index.

What it guarantees (the backend's promises, :mod:`dupq.collection.backend`, rest on these):

* an add, a removal and an update are each **one transaction**: when it returns, the change is
  durable and seen by any reader; if it raises or the process dies first, none of it is applied.
* **Keys make retries idempotent**: a key stored already stores nothing and answers the stored
  id; the same key with another text or metadata raises :class:`KeyConflict`
  (:func:`place` is the rule, shared by both stores).
* Ids are what :meth:`SQLiteStore.add` answered, for as long as the row is stored (a new text
  for a key is a new id; the old one joins ``removed``, and its vector stays).

SQLite's layout (``questions.sqlite``, WAL journal, ``synchronous=FULL``)::

    questions (id INTEGER PRIMARY KEY, key TEXT UNIQUE, text, metadata JSON)
    embeddings (start INTEGER PRIMARY KEY, count, vectors BLOB)   -- (count, d) float32 of ids start..
    removed (id INTEGER PRIMARY KEY)                              -- removed ids, filtered out of searches

Its ids are ``0, 1, 2, ...`` in order of addition, which is what lets the FAISS cache
(:mod:`dupq.collection.folder.cache`) use them as positions. Vectors go in rows of :data:`BLOB_ROWS`: reading one
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from dupq.collection.backend import Row, Where
from dupq.collection.rows import KeyConflict, StoreFailure, UnknownKey, failure, same_metadata
from dupq.core.errors import DupqError
from dupq.core.files import file_lock

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
CREATE TABLE IF NOT EXISTS removed (
    id INTEGER PRIMARY KEY      -- a removed question: its vector stays in embeddings, FAISS filters it out
);
"""


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


class SQLiteStore:
    """The questions and embeddings in one SQLite file: ids ``0, 1, 2, ...`` in order of addition.

    A removed question's row goes and its id joins ``removed``; its vector stays in its embeddings
    row (the rows of vectors stay whole, so a question's id stays its FAISS position), and the
    index filters it out. A new text for a key is a new id (the old one removed) in the same
    transaction. Two connections: one for writes (and the range reads of a catch-up, which the
    backend makes under its write lock), one for the look-ups of searches.
    """

    def __init__(self, path: Path, dim: int):
        self.path, self.dim, self.where = Path(path), dim, str(path)
        self._db = connect(self.path)
        self._reader = connect(self.path)
        self._reader_lock = threading.Lock()
        try:  # a collection written before removals: the table appears on its first open for writing
            self._db.execute("CREATE TABLE IF NOT EXISTS removed (id INTEGER PRIMARY KEY)")
        except sqlite3.DatabaseError:  # read-only: nothing was ever removed from it here
            pass

    def _read(self, fn):
        """``fn(reader connection)`` under the reader's lock, a database error as one sentence."""
        try:
            with self._reader_lock:
                return fn(self._reader)
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None

    def count(self) -> int:
        return self._read(lambda db: db.execute("SELECT COUNT(*) FROM questions").fetchone()[0])

    def extent(self) -> int:
        """The next id: how many vectors the embeddings hold (removed questions' included)."""
        try:
            return _extent(self._db)
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None

    def check(self) -> int:
        """The extent, after checking that every question has its embedding (as an open does)."""
        try:
            top, vector_count, extent = self._db.execute(
                "SELECT (SELECT COALESCE(MAX(id) + 1, 0) FROM questions), (SELECT COALESCE(SUM(count), 0) FROM embeddings), "
                "(SELECT COALESCE(MAX(start + count), 0) FROM embeddings)"
            ).fetchone()
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None
        if top > vector_count or vector_count != extent:
            raise DupqError(f"{self.path} is corrupt: it holds {top} questions but {vector_count} embeddings.")
        return extent

    def version(self) -> int:
        """SQLite's ``data_version``: it changes whenever another connection (this process's writer or another process) commits."""
        return self._read(lambda db: db.execute("PRAGMA data_version").fetchone()[0])

    def removed(self) -> np.ndarray:
        """The removed ids, sorted ``(R,)`` int64."""

        def read(db):
            try:
                return np.array([i for (i,) in db.execute("SELECT id FROM removed ORDER BY id")], dtype=np.int64)
            except sqlite3.OperationalError:  # no such table: opened read-only, written before removals
                return np.zeros(0, np.int64)

        return self._read(read)

    @contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` .. ``COMMIT``, rolled back on any error).

        Writers of other processes (``dupq serve`` workers, ``index add``) wait on
        :data:`WRITER_LOCK` beside the database, which hands over at once, where SQLite's busy
        handler would sleep up to 100 ms between tries. After :data:`BUSY_TIMEOUT` seconds of
        waiting the write fails as ``"busy"`` (the service's 503), as SQLite's own wait does.
        """
        with ExitStack() as held:
            try:
                held.enter_context(file_lock(self.path.with_name(WRITER_LOCK), timeout=BUSY_TIMEOUT))
            except TimeoutError:
                raise StoreFailure(
                    f"cannot {doing} {self.path}: another process has held its write lock for {BUSY_TIMEOUT:g} s; "
                    f"nothing was {'stored' if doing == 'add to' else 'changed'}, try again.",
                    "busy",
                ) from None
            except OSError:  # a folder one cannot write to: SQLite says why the write fails
                pass
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            except sqlite3.DatabaseError as e:
                raise failure(doing, self.path, e) from None

    def add(self, texts, keys, metadata, vectors) -> list[int]:
        with self._transaction("add to") as db:
            ids, new = self._place(db, texts, metadata, keys)
            if new:
                insert(
                    db,
                    ids[new[0]],
                    [texts[j] for j in new],
                    [keys[j] for j in new],
                    [metadata[j] for j in new],
                    vectors[new],
                )
        return ids

    def remove(self, keys: list[str]) -> list[int]:
        with self._transaction("remove from") as db:
            stored = _find(db, keys)
            missing = [k for k in keys if k not in stored]
            if missing:
                raise UnknownKey(
                    f"no question with the key {missing[0]!r} is stored in {self.where}; nothing was removed."
                )
            ids = sorted({stored[k][0] for k in keys})
            _remove_ids(db, ids)
        return [stored[k][0] for k in keys]

    def update(self, key: str, text: str | None, metadata: str | None, vector) -> int:
        with self._transaction("update") as db:
            stored = _find(db, [key])
            if key not in stored:
                raise UnknownKey(f"no question with the key {key!r} is stored in {self.where}; nothing was changed.")
            i, old_text, old_meta = stored[key]
            text = old_text if text is None else text
            metadata = old_meta if metadata is None else metadata
            if text == old_text:  # the same text keeps its id and vector (a retried update changes nothing)
                if not same_metadata(metadata, old_meta):
                    db.execute("UPDATE questions SET metadata = ? WHERE id = ?", (metadata, i))
                return i
            _remove_ids(db, [i])
            i = _extent(db)
            insert(db, i, [text], [key], [metadata], np.asarray(vector, np.float32).reshape(1, self.dim))
        return i

    def edit(self, key: str, change, others: list[str]) -> tuple[int, str | None]:
        """``key``'s metadata read, changed and written back in one ``BEGIN IMMEDIATE`` transaction (see Backend.edit)."""
        with self._transaction("update") as db:
            stored = _find(db, [key, *others])
            missing = [k for k in [key, *others] if k not in stored]
            if missing:
                raise UnknownKey(
                    f"no question with the key {missing[0]!r} is stored in {self.where}; nothing was changed."
                )
            i, _, old = stored[key]
            new = change(old)
            if not same_metadata(new, old):
                db.execute("UPDATE questions SET metadata = ? WHERE id = ?", (new, i))
        return i, new

    def find(self, keys: list[str]) -> dict[str, tuple[int, str, str | None]]:
        return self._read(lambda db: _find(db, keys))

    def matching(self, where: Where) -> np.ndarray:
        """The ids of the stored questions whose metadata match ``where`` (see :func:`~dupq.collection.backend.matches`), sorted."""
        clauses, params = [], []
        for field, values in where.items():
            path = f'$."{field}"'  # field names are letters, digits and _ (backend.FIELD)
            # json_extract of an object or array is its JSON text, which must not equal a string filter
            clauses.append(
                "CASE WHEN json_valid(metadata) AND json_type(metadata, ?) NOT IN ('object', 'array', 'null') "
                f"THEN json_extract(metadata, ?) END IN ({','.join('?' * len(values))})"
            )
            params += [path, path, *values]
        query = f"SELECT id FROM questions WHERE {' AND '.join(clauses)} ORDER BY id"
        return self._read(lambda db: np.array([i for (i,) in db.execute(query, params)], dtype=np.int64))

    def _rollback(self) -> None:
        """Roll back the write's transaction, if SQLite has not already (it has after a full disk):
        the error that made the write fail is the one to report, not the rollback's."""
        if not self._db.in_transaction:
            return
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error as e:
            log.warning("rolling back a write to %s failed: %s", self.path, e)

    def _place(self, db, texts, meta, keys) -> tuple[list[int], list[int]]:
        """:func:`place` with the stored keys and the next id read inside the add's transaction."""
        stored = _find(db, sorted({k for k in keys if k is not None}))
        start = _extent(db)
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
        """The vectors of ids ``lo .. hi - 1`` a row at a time, read on the writer's connection (writes must not overlap)."""
        try:
            yield from stored_vectors(self._db, lo, hi, self.dim)
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None

    def all_vectors(self) -> np.ndarray:
        """The vectors of the stored questions (not the removed ones), ``(N, d)``, in id order."""
        return self._read(lambda db: _live_vectors(db, self.dim))[1]

    def live_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """``ids (N,)`` and ``vectors (N, d)`` of the stored questions, read in one transaction on a connection
        of its own: a snapshot for a background rebuild, while searches and writes go on."""
        db = connect(self.path)
        try:
            db.execute("BEGIN")
            return _live_vectors(db, self.dim)
        except sqlite3.DatabaseError as e:
            raise failure("read", self.path, e) from None
        finally:
            db.close()

    def all_rows(self) -> list[tuple[int, Row]]:
        query = "SELECT id, key, text, metadata FROM questions ORDER BY id"
        return self._read(lambda db: [(i, tuple(row)) for i, *row in db.execute(query)])

    def close(self) -> None:
        self._db.close()
        with self._reader_lock:
            self._reader.close()


def _live_vectors(db: sqlite3.Connection, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``ids (N,)`` and ``vectors (N, d)`` of the stored questions (not the removed ones), in id order."""
    live = np.array([i for (i,) in db.execute("SELECT id FROM questions ORDER BY id")], dtype=np.int64)
    blocks = list(stored_vectors(db, 0, _extent(db), dim))
    every = np.concatenate(blocks) if blocks else np.zeros((0, dim), np.float32)
    return live, every[live]


def _extent(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COALESCE(MAX(start + count), 0) FROM embeddings").fetchone()[0]


def _find(db: sqlite3.Connection, keys) -> dict[str, tuple[int, str, str | None]]:
    """``{key: (id, text, metadata)}`` of the stored ``keys``."""
    keys, found = list(keys), {}
    for lo in range(0, len(keys), PARAMETERS):
        part = keys[lo : lo + PARAMETERS]
        query = f"SELECT key, id, text, metadata FROM questions WHERE key IN ({','.join('?' * len(part))})"
        found.update((key, tuple(row)) for key, *row in db.execute(query, part))
    return found


def _remove_ids(db: sqlite3.Connection, ids: list[int]) -> None:
    for lo in range(0, len(ids), PARAMETERS):
        part = ids[lo : lo + PARAMETERS]
        db.execute(f"DELETE FROM questions WHERE id IN ({','.join('?' * len(part))})", part)
        db.executemany("INSERT OR IGNORE INTO removed (id) VALUES (?)", [(i,) for i in part])
