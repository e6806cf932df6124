"""The shape of a dupq collection in Milvus: its schema, index and search settings, and its rows.

One row per question: ``id`` (INT64 primary key), ``key``, ``text``, ``metadata`` (JSON text) and
``vector`` (FLOAT_VECTOR); :mod:`dupq.collection.milvus.backend` stores and searches through these.
"""

from __future__ import annotations

import json

from dupq.collection.backend import HIDDEN
from dupq.core.errors import DupqError
from dupq.index.vectors import IndexConfig

MAX_TEXT = 65_535  # bytes of a VARCHAR: a question's text or its metadata's JSON
MAX_KEY = 1_024  # bytes of a key
FILTERED = "fields"  # the JSON field filters read (collections built before filters lack it)


def schema(client, dim: int):
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("key", DataType.VARCHAR, max_length=MAX_KEY, nullable=True)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
    schema.add_field("metadata", DataType.VARCHAR, max_length=MAX_TEXT, nullable=True)
    schema.add_field(FILTERED, DataType.JSON)  # the metadata again, as JSON that filter expressions read
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    return schema


def index_params(client, config: IndexConfig):
    params = client.prepare_index_params()
    kind, settings = {
        "flat": ("FLAT", {}),
        "hnsw": ("HNSW", {"M": config.hnsw_m, "efConstruction": config.ef_construction}),
        "ivfpq": ("IVF_PQ", {"nlist": config.nlist, "m": config.pq_m, "nbits": 8}),
    }[config.kind]
    params.add_index("vector", index_type=kind, metric_type="IP", params=settings)
    return params


def search_params(config: IndexConfig, k: int) -> dict:
    params = {"hnsw": {"ef": max(config.ef_search, k)}, "ivfpq": {"nprobe": config.nprobe}}.get(config.kind, {})
    return {"metric_type": "IP", "params": params}


def check_sizes(texts, keys, metadata) -> None:
    for i, (text, key, meta) in enumerate(zip(texts, keys, metadata)):
        for what, value, most in (("text", text, MAX_TEXT), ("key", key, MAX_KEY), ("metadata", meta, MAX_TEXT)):
            if value is not None and len(value.encode("utf-8")) > most:
                raise DupqError(
                    f"the {what} of question {i + 1} is over {most:,} bytes, more than a Milvus collection holds."
                )


def rows(ids, texts, keys, metadata, vectors, filtered: bool = True) -> list[dict]:
    """Milvus rows; ``filtered``: the collection has the :data:`FILTERED` field (its metadata, parsed)."""
    out = [
        {"id": i, "key": k, "text": t, "metadata": m, "vector": v}
        for i, t, k, m, v in zip(ids, texts, keys, metadata, vectors.tolist())
    ]
    if filtered:
        for row in out:
            row[FILTERED] = json.loads(row["metadata"]) if row["metadata"] else {}
    return out


def expression(where: dict) -> str:
    """A Milvus filter expression for ``where`` (field names are letters, digits and _; values JSON literals)."""
    parts = []
    for field, values in where.items():
        # Milvus takes no "in" on a JSON path: one equality per value
        either = " or ".join(f'{FILTERED}["{field}"] == {json.dumps(v, ensure_ascii=False)}' for v in values)
        parts.append(f"({either})")
    return " and ".join(parts)


def searched(where: dict | None, pending: bool) -> str:
    """The filter expression of a search: ``where``'s, and the pending rows left out unless ``pending``
    (a row without the field is kept: Milvus compares a JSON field a row lacks as null, and ``not null`` is no match)."""
    parts = [expression(where)] if where else []
    if not pending:
        lacking = " or ".join(f'not exists {FILTERED}["{field}"]' for field in HIDDEN)
        parts.append(f"{lacking} or not ({expression(HIDDEN)})")
    return " and ".join(f"({p})" for p in parts)
