"""The shape of a dupq collection in Postgres: its tables, its indexes, and a filter as SQL.

For a collection ``?table=NAME``::

    NAME           id bigint PRIMARY KEY, key text UNIQUE, text text NOT NULL,
                   metadata jsonb, embedding vector(d) NOT NULL
    NAME_manifest  one row: the manifest (jsonb)
    NAME_ids       the sequence new ids are drawn from (0, 1, 2, ... in order of addition)
    NAME_metadata  a GIN index (jsonb_path_ops) on metadata: what a filter reads
    NAME_hnsw      an HNSW index (vector_ip_ops) on embedding, for an hnsw collection
"""

from __future__ import annotations

import hashlib
import json

from psycopg import sql

from dupq.collection.backend import HIDDEN, Where

COLUMNS = {"id", "key", "text", "metadata", "embedding"}
MAX_EF_SEARCH = 1_000  # pgvector's largest hnsw.ef_search: a search wider than this is made exact


def names(table: str) -> dict[str, sql.Identifier]:
    """The identifiers of a collection's table, manifest, sequence and indexes (quoted: any case is kept)."""
    return {
        "t": sql.Identifier(table),
        "manifest": sql.Identifier(f"{table}_manifest"),
        "ids": sql.Identifier(f"{table}_ids"),
        "meta_index": sql.Identifier(f"{table}_metadata"),
        "hnsw": sql.Identifier(f"{table}_hnsw"),
    }


def create(table: str, dim: int) -> list[sql.Composed]:
    """The statements that make a collection's tables (its indexes come after its rows: :func:`indexes`)."""
    n = names(table)
    return [
        sql.SQL(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, key text UNIQUE, text text NOT NULL, "
            "metadata jsonb, embedding vector({dim}) NOT NULL)"
        ).format(dim=sql.Literal(dim), **n),
        sql.SQL("CREATE TABLE {manifest} (manifest jsonb NOT NULL)").format(**n),
    ]


def indexes(table: str, config, start: int) -> list[sql.Composed]:
    """The sequence (from ``start``), the metadata's GIN index and, for an hnsw collection, the HNSW index."""
    n = names(table)
    out = [
        sql.SQL("CREATE SEQUENCE {ids} MINVALUE 0 START {start} OWNED BY {t}.id").format(start=sql.Literal(start), **n),
        sql.SQL("CREATE INDEX {meta_index} ON {t} USING gin (metadata jsonb_path_ops)").format(**n),
    ]
    if config.kind == "hnsw":
        out.append(
            sql.SQL(
                "CREATE INDEX {hnsw} ON {t} USING hnsw (embedding vector_ip_ops) "
                "WITH (m = {m}, ef_construction = {efc})"
            ).format(m=sql.Literal(config.hnsw_m), efc=sql.Literal(config.ef_construction), **n)
        )
    return out


def lock_key(table: str) -> int:
    """The advisory lock of a collection's writers (a signed 64-bit number of its table's name)."""
    return int.from_bytes(hashlib.blake2b(f"dupq:{table}".encode(), digest_size=8).digest(), "big", signed=True)


HASHED = 9
"""From this many values a field is tested by ``= ANY(array)``, which PostgreSQL (14+) answers from a hash table,
not by an OR of containments, which it tests one by one on every row it reads: a count of 500 values over 537,000
rows took 24 s one way and 0.9 s the other. Below it, the containments let the GIN index find the rows."""


def _equivalents(value) -> list:
    """The JSON values a filter ``value`` matches by the rule of :func:`~dupq.collection.backend.matches`
    (Python's ``==``): ``true`` and ``1`` match each other, ``false`` and ``0`` too; JSONB tells them apart."""
    if isinstance(value, bool):
        return [value, int(value)]
    if isinstance(value, (int, float)) and value in (0, 1):
        return [value, bool(value)]
    return [value]


def condition(where: Where | None, pending: bool = True) -> tuple[sql.Composable, list]:
    """``where`` as a SQL condition on ``metadata`` (JSONB containment, which the GIN index serves, or a hashed
    ``= ANY`` where a field has :data:`HASHED` values or more) and its parameters;
    unless ``pending``, the rows :data:`~dupq.collection.backend.HIDDEN` matches are left out too.

    A field matches one of its values exactly (no prefix, no case folding); a row without the
    field, or with an object, array or null there, does not match.
    """
    if not pending:
        kept, params = condition(where)
        waiting, more = condition(HIDDEN)
        return sql.SQL("{} AND NOT COALESCE({}, FALSE)").format(kept, waiting), params + more
    if not where:
        return sql.SQL("TRUE"), []
    clauses, params = [], []
    for field, values in where.items():
        wanted = [v for value in values for v in _equivalents(value)]
        if len(wanted) < HASHED:
            clauses.append(
                sql.SQL("({})").format(sql.SQL(" OR ").join([sql.SQL("metadata @> %s::jsonb")] * len(wanted)))
            )
            params += [json.dumps({field: v}) for v in wanted]
        else:  # the same rows: a scalar contained under the field is the field's value (tested against containment)
            clauses.append(sql.SQL("(metadata -> %s) = ANY(%s::jsonb[])"))
            params += [field, [json.dumps(v) for v in wanted]]
    return sql.SQL(" AND ").join(clauses), params
