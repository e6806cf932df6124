"""A collection stored in Milvus, which also searches it: milvus-lite in a local file, or a server.

Locations: ``milvus:PATH.db`` (milvus-lite, one process at a time) or ``milvus+http(s)://HOST:19530?collection=NAME``
(token from ``$DUPQ_MILVUS_TOKEN``). One row per question (``id``, ``key``, ``text``, ``metadata`` JSON text,
``vector``); the manifest is a property of the collection. Every search reads every acknowledged write (consistency
``Strong``), so several servers on several machines can share one collection (docs/collections.md says why Milvus
searches rather than FAISS beside it). Where it differs from :mod:`dupq.collection.backend`'s promises:

* **Ids** are a 53-bit hash of the key (a retry from any process upserts the same row), or a
  random 53-bit number for an unkeyed question: Milvus has no transaction to draw ``MAX(id) + 1``
  in. 53 bits stay exact in JavaScript.
* **Keys across processes**: the check that a key is not stored with another text runs before the
  upsert, in this process's lock; two processes adding one key with different texts at once leave
  the later text.
* ivfpq scores are Milvus's approximations (it re-ranks nothing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import socket
from pathlib import Path

import numpy as np

from dupq.collection.backend import Backend, Row, Where, hit_arrays, in_order
from dupq.collection.manifest import FORMAT, check_manifest
from dupq.collection.milvus import schema as milvus
from dupq.collection.milvus.address import Address, parse
from dupq.collection.rows import StoreFailure, check_stored, edited, in_parts, place, same_metadata, taken
from dupq.core.errors import DupqError
from dupq.core.files import alive, file_lock, parse_json
from dupq.index.vectors import IndexConfig

TOKEN_ENV = "DUPQ_MILVUS_TOKEN"
PROPERTY = "dupq.manifest"  # the collection property that holds the manifest (JSON)
MAX_TOP_K = 16_384  # Milvus's cap on one search's limit
INSERT_ROWS = 5_000  # rows per request while building (a request stays far below gRPC's 64 MB)
TIMEOUT = 30.0  # seconds to wait for the server on connecting
ID_BITS = 53


def _client(where: Address, create: bool = False):
    """A connected ``MilvusClient``, or a DupqError: pymilvus missing, no file, server unreachable or refusing."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise DupqError(
            "the Milvus store needs pymilvus (and milvus-lite for milvus:PATH.db): pip install 'dupq[milvus]'."
        ) from None
    # pymilvus configures its loggers on import and logs every failed call at ERROR through its own
    # handler; each failure reaches the user as one DupqError sentence instead.
    # milvus-lite logs a failure to start its server (a file in use) with a traceback, at ERROR.
    for name in ("pymilvus", "pymilvus.milvus_client", "milvus_lite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if where.file is not None:
        if create:
            where.file.parent.mkdir(parents=True, exist_ok=True)
        elif not where.file.exists():
            raise DupqError(
                f"no milvus-lite database at {where.file}; build one with `dupq index build QUESTIONS --out {where.text}`."
            )
    try:
        return MilvusClient(
            uri=where.uri, token=os.environ.get(TOKEN_ENV, "") if where.file is None else "", timeout=TIMEOUT
        )
    except Exception as e:  # noqa: BLE001 -- MilvusException, grpc errors, milvus-lite failing to start: all reach the user as one sentence
        if where.file is not None and _held_by_another_process(where.file):
            raise StoreFailure(
                f"the milvus-lite database {where.file} is in use by another process (a `dupq serve`?), and milvus-lite "
                "opens a file in one process at a time; stop that process, or add through its API (POST /questions).",
                "busy",
            ) from None
        raise StoreFailure(f"cannot connect to Milvus at {where.text} ({_reason(e)}).", "unreachable") from None


def _held_by_another_process(file: Path) -> bool:
    """Whether milvus-lite's ``flock`` on the database's ``LOCK`` file is held: it holds one while a process has
    the file open (asked after a failure to open it, so not by this process, whose clients share one server)."""
    if not (file / "LOCK").is_file():  # another milvus-lite layout, or no database
        return False
    try:
        with file_lock(file / "LOCK", timeout=0):
            return False
    except TimeoutError:
        return True
    except OSError:
        return False


def _reason(e: Exception) -> str:
    message = getattr(e, "message", None) or str(e) or type(e).__name__
    return " ".join(str(message).split())[:300]


def key_id(key: str) -> int:
    """The id of a keyed question: the first 53 bits of its key's BLAKE2b hash (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big") >> (64 - ID_BITS)


class MilvusBackend(Backend):
    """Questions and vectors in a Milvus collection, which also searches them.

    Milvus searches, so nothing is cached or caught up: every search reads every acknowledged
    write (consistency level Strong), removals included.
    """

    def __init__(self, where: Address, client, manifest: dict, filtered: bool = True):
        self.location, self.client, self.manifest = where, client, manifest
        self.where, self.dim = where.text, int(manifest["dim"])
        self.config = IndexConfig(**manifest["index"])
        self.exact = self.config.kind == "flat"
        self.filtered = filtered  # the collection has the JSON field filters read (built before filters: no)

    def _call(self, what: str, fn, *args, **kwargs):
        """A client call, any failure as one DupqError sentence naming the location."""
        try:
            return fn(*args, **kwargs)
        except DupqError:
            raise
        except Exception as e:  # noqa: BLE001 -- MilvusException and grpc's errors alike
            raise StoreFailure(f"cannot {what} {self.where} ({_reason(e)}).", "unreachable") from None

    @classmethod
    def open(cls, location, fmt: str = FORMAT) -> MilvusBackend:
        location = str(location)
        where = parse(location)
        client = _client(where)
        try:
            if not client.has_collection(where.name):
                raise DupqError(
                    f"no collection {where.name!r} in Milvus at {location}; build one with `dupq index build QUESTIONS --out {location}`."
                )
            properties = client.describe_collection(where.name).get("properties", {})
            try:
                manifest = parse_json(properties[PROPERTY], "the manifest", location)
            except (KeyError, TypeError, DupqError):
                raise DupqError(
                    f"the Milvus collection {where.name!r} at {location} is not a dupq collection (no readable {PROPERTY})."
                ) from None
            manifest = check_manifest(manifest, location, fmt)
            fields = {f["name"] for f in client.describe_collection(where.name).get("fields", [])}
            client.load_collection(where.name)  # after a restart Milvus holds it released
            return cls(where, client, manifest, filtered=milvus.FILTERED in fields)
        except DupqError:
            client.close()
            raise
        except Exception as e:  # noqa: BLE001
            client.close()
            raise DupqError(f"cannot open the Milvus collection at {location} ({_reason(e)}).") from None

    @classmethod
    def build(cls, location, manifest: dict, chunks) -> MilvusBackend:
        """A new Milvus collection of ``chunks`` ``(start, texts, keys, metadata, vectors)``, written under a temporary name and renamed when complete."""
        location = str(location)
        where = parse(location)
        client = _client(where, create=True)
        store = cls(where, client, manifest)
        temporary = f"{where.name}__building_{_host()}_{os.getpid()}"
        try:
            if store._call("read", client.has_collection, where.name):
                raise DupqError(
                    f"{location} already holds a collection {where.name!r}; choose another name (?collection=NAME)."
                )
            store._drop_stale_builds()
            store._call(
                "create a collection in",
                client.create_collection,
                temporary,
                schema=milvus.schema(client, store.dim),
                index_params=milvus.index_params(client, store.config),
                consistency_level="Strong",
                properties={PROPERTY: json.dumps(manifest)},
            )
            taken: set[int] = set()
            for _, texts, keys, metadata, vectors in chunks:
                milvus.check_sizes(texts, keys, metadata)
                ids = [store._build_id(key, taken) for key in keys]
                for lo in range(0, len(ids), INSERT_ROWS):
                    part = slice(lo, lo + INSERT_ROWS)
                    rows = milvus.rows(
                        ids[part], texts[part], keys[part], metadata[part], vectors[part], store.filtered
                    )
                    store._call("store questions in", client.insert, temporary, rows)
            store._call("name the collection in", client.rename_collection, temporary, where.name)
            store._call("load the collection of", client.load_collection, where.name)
        except BaseException:
            try:
                client.drop_collection(temporary)
            except Exception:  # noqa: BLE001 -- best effort: a later build drops it as stale
                pass
            client.close()
            raise
        return store

    @staticmethod
    def _build_id(key: str | None, taken: set[int]) -> int:
        i = key_id(key) if key is not None else secrets.randbits(ID_BITS)
        while i in taken:
            if key is not None:
                raise DupqError(f"the key {key!r} hashes to the id of another key; change one of them.")
            i = secrets.randbits(ID_BITS)
        taken.add(i)
        return i

    def _drop_stale_builds(self) -> None:
        """Drop the temporary collections of builds killed on this machine (their process is gone)."""
        pattern = re.compile(rf"{re.escape(self.location.name)}__building_{_host()}_(\d+)")
        for name in self._call("read", self.client.list_collections):
            found = pattern.fullmatch(name)
            if found and not alive(int(found.group(1))):
                self._call("drop a stale build in", self.client.drop_collection, name)

    def count(self) -> int:
        rows = self._call(
            "count the questions of", self.client.query, self.location.name, filter="", output_fields=["count(*)"]
        )
        return int(rows[0]["count(*)"])

    def _query_ids(self, ids: list[int], fields: list[str]) -> list[dict]:
        found = []
        for part in in_parts(ids):
            found += self._call("read", self.client.query, self.location.name, ids=part, output_fields=fields)
        return found

    def add(self, texts, keys, metadata, vectors) -> list[int]:
        milvus.check_sizes(texts, keys, metadata)
        keyed = {k for k in keys if k is not None}
        stored = {}
        for row in self._query_ids([key_id(k) for k in keyed], ["id", "key", "text", "metadata"]):
            if row["key"] not in keyed:  # a 53-bit hash shared with another stored question: never seen, but not silent
                raise DupqError(
                    f"a key of this add hashes to the id of another question stored in {self.where} (id {row['id']}); change the key."
                )
            stored[row["key"]] = (row["id"], row["text"], row["metadata"])
        fresh = iter(self._fresh_ids(sum(k is None for k in keys)))
        ids, new = place(texts, metadata, keys, stored, lambda n, key: key_id(key) if key is not None else next(fresh))
        if new:
            rows = milvus.rows(*taken(new, ids, texts, keys, metadata), vectors[new], self.filtered)
            self._call("add to", self.client.upsert, self.location.name, rows)
        return ids

    def find(self, keys) -> dict[str, tuple[int, str, str | None]]:
        wanted = set(keys)
        rows = self._query_ids(sorted({key_id(k) for k in wanted}), ["id", "key", "text", "metadata"])
        return {row["key"]: (row["id"], row["text"], row["metadata"]) for row in rows if row["key"] in wanted}

    def remove(self, keys) -> list[int]:
        """One delete request: acknowledged, it is durable and no search finds the rows."""
        stored = self.find(keys)
        check_stored(stored, keys, self.where, "removed")
        ids = [stored[k][0] for k in keys]
        self._call("remove from", self.client.delete, self.location.name, ids=sorted(set(ids)))
        return ids

    def update(self, key, text, metadata, vector) -> int:
        """One upsert of the row (its id is its key's, so the id stays)."""
        stored = self.find([key])
        check_stored(stored, [key], self.where, "changed")
        i, old_text, old_meta = stored[key]
        text = old_text if text is None else text
        metadata = old_meta if metadata is None else metadata
        if text == old_text and same_metadata(metadata, old_meta):  # a retried update changes nothing
            return i
        if text == old_text or vector is None:
            vector = self.vectors([i])[0]
        milvus.check_sizes([text], [key], [metadata])
        row = milvus.rows(
            [i], [text], [key], [metadata], np.asarray(vector, np.float32).reshape(1, self.dim), self.filtered
        )
        self._call("update", self.client.upsert, self.location.name, row)
        return i

    def edit(self, key, change, others) -> tuple[int, str | None]:
        """A read, then one upsert. Milvus has no transaction around both: the collection's write lock keeps
        this process's writers apart, and milvus-lite opens its file in one process only; two processes
        editing one question of a Milvus server at once could still lose one of the two changes."""
        _, _, new = edited(self.find([key, *others]), key, others, change, self.where)
        return self.update(key, None, new, None), new

    def _fresh_ids(self, n: int) -> list[int]:
        """``n`` random ids that no stored question has (drawn again in the rare case one is taken)."""
        ids: set[int] = set()
        while len(ids) < n:
            draw = {secrets.randbits(ID_BITS) for _ in range(n - len(ids))} - ids
            taken = {row["id"] for row in self._query_ids(sorted(draw), ["id"])}
            ids |= draw - taken
        return list(ids)

    def rows(self, ids) -> dict[int, Row]:
        found = self._query_ids(sorted(set(ids)), ["id", "key", "text", "metadata"])
        return {row["id"]: (row["key"], row["text"], row["metadata"]) for row in found}

    def vectors(self, ids) -> np.ndarray:
        ids = [int(i) for i in np.asarray(ids).ravel()]
        found = {row["id"]: row["vector"] for row in self._query_ids(sorted(set(ids)), ["id", "vector"])}
        return in_order(found, ids, self.dim, self.where)

    def all_vectors(self) -> np.ndarray:
        rows = self._call("read", self._iterate, ["id", "vector"])
        rows.sort(key=lambda row: row["id"])
        return np.array([row["vector"] for row in rows], dtype=np.float32).reshape(len(rows), self.dim)

    def all_rows(self) -> list[tuple[int, Row]]:
        rows = sorted(self._call("read", self._iterate, ["id", "key", "text", "metadata"]), key=lambda row: row["id"])
        return [(row["id"], (row["key"], row["text"], row["metadata"])) for row in rows]

    def _iterate(self, fields: list[str]) -> list[dict]:
        iterator = self.client.query_iterator(self.location.name, batch_size=1000, filter="", output_fields=fields)
        rows = []
        try:
            while batch := iterator.next():
                rows += batch
        finally:
            iterator.close()
        return rows

    def search(
        self, vectors: np.ndarray, k: int, where: Where | None = None, pending: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``scores (Q, k')``, ``ids (Q, k')`` by inner product, best first; missing slots have id -1.

        ``where`` becomes Milvus's own filter expression on the JSON field (Milvus filters while it
        searches, so it keeps the k best of the matching rows), and so does leaving out the pending
        rows (a collection built before filters were stored has none to leave out: it cannot hold them)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        k = min(k, MAX_TOP_K)
        if where and not self.filtered:
            raise DupqError(
                f"the Milvus collection {self.where} was built before filters were stored; build it again to filter its search."
            )
        found = self._call(
            "search",
            self.client.search,
            self.location.name,
            data=vectors.tolist(),
            anns_field="vector",
            limit=k,
            search_params=milvus.search_params(self.config, k),
            output_fields=[],
            filter=milvus.searched(where, pending or not self.filtered),
        )
        return hit_arrays([[(hit["id"], hit["distance"]) for hit in hits] for hits in found])

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 -- closing twice, or a server gone: nothing left to release
            pass


def _host() -> str:
    """A short name of this machine, part of a temporary build's name so only its own machine drops it as stale."""
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()
