"""SQLite as a folder collection keeps it: the connection, the tables, the embeddings' rows, and its errors as sentences.

SQLite's layout (``questions.sqlite``, WAL journal, ``synchronous=FULL``)::

    questions (id INTEGER PRIMARY KEY, key TEXT UNIQUE, text, metadata JSON)
    embeddings (start INTEGER PRIMARY KEY, count, vectors BLOB)   -- (count, d) float32 of ids start..
    removed (id INTEGER PRIMARY KEY)                              -- removed ids, filtered out of searches
    reranked (id INTEGER PRIMARY KEY, digest, vector BLOB)        -- a reranker's (d',) float32 of a stored question

Its ids are ``0, 1, 2, ...`` in order of addition: the FAISS cache's positions. Vectors go in rows of
:data:`BLOB_ROWS`, so reading one (IVF-PQ re-ranks 100 a query) touches a few pages (:func:`vectors_by_id`); rows of
any size are read, so older collections open unchanged. :class:`~dupq.collection.folder.store.SQLiteStore`'s
transactions are made of these functions.
"""

from __future__ import annotations

import bisect
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dupq.collection.rows import StoreFailure, in_parts
from dupq.core.errors import DupqError

# vectors in one embeddings row: one vector read touches one row's few pages (older folders hold up to 65,536)
BLOB_ROWS = 64
SPAN_BYTES = 1 << 20  # a row's wanted vectors are read in one piece when they lie within this many bytes
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
CREATE TABLE IF NOT EXISTS reranked (
    id INTEGER PRIMARY KEY,     -- a stored question (a removal deletes its row here in the same transaction)
    digest TEXT NOT NULL,       -- text_digest of the text the vector encodes (another: stale, encoded again)
    vector BLOB NOT NULL        -- (d',) float32: the collection's reranker's vector of it
);
"""

# SQLite's primary result codes (the low byte of sqlite_errorcode) that name a reason.
_SQLITE_REASONS = {13: "full", 5: "busy", 6: "busy", 8: "read-only", 11: "damaged", 26: "damaged"}
_EXPLAINED = {
    "full": "the disk is full",
    "busy": "another process holds its write lock; try again",
    "read-only": "it is read-only here",
    "damaged": "the file is damaged; build the collection again from its questions",
}


def failure(doing: str, where, e: sqlite3.Error) -> StoreFailure:
    """A SQLite error as one sentence naming what failed, where and why, with its reason."""
    code = getattr(e, "sqlite_errorcode", None)
    reason = "damaged" if code is None else _SQLITE_REASONS.get(code & 0xFF, "failed")  # no code: our own checks
    explained = f": {_EXPLAINED[reason]}" if reason in _EXPLAINED else ""
    return StoreFailure(f"cannot {doing} {where}{explained} ({e}).", reason)


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
    uri = None
    if read_only_mount(path):
        uri = f"{path.absolute().as_uri()}?immutable=1"
    elif not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        uri = f"{path.absolute().as_uri()}?mode=ro"
    try:
        if uri is not None:
            db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
    except sqlite3.DatabaseError as e:
        raise DupqError(f"{path} cannot be read as a SQLite database ({e}).") from None
    db.text_factory = _text
    return db


def _text(data: bytes) -> str | bytes:
    """A TEXT value as ``str``; bytes that are not UTF-8 stay bytes, for the reader to call the row damaged."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


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
    """The stored embeddings of ``ids``, ``(len(ids), d)``, read from their rows' BLOBs a row at a time.

    Incremental BLOB reads (``blobopen``) return the 4 * d bytes of a vector without reading its whole row: this is how
    an ivfpq collection re-ranks its short list while memory holds codes only. SQLite walks a BLOB's overflow pages up
    to the offset, so the cost grows with the row: a vector deep in a 65,536-vector row (older collections) costs
    milliseconds, one in a row of :data:`BLOB_ROWS` a few page reads. The ids are read in id order, each row opened
    once, and the span from its first wanted vector to its last read at once when it is at most :data:`SPAN_BYTES` (a
    filter's thousands of allowed ids cost about a row read each, not a lookup and an open each).
    """
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty((len(ids), dim), dtype=np.float32)
    order = np.argsort(ids, kind="stable")
    wanted, places = ids[order].tolist(), order.tolist()  # increasing ids, and where each goes in out
    n, size = 0, dim * 4
    while n < len(wanted):
        row = db.execute("SELECT start FROM embeddings WHERE start <= ? ORDER BY start DESC LIMIT 1", (wanted[n],))
        start = (row.fetchone() or (None,))[0]  # the rowid alone: reading the row's other columns costs more
        if start is None:
            raise sqlite3.DatabaseError(f"no stored embedding for question {wanted[n]}")
        with db.blobopen("embeddings", "vectors", start, readonly=True) as blob:
            end = bisect.bisect_left(wanted, start + len(blob) // size, n)  # wanted[n:end] lie in this row
            if end == n:  # past the row's last whole vector
                raise sqlite3.DatabaseError(f"the embedding of question {wanted[n]} is cut short")
            first, last = wanted[n] - start, wanted[end - 1] - start
            if (last - first + 1) * size <= SPAN_BYTES:  # close together: one read of the span
                spans = [(first, last, n, end)]
            else:
                spans = [(i - start, i - start, m, m + 1) for m, i in zip(range(n, end), wanted[n:end])]
            for lo, hi, a, b in spans:
                blob.seek(lo * size)
                data = blob.read((hi - lo + 1) * size)
                if len(data) != (hi - lo + 1) * size:
                    raise sqlite3.DatabaseError(f"the embedding of question {start + hi} is cut short")
                for m in range(a, b):
                    out[places[m]] = np.frombuffer(data, np.float32, dim, (wanted[m] - start - lo) * size)
        n = end
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


def live_vectors(db: sqlite3.Connection, dim: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``ids (N,)`` and ``vectors (N, d)`` of the stored questions (not the removed ones), in id order, and the
    extent they were read up to (the next id: removed questions may come after the last live one)."""
    live = np.array([i for (i,) in db.execute("SELECT id FROM questions ORDER BY id")], dtype=np.int64)
    end = extent(db)
    blocks = list(stored_vectors(db, 0, end, dim))
    every = np.concatenate(blocks) if blocks else np.zeros((0, dim), np.float32)
    return live, every[live], end


def extent(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COALESCE(MAX(start + count), 0) FROM embeddings").fetchone()[0]


def find(db: sqlite3.Connection, keys) -> dict[str, tuple[int, str, str | None]]:
    """``{key: (id, text, metadata)}`` of the stored ``keys``."""
    keys, found = list(keys), {}
    for part in in_parts(keys):
        query = f"SELECT key, id, text, metadata FROM questions WHERE key IN ({','.join('?' * len(part))})"
        found.update((key, tuple(row)) for key, *row in db.execute(query, part))
    return found


RERANKED = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS reranked") :]  # made on a first open of older folders


def remove_ids(db: sqlite3.Connection, ids: list[int]) -> None:
    for part in in_parts(ids):
        db.execute(f"DELETE FROM questions WHERE id IN ({','.join('?' * len(part))})", part)
        db.execute(f"DELETE FROM reranked WHERE id IN ({','.join('?' * len(part))})", part)
        db.executemany("INSERT OR IGNORE INTO removed (id) VALUES (?)", [(i,) for i in part])


def reranked(db: sqlite3.Connection, ids: list[int], dim: int) -> dict[int, tuple[str, np.ndarray]]:
    """``{id: (digest, vector (dim,))}`` of the ``ids`` that have a reranker vector (a damaged one is left out: encoded again)."""
    wanted, whole = sorted(set(ids)), []
    for part in in_parts(wanted):
        query = f"SELECT id, digest, vector FROM reranked WHERE id IN ({','.join('?' * len(part))})"
        whole += [
            (i, digest, blob)
            for i, digest, blob in db.execute(query, part)
            if isinstance(blob, bytes) and len(blob) == 4 * dim and isinstance(digest, str)
        ]
    vectors = np.frombuffer(b"".join(blob for *_, blob in whole), dtype=np.float32).reshape(len(whole), dim)  # (F, dim)
    finite = np.isfinite(vectors).all(axis=1)  # (F,) read as one array: a search reads K of them
    return {i: (digest, vectors[n]) for n, (i, digest, _) in enumerate(whole) if finite[n]}


def keep_reranked(db: sqlite3.Connection, ids: list[int], digests: list[str], vectors: np.ndarray) -> None:
    """Store reranker vectors of the ``ids`` still stored (inside the caller's transaction)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    db.executemany(
        "INSERT OR REPLACE INTO reranked (id, digest, vector) SELECT ?, ?, ? WHERE EXISTS "
        "(SELECT 1 FROM questions WHERE id = ?)",
        [(i, d, v.tobytes(), i) for i, d, v in zip(ids, digests, vectors)],
    )
