"""A collection kept in PostgreSQL with pgvector: one database shared by every writer and server, on every machine.

Location: ``postgresql://USER@HOST:PORT/DB?table=NAME`` (password in the URI, ``$PGPASSWORD`` or ``~/.pgpass``); the
tables are :mod:`dupq.collection.postgres.schema`'s. Postgres searches (``<#>``, through HNSW or by a scan of a flat
collection) and nothing is cached in the process. Beyond :mod:`dupq.collection.backend`'s promises:

* a build is one transaction too, so no half collection is ever visible;
* adds are idempotent by key across processes (``INSERT ... ON CONFLICT (key) DO NOTHING``, a key
  committed meanwhile read back and checked, else :class:`~dupq.collection.rows.KeyConflict`);
* a filter loses nothing: pgvector's HNSW filters after its walk, so a narrow filter is searched
  by an exact scan, and an HNSW search answering fewer than ``k`` is made again exactly;
* writers hold a shared advisory lock of the table; :meth:`writers_held` takes it exclusively.

Ids come from a sequence (a rolled-back add leaves a gap); a new text for a key keeps its id.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from dupq.collection.backend import Backend, Row, Where, hit_arrays, in_order
from dupq.collection.manifest import FORMAT, check_manifest
from dupq.collection.postgres import schema
from dupq.collection.postgres.address import Address, parse
from dupq.collection.postgres.connections import Connections, ensure_vector, failure, psycopg_modules
from dupq.collection.rows import KeyConflict, check_stored, edited, in_parts, place, same_metadata
from dupq.core.errors import DupqError
from dupq.index.vectors import IndexConfig

log = logging.getLogger(__name__)

COUNTS_KEPT_S = 10.0  # how long a filter's count of matching rows is trusted (it only picks HNSW or a scan)
BUILD_MEMORY = "1GB"  # maintenance_work_mem while a build makes its HNSW index (faster when the graph fits)


class PostgresBackend(Backend):
    """Questions and vectors in a Postgres table, searched by pgvector."""

    def __init__(self, where: Address, connections: Connections, manifest: dict):
        self.address, self.connections, self.manifest = where, connections, manifest
        self.where, self.dim, self.n = where.text, int(manifest["dim"]), schema.names(where.table)
        self.config = IndexConfig(**manifest["index"])
        self.exact = self.config.kind == "flat"
        self.lock = schema.lock_key(where.table)
        self._counts: dict[str, tuple[float, int]] = {}  # filter (JSON) -> (when, matching rows)

    # Building and opening.

    @classmethod
    def build(cls, location, manifest: dict, chunks) -> PostgresBackend:
        """The tables, rows and indexes of a new collection, in one transaction: visible only when complete."""
        where = parse(location.address)
        config = IndexConfig(**manifest["index"])
        if config.kind not in ("flat", "hnsw"):
            raise DupqError(
                f"a Postgres collection keeps a flat or an hnsw index, not {config.kind}; choose one of those."
            )
        connections = Connections(where)
        conn = connections.connect(vector=False)
        try:
            ensure_vector(conn, where)
            _, register_vector = psycopg_modules()
            register_vector(conn)
            n, dim, count = schema.names(where.table), int(manifest["dim"]), 0
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [schema.lock_key(where.table)])
                taken = conn.execute("SELECT to_regclass(%s)", [sql.Identifier(where.table).as_string(conn)]).fetchone()
                if taken[0] is not None:
                    raise DupqError(
                        f"{where.text} already holds a table {where.table!r}; choose another name (?table=NAME)."
                    )
                for statement in schema.create(where.table, dim):
                    conn.execute(statement)
                copy_sql = sql.SQL("COPY {t} (id, key, text, metadata, embedding) FROM STDIN WITH (FORMAT BINARY)")
                with conn.cursor() as cur, cur.copy(copy_sql.format(**n)) as copy:
                    copy.set_types(["int8", "text", "text", "jsonb", "vector"])
                    for start, texts, keys, metadata, vectors in chunks:
                        vectors = np.asarray(vectors, dtype=np.float32)
                        for j, (text, key, meta) in enumerate(zip(texts, keys, metadata)):
                            copy.write_row([start + j, key, text, _json(meta), vectors[j]])
                        count = start + len(texts)
                conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(BUILD_MEMORY)))
                for statement in schema.indexes(where.table, config, count):
                    conn.execute(statement)
                conn.execute(
                    sql.SQL("INSERT INTO {manifest} (manifest) VALUES (%s)").format(**n), [json.dumps(manifest)]
                )
        except Exception as e:
            conn.close()
            connections.close()
            if isinstance(e, psycopg.Error):  # a DupqError passes as it is
                raise failure("build a collection in", where, e) from None
            raise
        conn.dupq_ef = None
        connections._idle.append(conn)
        return cls(where, connections, manifest)

    @classmethod
    def open(cls, location) -> PostgresBackend:
        where = parse(location.address)
        connections = Connections(where)
        try:
            manifest = connections.run("open", lambda conn: _read_manifest(conn, where), retry=True)
        except BaseException:
            connections.close()
            raise
        return cls(where, connections, manifest)

    # Reading.

    def _read(self, doing: str, query, params=(), fetch: str = "all"):
        def run(conn):
            cur = conn.execute(query, params)
            return cur.fetchall() if fetch == "all" else cur.fetchone()

        return self.connections.run(doing, run, retry=True)

    def count(self) -> int:
        query = sql.SQL("SELECT count(*) FROM {t}").format(**self.n)
        return self._read("count the questions of", query, fetch="one")[0]

    def find(self, keys) -> dict[str, tuple[int, str, str | None]]:
        return self.connections.run("read", lambda conn: self._find(conn, list(keys)), retry=True)

    def _find(self, conn, keys: list[str], lock: bool = False) -> dict[str, tuple[int, str, str | None]]:
        query = sql.SQL(
            "SELECT key, id, text, metadata::text FROM {t} WHERE key = ANY(%s)" + (" FOR UPDATE" if lock else "")
        )
        found = {}
        for part in in_parts(keys):
            for key, i, text, meta in conn.execute(query.format(**self.n), [part]):
                found[key] = (i, text, meta)
        return found

    def rows(self, ids) -> dict[int, Row]:
        query = sql.SQL("SELECT id, key, text, metadata::text FROM {t} WHERE id = ANY(%s)").format(**self.n)
        wanted = sorted({int(i) for i in ids})
        return {i: (key, text, meta) for i, key, text, meta in self._read("read", query, [wanted])}

    def vectors(self, ids) -> np.ndarray:
        ids = [int(i) for i in np.asarray(ids).ravel()]
        query = sql.SQL("SELECT id, embedding FROM {t} WHERE id = ANY(%s)").format(**self.n)
        found = {i: _array(v) for i, v in self._read("read", query, [sorted(set(ids))])}
        return in_order(found, ids, self.dim, self.where)

    def all_vectors(self) -> np.ndarray:
        rows = self._read("read", sql.SQL("SELECT embedding FROM {t} ORDER BY id").format(**self.n))
        return np.array([_array(v) for (v,) in rows], dtype=np.float32).reshape(len(rows), self.dim)

    def all_rows(self) -> list[tuple[int, Row]]:
        query = sql.SQL("SELECT id, key, text, metadata::text FROM {t} ORDER BY id").format(**self.n)
        return [(i, (key, text, meta)) for i, key, text, meta in self._read("read", query)]

    # Searching.

    def search(
        self, vectors: np.ndarray, k: int, where: Where | None = None, pending: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``scores (Q, k')``, ``ids (Q, k')`` by inner product, best first; missing slots have id -1 (see the module's text)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ef = self._ef(k, where)  # None: exact
        condition = schema.condition(where, pending)
        found = self.connections.run(
            "search", lambda conn: [self._one(conn, q, k, condition, ef) for q in vectors], retry=True
        )
        return hit_arrays(found)

    def _ef(self, k: int, where: Where | None) -> int | None:
        """The ``hnsw.ef_search`` of a search (``ef_search``, at least ``k``, widened by the share a filter keeps),
        or None where the search is exact: a flat collection, or more candidates than pgvector walks."""
        if self.config.kind != "hnsw":
            return None
        ef = max(self.config.ef_search, k)
        if where:
            total, matching = self._matching(None), self._matching(where)
            if matching == 0:
                return None
            ef = int(np.ceil(ef * total / matching))
        return ef if ef <= schema.MAX_EF_SEARCH else None

    def _matching(self, where: Where | None) -> int:
        """How many rows match ``where`` (all rows for None), counted at most every :data:`COUNTS_KEPT_S` seconds."""
        name = json.dumps(where, sort_keys=True)
        now = time.monotonic()
        kept = self._counts.get(name)
        if kept is not None and now - kept[0] < COUNTS_KEPT_S:
            return kept[1]
        condition, params = schema.condition(where)
        query = sql.SQL("SELECT count(*) FROM {t} WHERE {c}").format(c=condition, **self.n)
        count = self._read("search", query, params, fetch="one")[0]
        if len(self._counts) > 64:
            self._counts.clear()
        self._counts[name] = (now, count)
        return count

    def _one(self, conn, q: np.ndarray, k: int, condition: tuple, ef: int | None) -> list[tuple[int, float]]:
        """One query's ``(id, score)`` of the rows ``condition`` (SQL, parameters) keeps: through HNSW with ``ef``,
        then exactly if that answered fewer than ``k``."""
        condition, params = condition
        if ef is not None:
            if conn.dupq_ef != ef:
                conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", [str(ef)])
                conn.dupq_ef = ef
            query = sql.SQL(
                "SELECT id, -(embedding <#> %s) FROM {t} WHERE {c} ORDER BY embedding <#> %s LIMIT %s"
            ).format(c=condition, **self.n)
            hits = conn.execute(query, [q, *params, q, k]).fetchall()
            if len(hits) == k:
                return hits
        # "+ 0": an order the HNSW index cannot give, so the planner scans the (matching) rows: exact
        query = sql.SQL(
            "SELECT id, -(embedding <#> %s) FROM {t} WHERE {c} ORDER BY (embedding <#> %s) + 0, id LIMIT %s"
        ).format(c=condition, **self.n)
        return conn.execute(query, [q, *params, q, k]).fetchall()

    # Writing.

    @contextlib.contextmanager
    def _transaction(self, doing: str):
        """One write transaction on a connection of its own, with the writers' shared lock held (see :meth:`writers_held`)."""
        try:
            with self.connections.get() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", [self.lock])
                yield conn
        except psycopg.Error as e:
            raise failure(doing, self.address, e) from None

    def add(self, texts, keys, metadata, vectors) -> list[int]:
        vectors = np.asarray(vectors, dtype=np.float32)
        with self._transaction("add to") as conn:
            stored = self._find(conn, sorted({k for k in keys if k is not None}))
            ids, new = place(texts, metadata, keys, stored, lambda n, key: -1 - n)  # placeholders until drawn
            fresh = self._draw(conn, len(new))
            ids = [fresh[-1 - i] if i < 0 else i for i in ids]
            if new:
                ids = self._insert(conn, ids, new, texts, keys, metadata, vectors)
        return ids

    def _draw(self, conn, n: int) -> list[int]:
        if n == 0:
            return []
        query = sql.SQL("SELECT nextval(%s) FROM generate_series(1, %s)")
        return [i for (i,) in conn.execute(query, [self.n["ids"].as_string(conn), n])]

    def _insert(self, conn, ids, new, texts, keys, metadata, vectors) -> list[int]:
        """Insert the ``new`` rows, ``ON CONFLICT (key) DO NOTHING``; a key another writer committed since this
        transaction read it is read again and must hold the same question (:func:`place`'s rule)."""
        query = sql.SQL(
            "INSERT INTO {t} (id, key, text, metadata, embedding) VALUES (%s, %s, %s, %s::jsonb, %s) "
            "ON CONFLICT (key) DO NOTHING RETURNING id"
        ).format(**self.n)
        with conn.cursor() as cur:
            cur.executemany(query, [(ids[j], keys[j], texts[j], metadata[j], vectors[j]) for j in new], returning=True)
            inserted = set()
            while True:
                inserted.update(i for (i,) in cur.fetchall())
                if not cur.nextset():
                    break
        late = [j for j in new if ids[j] not in inserted]
        if not late:
            return ids
        stored = self._find(conn, sorted({keys[j] for j in late}))
        for j in late:  # every late row has a key: only a key conflicts
            i, text, meta = stored[keys[j]]
            if text != texts[j] or not same_metadata(meta, metadata[j]):
                raise KeyConflict(f"the key {keys[j]!r} is stored already (id {i}) with another question or metadata.")
            ids = [i if x == ids[j] else x for x in ids]
        return ids

    def remove(self, keys) -> list[int]:
        query = sql.SQL("DELETE FROM {t} WHERE key = ANY(%s) RETURNING key, id").format(**self.n)
        with self._transaction("remove from") as conn:
            removed = dict(conn.execute(query, [list(keys)]).fetchall())
            check_stored(removed, keys, self.where, "removed")
        self._counts.clear()
        return [removed[k] for k in keys]

    def update(self, key, text, metadata, vector) -> int:
        with self._transaction("update") as conn:
            stored = self._find(conn, [key], lock=True)
            check_stored(stored, [key], self.where, "changed")
            i, old_text, old_meta = stored[key]
            if text is not None and text != old_text:
                query = sql.SQL("UPDATE {t} SET text = %s, embedding = %s WHERE id = %s").format(**self.n)
                conn.execute(query, [text, np.asarray(vector, np.float32).reshape(self.dim), i])
            if metadata is not None and not same_metadata(metadata, old_meta):
                self._set_metadata(conn, i, metadata)
        return i

    def _set_metadata(self, conn, i: int, metadata: str | None) -> None:
        query = sql.SQL("UPDATE {t} SET metadata = %s::jsonb WHERE id = %s").format(**self.n)
        conn.execute(query, [metadata or None, i])
        self._counts.clear()

    def edit(self, key, change, others) -> tuple[int, str | None]:
        """``key``'s row read ``FOR UPDATE`` (another writer's edit of it waits), changed and written in one transaction."""
        with self._transaction("update") as conn:
            i, old, new = edited(self._find(conn, [key, *others], lock=True), key, others, change, self.where)
            if not same_metadata(new, old):
                self._set_metadata(conn, i, new)
        return i, new

    @contextlib.contextmanager
    def writers_held(self):
        """The table's writer lock, exclusively, on a connection of its own: every writer waits until the context ends."""
        conn = self.connections.connect(vector=False)
        try:
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", [self.lock])
            except Exception as e:
                raise failure("lock the writers of", self.address, e) from None
            yield
        finally:
            conn.close()  # the session's lock goes with it

    def close(self) -> None:
        self.connections.close()


def _json(text: str | None):
    """Metadata's JSON text as a jsonb value for COPY (sent as it is: no parse and dump again)."""
    return None if text is None else Jsonb(text, dumps=str)


def _array(vector) -> np.ndarray:
    """A vector read from Postgres (pgvector's ``Vector``, or an array in older adapters) as float32 ``(d,)``."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)


def _read_manifest(conn, where: Address) -> dict:
    """The manifest of the collection at ``where``, after checking that its table is dupq's."""
    n = schema.names(where.table)
    table, manifest = conn.execute(
        "SELECT to_regclass(%s), to_regclass(%s)", [n["t"].as_string(conn), n["manifest"].as_string(conn)]
    ).fetchone()
    if table is None:
        raise DupqError(
            f"no collection {where.table!r} in {where.text}; build one with `dupq index build --out {where.text}`."
        )
    columns = {
        c
        for (c,) in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0", [table]
        )
    }
    if manifest is None or not schema.COLUMNS <= columns:
        raise DupqError(
            f"the table {where.table!r} in {where.text} was not made by dupq (it lacks {schema.COLUMNS - columns or {where.table + '_manifest'}}); "
            "choose another table (?table=NAME)."
        )
    rows = conn.execute(sql.SQL("SELECT manifest FROM {manifest}").format(**n)).fetchall()
    if len(rows) != 1:
        raise DupqError(f"{where.text} is not a dupq collection: its manifest table holds {len(rows)} rows, not 1.")
    return check_manifest(rows[0][0], where.text, FORMAT)
