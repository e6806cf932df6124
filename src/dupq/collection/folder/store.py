"""A folder collection's questions and their embeddings: SQLite (:class:`SQLiteStore`).

The store keeps rows ``(id, key, text, metadata)`` and one float32 vector per row, and knows nothing of models or
search; :class:`~dupq.collection.folder.backend.FolderBackend` joins it and the FAISS index. Its transactions keep the
promises of :mod:`dupq.collection.backend` (one transaction per write; keys by :func:`~dupq.collection.rows.place`'s
rule), and an id is what :meth:`SQLiteStore.add` answered for as long as the row is stored (a new text for a key is a
new id; the old one joins ``removed``, its vector kept). The tables and their SQL are :mod:`dupq.collection.folder.sqlite`.

>>> store = SQLiteStore(Path("runs/faq/questions.sqlite"), dim=128)      # doctest: +SKIP
>>> store.add(["How do I learn Python?"], [None], [None], vectors)        # doctest: +SKIP
[0]
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from dupq.collection.backend import Row, Where
from dupq.collection.folder import sqlite
from dupq.collection.folder.sqlite import BUSY_TIMEOUT, connect, failure, insert
from dupq.collection.rows import StoreFailure, check_stored, edited, in_parts, place, same_metadata, taken
from dupq.core.errors import DupqError
from dupq.core.files import file_lock

log = logging.getLogger(__name__)

WRITER_LOCK = "writer.lock"  # beside the database: held by the process adding to it


class SQLiteStore:
    """The questions and embeddings in one SQLite file: ids ``0, 1, 2, ...`` in order of addition.

    A removed question's row goes and its id joins ``removed``; its vector stays in its embeddings row (the rows of
    vectors stay whole, so a question's id stays its FAISS position), and the index filters it out. A new text for a key
    is a new id (the old one removed) in the same transaction. Two connections: one for writes (and the range reads of a
    catch-up, which the backend makes under its write lock), one for the look-ups of searches.
    """

    def __init__(self, path: Path, dim: int):
        self.path, self.dim, self.where = Path(path), dim, str(path)
        self._db = connect(self.path)
        self._reader = connect(self.path)
        self._reader_lock = threading.Lock()
        try:  # a collection written before removals (or rerankers): the tables appear on its first open for writing
            self._db.execute("CREATE TABLE IF NOT EXISTS removed (id INTEGER PRIMARY KEY)")
            self._db.executescript(sqlite.RERANKED)
        except sqlite3.DatabaseError:  # read-only: nothing was ever removed from it here
            pass

    @contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        """A database error of the block as one sentence (:func:`~dupq.collection.folder.sqlite.failure`)."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            raise failure(doing, self.path, e) from None

    def _read(self, fn):
        """``fn(reader connection)`` under the reader's lock, a database error as one sentence."""
        with self._failing("read"), self._reader_lock:
            return fn(self._reader)

    def count(self) -> int:
        return self._read(lambda db: db.execute("SELECT COUNT(*) FROM questions").fetchone()[0])

    def extent(self) -> int:
        """The next id: how many vectors the embeddings hold (removed questions' included)."""
        with self._failing("read"):
            return sqlite.extent(self._db)

    def check(self) -> int:
        """The extent, after checking that every question has its embedding (as an open does)."""
        with self._failing("read"):
            top, vector_count, extent = self._db.execute(
                "SELECT (SELECT COALESCE(MAX(id) + 1, 0) FROM questions), (SELECT COALESCE(SUM(count), 0) FROM embeddings), "
                "(SELECT COALESCE(MAX(start + count), 0) FROM embeddings)"
            ).fetchone()
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
            with self._failing(doing):
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise

    def add(self, texts, keys, metadata, vectors) -> list[int]:
        with self._transaction("add to") as db:
            ids, new = self._place(db, texts, metadata, keys)
            if new:
                insert(db, ids[new[0]], *taken(new, texts, keys, metadata), vectors[new])
        return ids

    def remove(self, keys: list[str]) -> list[int]:
        with self._transaction("remove from") as db:
            stored = sqlite.find(db, keys)
            check_stored(stored, keys, self.where, "removed")
            ids = sorted({stored[k][0] for k in keys})
            sqlite.remove_ids(db, ids)
        return [stored[k][0] for k in keys]

    def update(self, key: str, text: str | None, metadata: str | None, vector) -> int:
        with self._transaction("update") as db:
            stored = sqlite.find(db, [key])
            check_stored(stored, [key], self.where, "changed")
            i, old_text, old_meta = stored[key]
            text = old_text if text is None else text
            metadata = old_meta if metadata is None else metadata
            if text == old_text:  # the same text keeps its id and vector (a retried update changes nothing)
                if not same_metadata(metadata, old_meta):
                    db.execute("UPDATE questions SET metadata = ? WHERE id = ?", (metadata, i))
                return i
            sqlite.remove_ids(db, [i])
            i = sqlite.extent(db)
            insert(db, i, [text], [key], [metadata], np.asarray(vector, np.float32).reshape(1, self.dim))
        return i

    def edit(self, key: str, change, others: list[str]) -> tuple[int, str | None]:
        """``key``'s metadata read, changed and written back in one ``BEGIN IMMEDIATE`` transaction (see Backend.edit)."""
        with self._transaction("update") as db:
            i, old, new = edited(sqlite.find(db, [key, *others]), key, others, change, self.where)
            if not same_metadata(new, old):
                db.execute("UPDATE questions SET metadata = ? WHERE id = ?", (new, i))
        return i, new

    def find(self, keys: list[str]) -> dict[str, tuple[int, str, str | None]]:
        return self._read(lambda db: sqlite.find(db, keys))

    def reranked(self, ids: list[int], dim: int) -> dict[int, tuple[str, np.ndarray]]:
        def read(db):
            try:
                return sqlite.reranked(db, ids, dim)
            except sqlite3.OperationalError:  # no such table: opened read-only, written before rerankers
                return {}

        return self._read(read)

    def keep_reranked(self, ids: list[int], digests: list[str], vectors: np.ndarray) -> None:
        with self._transaction("store reranker vectors in") as db:
            sqlite.keep_reranked(db, ids, digests, vectors)

    def matching(self, where: Where) -> np.ndarray:
        """The ids of the stored questions whose metadata match ``where`` (see :func:`~dupq.collection.backend.matches`), sorted."""
        clause, params = _matching(where)
        query = f"SELECT id FROM questions WHERE {clause} ORDER BY id"
        return self._read(lambda db: np.array([i for (i,) in db.execute(query, params)], dtype=np.int64))

    def page(self, after: int, limit: int, where: Where | None) -> list[tuple[int, tuple]]:
        """Up to ``limit`` rows ``(id, (key, text, metadata))`` of ids above ``after`` matching ``where``, by id."""
        clause, params = _matching(where) if where else ("1", [])
        query = f"SELECT id, key, text, metadata FROM questions WHERE id > ? AND {clause} ORDER BY id LIMIT ?"
        return self._read(lambda db: [(i, tuple(row)) for i, *row in db.execute(query, [after, *params, limit])])

    def naming(self, field: str) -> list[tuple[int, Row]]:
        """Every stored ``(id, (key, text, metadata))`` whose metadata has ``field`` (a name of letters, digits and
        _), in id order: the text a name is written as picks the few candidates, then SQLite's JSON checks each."""
        query = (
            "SELECT id, key, text, metadata FROM questions WHERE metadata LIKE ? AND json_valid(metadata) "
            "AND json_type(metadata, ?) IS NOT NULL ORDER BY id"
        )
        params = [f'%"{field}"%', f'$."{field}"']
        return self._read(lambda db: [(i, tuple(row)) for i, *row in db.execute(query, params)])

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
        stored = sqlite.find(db, sorted({k for k in keys if k is not None}))
        start = sqlite.extent(db)
        return place(texts, meta, keys, stored, lambda n, key: start + n)

    def rows(self, ids) -> dict[int, Row]:
        wanted = sorted(set(ids))

        def read(db):
            found = {}
            for part in in_parts(wanted):
                marks = ",".join("?" * len(part))
                for i, *row in db.execute(f"SELECT id, key, text, metadata FROM questions WHERE id IN ({marks})", part):
                    found[i] = tuple(row)
            return found

        return self._read(read)

    def vectors_by_id(self, ids) -> np.ndarray:
        return self._read(lambda db: sqlite.vectors_by_id(db, np.asarray(ids, dtype=np.int64), self.dim))

    def vectors(self, lo: int, hi: int) -> Iterator[np.ndarray]:
        """The vectors of ids ``lo .. hi - 1`` a row at a time, read on the writer's connection (writes must not overlap)."""
        with self._failing("read"):
            yield from sqlite.stored_vectors(self._db, lo, hi, self.dim)

    def all_vectors(self) -> np.ndarray:
        """The vectors of the stored questions (not the removed ones), ``(N, d)``, in id order."""
        return self._read(lambda db: sqlite.live_vectors(db, self.dim))[1]

    def live_vectors(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``ids (N,)``, ``vectors (N, d)`` of the stored questions and the extent they were read up to, in one
        transaction on a connection of its own: a snapshot for a background rebuild, while searches and writes go on."""
        db = connect(self.path)
        try:
            with self._failing("read"):
                db.execute("BEGIN")
                return sqlite.live_vectors(db, self.dim)
        finally:
            db.close()

    def all_rows(self) -> list[tuple[int, Row]]:
        query = "SELECT id, key, text, metadata FROM questions ORDER BY id"
        return self._read(lambda db: [(i, tuple(row)) for i, *row in db.execute(query)])

    def close(self) -> None:
        self._db.close()
        with self._reader_lock:
            self._reader.close()


def _matching(where: Where) -> tuple[str, list]:
    """The SQL condition (and its parameters) of the rows whose metadata match ``where``."""
    clauses, params = [], []
    for field, values in where.items():
        path = f'$."{field}"'  # field names are letters, digits and _ (backend.FIELD)
        # json_extract of an object or array is its JSON text, which must not equal a string filter
        clauses.append(
            "CASE WHEN json_valid(metadata) AND json_type(metadata, ?) NOT IN ('object', 'array', 'null') "
            f"THEN json_extract(metadata, ?) END IN ({','.join('?' * len(values))})"
        )
        params += [path, path, *values]
    return " AND ".join(clauses), params
