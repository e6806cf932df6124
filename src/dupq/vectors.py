"""Top-k search by inner product: a pure function, and the FAISS index the collection keeps.

Questions are unit vectors (see :mod:`dupq.model`), so the inner product is the cosine
similarity and "most similar" is "largest inner product" (maximum inner product search).

* :func:`search` is the exact answer for arrays already in memory: ``queries (Q, d)`` against
  ``corpus (N, d)``, blocked so that a large corpus never needs a ``(Q, N)`` matrix at once.
  It is what everything else is checked against (and it is checked against brute force).
* :class:`VectorIndex` is the structure a collection keeps and grows: FAISS ``IndexFlatIP``
  (exact, the default: a scan of every vector, memory-bound, ~N*d*4 bytes per query) or
  ``IndexHNSWFlat`` with ``METRIC_INNER_PRODUCT`` (approximate: a navigable small-world graph,
  Malkov & Yashunin 2016, arXiv:1603.09320; sub-millisecond queries, recall measured against
  :func:`search`). Vectors get consecutive ids ``0, 1, 2, ...`` in the order they are added,
  which is the collection's question id, so no ``IndexIDMap`` is needed.

>>> scores, ids = search(np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32), k=1)
>>> ids.ravel().tolist()
[0, 1, 2]
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import faiss
import numpy as np

from dupq.files import DupqError, atomic_write

KINDS = ("flat", "hnsw")


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise DupqError(f"{name} must be a 2-d array of vectors, got shape {x.shape}.")
    return x


def search(queries: np.ndarray, corpus: np.ndarray, k: int, block: int = 65_536) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of ``corpus`` rows by inner product with each query row.

    Returns ``scores (Q, k')`` float32 and ``ids (Q, k')`` int64, best first, with
    ``k' = min(k, N)``; equal scores are ordered by the smaller id first.

    >>> c = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32)
    >>> search(c[:1], c, k=2)[1].tolist()
    [[0, 1]]
    """
    queries, corpus = _as_matrix(queries, "queries"), _as_matrix(corpus, "corpus")
    if queries.shape[1] != corpus.shape[1]:
        raise DupqError(f"queries have {queries.shape[1]} dimensions but the corpus has {corpus.shape[1]}.")
    if k < 1:
        raise DupqError(f"k must be at least 1, got {k}.")
    k = min(k, len(corpus))
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)  # (Q, <=k) running top-k
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(corpus), block):
        scores = queries @ corpus[start : start + block].T  # (Q, B)
        ids = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)  # (Q, B)
        if scores.shape[1] > k:  # keep each row's k best of this block (ties: smaller id) before merging
            part = np.argpartition(_rank_key(scores), k - 1, axis=1)[:, :k]  # (Q, k)
            scores, ids = np.take_along_axis(scores, part, 1), np.take_along_axis(ids, part, 1)
        best_s, best_i = np.concatenate([best_s, scores], 1), np.concatenate([best_i, ids], 1)
        order = np.lexsort((best_i, -best_s), axis=1)[:, :k]  # by score desc, then id asc
        best_s, best_i = np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)
    return best_s, best_i


def _rank_key(scores: np.ndarray) -> np.ndarray:
    """``uint64`` keys, one per score of a ``(Q, B)`` block, ascending in (score desc, column asc).

    ``argpartition`` on the scores alone keeps an arbitrary member of a tie that straddles the
    k-th place; this key makes the cut exact: the float's bits made order-preserving, then the
    column in the low 32 bits.
    """
    bits = (scores + np.float32(0)).view(np.uint32)  # + 0 turns -0.0 into 0.0
    ascending = np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))  # uint32 order == float order
    columns = np.arange(scores.shape[1], dtype=np.uint64)
    return (~ascending).astype(np.uint64) << np.uint64(32) | columns


def checksum_of(data: np.ndarray) -> str:
    """CRC-32 of a byte array: ~2 GB/s, so a 575 MB index is checked in a fraction of its load time."""
    return f"crc32:{zlib.crc32(memoryview(data)):08x}"


@dataclass
class IndexConfig:
    """Which FAISS index a collection keeps; saved in its manifest."""

    kind: str = "flat"  # "flat": exact scan, no build cost; "hnsw": approximate graph, fast queries
    # HNSW: on Quora's 537k questions M=32 stalls near 0.95 recall@10 (many near-identical vectors);
    # M=64 costs ~1.35x the build time and reaches ~0.99 (see bench/search_speed.py, README).
    hnsw_m: int = 64  # graph links per vector: more = better recall, more memory and build time
    ef_construction: int = 64  # candidates while linking: more = better graph, slower build
    ef_search: int = 256  # candidates while searching: more = better recall, slower queries

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DupqError(f"the index kind must be flat or hnsw, not {self.kind!r}.")
        for name, lo, hi in (("hnsw_m", 2, 512), ("ef_construction", 1, 4096), ("ef_search", 1, 65536)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise DupqError(f"{name} must be an integer from {lo} to {hi}, not {value!r}.")


class VectorIndex:
    """A FAISS inner-product index whose ids are the order of addition (thin, not thread-safe)."""

    def __init__(self, dim: int, config: IndexConfig, index: faiss.Index | None = None):
        self.dim, self.config = dim, config
        if index is None:
            if config.kind == "flat":
                index = faiss.IndexFlatIP(dim)
            else:
                index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = config.ef_construction
        if config.kind == "hnsw":
            index.hnsw.efSearch = config.ef_search
        self.faiss = index

    def __len__(self) -> int:
        return self.faiss.ntotal

    def add(self, vectors: np.ndarray) -> None:
        """Append ``vectors (M, d)``; they get ids ``len(self) .. len(self) + M - 1``."""
        if len(vectors):
            self.faiss.add(_as_matrix(vectors, "vectors"))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``scores (Q, k')`` and ``ids (Q, k')``, best first, ``k' = min(k, len(self))``.

        HNSW may return fewer than ``k'`` results for a query; missing slots have id -1.
        """
        k = min(k, len(self))
        if k < 1:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        return self.faiss.search(_as_matrix(queries, "queries"), k)

    def vector(self, i: int) -> np.ndarray:
        """The stored vector ``i`` (used to check a cached index against the stored embeddings)."""
        return self.faiss.reconstruct(int(i))

    def save(self, path) -> str:
        """Write the index atomically (temporary file, fsync, rename): a crash keeps the old one.

        Returns the checksum of what was written, for :meth:`load` to check the whole file against.
        """
        data = faiss.serialize_index(self.faiss)  # (bytes,) uint8
        atomic_write(path, data.tobytes())
        return checksum_of(data)

    @classmethod
    def load(cls, path, dim: int, config: IndexConfig, checksum: str | None = None) -> VectorIndex:
        """Read an index file; a missing, unreadable, altered (``checksum`` given) or mismatched file raises :class:`DupqError`."""
        try:
            data = np.fromfile(path, dtype=np.uint8)
        except OSError as e:
            raise DupqError(f"the index file {path} cannot be read ({e.strerror or e}).") from None
        if checksum is not None and checksum_of(data) != checksum:
            raise DupqError(f"the index file {path} is not the one its manifest describes (checksum differs).")
        try:
            index = faiss.deserialize_index(data)
        except RuntimeError as e:
            raise DupqError(f"the index file {path} cannot be read ({str(e).strip().splitlines()[0]}).") from None
        expected = faiss.IndexFlatIP if config.kind == "flat" else faiss.IndexHNSWFlat
        if not isinstance(index, expected) or index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise DupqError(f"the index file {path} is not a {config.kind} inner-product index of {dim} dimensions.")
        return cls(dim, config, index)
