"""Top-k search by inner product: a pure function, and the FAISS index the collection keeps.

Questions are unit vectors, so the largest inner product is the most similar.

* :func:`search` is the exact answer for arrays in memory, blocked so that a large corpus never
  needs a ``(Q, N)`` matrix at once; everything else is checked against it.
* :class:`VectorIndex` is what a collection keeps and grows: ``IndexFlatIP`` (exact, the default)
  or ``IndexHNSWFlat`` (approximate; Malkov & Yashunin 2016, arXiv:1603.09320). Vectors get ids
  ``0, 1, 2, ...`` in the order added: the question ids. HNSW cannot take a vector out, so a graph
  holding many removed questions is built again of the others (:meth:`VectorIndex.rebuilt`), an
  ``IndexIDMap2`` keeping their ids and the store's extent beside it.
* ``ivfpq`` is for collections past memory: ``IndexIVFPQ`` (Jégou et al. 2011) keeps ``pq_m``
  one-byte codes per vector (~40 bytes instead of 512) and scans the ``nprobe`` nearest of
  ``nlist`` lists; its short list of ``rerank`` candidates is re-ranked by the exact inner product
  of the stored vectors, which the caller reads from disk (``fetch``).

>>> scores, ids = search(np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32), k=1)
>>> ids.ravel().tolist()
[0, 1, 2]
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import faiss
import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write

KINDS = ("flat", "hnsw", "ivfpq")
NBITS = 8  # bits per product-quantizer code: 256 centroids per sub-vector, one byte each
# A filtered search scans the allowed vectors exactly when that costs less than the index's own search
# with a selector (:func:`scans_exactly`): a flat index when they are at most this share of it,
EXACT_SHARE = 0.02
# an HNSW graph when they are no more than the vectors its widened walk scores (efSearch x 2M links),
MAX_WIDENED = 4_096  # the widest efSearch a filtered HNSW search is given
# an ivfpq index when reading them from the store costs no more than its re-ranked short list does
# (bulk reads of neighbouring ids cost about a quarter of one vector read alone).
STORED_READS = 4


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

    ``argpartition`` on the scores alone keeps an arbitrary member of a tie that straddles the k-th place; this key
    makes the cut exact: the float's bits made order-preserving, then the column in the low 32 bits.
    """
    bits = (scores + np.float32(0)).view(np.uint32)  # + 0 turns -0.0 into 0.0
    ascending = np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))  # uint32 order == float order
    columns = np.arange(scores.shape[1], dtype=np.uint64)
    return (~ascending).astype(np.uint64) << np.uint64(32) | columns


def rerank(
    queries: np.ndarray, candidates: np.ndarray, fetch: Callable[[np.ndarray], np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of each query's ``candidates (Q, R)`` (-1: none) by exact inner product with ``fetch(ids)``'s vectors.

    Ties keep the candidates' order (a stable sort), as :func:`search` keeps the lower id first.
    """
    wanted = np.unique(candidates[candidates >= 0])  # (U,) sorted
    vectors = fetch(wanted) if len(wanted) else np.zeros((0, queries.shape[1]), np.float32)  # (U, d)
    scores = np.full(candidates.shape, -np.inf, dtype=np.float32)  # (Q, R)
    found = candidates >= 0
    rows = np.searchsorted(wanted, candidates[found])
    scores[found] = np.einsum("nd,nd->n", np.repeat(queries, found.sum(1), axis=0), vectors[rows])
    order = np.lexsort((candidates, -scores), axis=1)[:, :k]  # (Q, k): best score first, then lower id
    best_ids = np.take_along_axis(candidates, order, 1)
    best = np.take_along_axis(scores, order, 1)
    best_ids[~np.isfinite(best)] = -1
    return best, best_ids


def checksum_of(data: np.ndarray) -> str:
    """CRC-32 of a byte array: ~2 GB/s, so a 575 MB index is checked in a fraction of its load time."""
    return f"crc32:{zlib.crc32(memoryview(data)):08x}"


@dataclass
class IndexConfig:
    """Which FAISS index a collection keeps; saved in its manifest."""

    kind: str = "flat"  # "flat": exact scan, no build cost; "hnsw": approximate graph, fast queries
    # HNSW, chosen by dupq-lab hnsw-sweep on Quora's 537,617 questions: recall@10 >= 0.99 two standard errors
    # down, then the fewest bytes, then the fastest walk; Quora's near-identical questions need a well-built
    # graph more than a wide search. A collection keeps the settings it was built with (its manifest).
    # graph links per vector (2M on the bottom layer): more = better recall, more memory and build time
    hnsw_m: int = 16
    ef_construction: int = 200  # candidates while linking: more = better graph, slower build
    ef_search: int = 40  # candidates while searching (at least k are kept): more = better recall, slower queries
    # IVF-PQ (see dupq-lab search-speed for the figures on Quora's 537k questions):
    nlist: int = 1024  # coarse lists: more = fewer vectors scanned per probe, more to train and keep (d floats each)
    pq_m: int = 32  # one-byte codes per vector (must divide the width): more = finer scores, more memory
    nprobe: int = 128  # lists scanned per query: more = better recall, slower queries (Quora, 500 held-out queries: 64 -> 0.93, 128 -> 0.96 recall@10)
    rerank: int = 100  # candidates re-ranked by exact cosine from the stored vectors: more = better recall, more reads

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DupqError(f"the index kind must be one of {', '.join(KINDS)}, not {self.kind!r}.")
        for name, lo, hi in (
            ("hnsw_m", 2, 512),
            ("ef_construction", 1, 4096),
            ("ef_search", 1, 65536),
            ("nlist", 1, 1 << 20),
            ("pq_m", 1, 1024),
            ("nprobe", 1, 1 << 20),
            ("rerank", 1, 100_000),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise DupqError(f"{name} must be an integer from {lo} to {hi}, not {value!r}.")


def scans_exactly(config: IndexConfig, allowed: int, share: float, k: int) -> bool:
    """Whether a search kept to ``allowed`` ids (``share`` of the index) scans their vectors exactly: when that
    scores no more vectors than the index's own search with a selector would (an HNSW walk widened to
    ``efSearch / share`` scores about ``2M`` neighbours a step), or reads no more from the store than its short
    list does (ivfpq), or (flat) the ids are a small share of the scan."""
    if config.kind == "hnsw":
        walk = min(max(config.ef_search, k) / share, MAX_WIDENED)
        return allowed <= walk * 2 * config.hnsw_m
    if config.kind == "ivfpq":
        return allowed <= STORED_READS * max(config.rerank, k)
    return share <= EXACT_SHARE


def training_size(config: IndexConfig) -> int:
    """Vectors an IVF-PQ index needs to train: 39 per centroid of the coarse and the PQ k-means (FAISS's own floor)."""
    return 39 * max(config.nlist, 1 << NBITS)


class VectorIndex:
    """A FAISS inner-product index whose ids are the order of addition (thin, not thread-safe)."""

    def __init__(self, dim: int, config: IndexConfig, index: faiss.Index | None = None):
        self.dim, self.config = dim, config
        # a rebuilt graph (IndexIDMap2 around the HNSW): ids with gaps where removed questions were
        self.mapped = isinstance(index, faiss.IndexIDMap2)
        graph = faiss.downcast_index(index.index) if self.mapped else index
        if index is None:
            if config.kind == "flat":
                index = faiss.IndexFlatIP(dim)
            elif config.kind == "hnsw":
                index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = config.ef_construction
            else:
                if dim % config.pq_m:
                    raise DupqError(f"pq_m must divide the vectors' width {dim}; {config.pq_m} does not.")
                index = faiss.IndexIVFPQ(
                    faiss.IndexFlatIP(dim), dim, config.nlist, config.pq_m, NBITS, faiss.METRIC_INNER_PRODUCT
                )
            graph = index
        if config.kind == "hnsw":
            graph.hnsw.efSearch = config.ef_search
        if config.kind == "ivfpq":
            index.nprobe = config.nprobe
        self.faiss, self._graph = index, graph  # the graph is kept: the map does not own it
        self.trained_on: int | None = None  # vectors an ivfpq index was trained on, when this object trained it
        self._ids = faiss.vector_to_array(index.id_map) if self.mapped else None  # (ntotal,) increasing
        # a mapped index covers ids 0 .. extent - 1: the file does not say how far past its last id, the caller may
        self._extent = int(self._ids[-1]) + 1 if self.mapped and len(self._ids) else 0
        self._present_mask: np.ndarray | None = None

    @classmethod
    def rebuilt(
        cls, dim: int, config: IndexConfig, ids: np.ndarray, vectors: np.ndarray, extent: int | None = None
    ) -> VectorIndex:
        """A new HNSW graph of ``vectors (M, d)`` under their ``ids (M,)`` (increasing): a graph without removed
        questions. It covers ids up to ``extent`` (the store's next id; default: after the last of ``ids``), so
        removed questions after the last live one are not added back by the next catch-up."""
        graph = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = config.ef_construction
        index = cls(dim, config, faiss.IndexIDMap2(graph))
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if len(ids):
            index.faiss.add_with_ids(_as_matrix(vectors, "vectors"), ids)
        index._ids = ids.copy()
        index.cover(extent)
        return index

    def cover(self, extent: int | None) -> None:
        """Say that a mapped index covers ids ``0 .. extent - 1`` (those it lacks are removed ones); never below its last id."""
        if self.mapped and extent is not None:
            self._extent = max(self._extent, int(extent))

    def __len__(self) -> int:
        """The id after the last one it covers: ids ``0 .. len - 1`` are in it, but for removed ones a rebuild left out."""
        return self._extent if self.mapped else self.faiss.ntotal

    @property
    def stored(self) -> int:
        """How many vectors it holds."""
        return self.faiss.ntotal

    def _present(self) -> np.ndarray:
        """``(len(self),)`` bool: the ids it holds (a mapped index; kept until the next add)."""
        if self._present_mask is None or len(self._present_mask) != len(self):
            self._present_mask = np.zeros(len(self), dtype=bool)
            self._present_mask[self._ids] = True
        return self._present_mask

    def ids(self) -> np.ndarray:
        """The ids it holds, increasing ``(stored,)``."""
        return self._ids if self.mapped else np.arange(self.faiss.ntotal, dtype=np.int64)

    @property
    def exact(self) -> bool:
        """Whether the index holds the vectors themselves (flat, hnsw), not codes of them (ivfpq)."""
        return self.config.kind != "ivfpq"

    def add(self, vectors: np.ndarray) -> None:
        """Append ``vectors (M, d)``; they get ids ``len(self) .. len(self) + M - 1``.

        An untrained IVF-PQ index is trained on the first vectors it is given (a collection's first
        build chunk, up to 50,000), which must be at least :func:`training_size`.
        """
        if not len(vectors):
            return
        vectors = _as_matrix(vectors, "vectors")
        if not self.faiss.is_trained:
            need = training_size(self.config)
            if len(vectors) < need:
                raise DupqError(
                    f"an ivfpq index with nlist {self.config.nlist} trains on at least {need:,} questions, "
                    f"got {len(vectors):,}; use the flat index for a collection this small (or a smaller nlist)."
                )
            self.faiss.train(vectors)
            self.trained_on = len(vectors)
        if self.mapped:
            ids = np.arange(len(self), len(self) + len(vectors), dtype=np.int64)
            self.faiss.add_with_ids(vectors, ids)
            self._ids = np.concatenate([self._ids, ids])
            self._extent += len(ids)
            return
        self.faiss.add(vectors)

    def search(
        self,
        queries: np.ndarray,
        k: int,
        fetch: Callable[[np.ndarray], np.ndarray] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``scores (Q, k')`` and ``ids (Q, k')``, best first, ``k' = min(k, len(self))``.

        HNSW and IVF-PQ may return fewer than ``k'`` results for a query; missing slots have id -1. For IVF-PQ,
        ``fetch(ids) -> (len(ids), d)`` reads stored vectors: the best ``rerank`` candidates by code are re-ranked by
        exact inner product, so the scores are exact. Without ``fetch`` the scores are the codes' approximations.
        ``allowed`` (a ``(len(self),)`` bool mask) keeps the search to those ids: see :meth:`_search_within`.
        """
        k = min(k, len(self))
        if k < 1:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        queries = _as_matrix(queries, "queries")
        if allowed is not None:
            if self.mapped:  # an id a rebuild left out has no vector to scan
                present = self._present()[: len(allowed)]
                allowed = allowed[: len(present)] & present
            return self._search_within(queries, k, fetch, allowed)
        if self.exact or fetch is None:
            return self.faiss.search(queries, k)
        _, candidates = self.faiss.search(queries, max(k, self.config.rerank))  # (Q, R), by approximate score
        return rerank(queries, candidates, fetch, k)

    def _search_within(self, queries, k, fetch, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The search kept to the ``allowed`` ids, losing none of the hits a filter keeps.

        Few allowed (:func:`scans_exactly`): an exact scan of their vectors (:func:`search`), so a search's cost never
        jumps with the filter's width or one removal. More: FAISS searches with an ``IDSelectorBitmap`` (the graph walk
        or the lists skip the others), widened in proportion to what the filter removes: HNSW's ``efSearch`` and IVF's
        ``nprobe`` divided by the allowed share, so that as many allowed candidates are weighed as an unfiltered search
        weighs. Recall against the exact filtered search: dupq-lab filtered-search.
        """
        ids = np.flatnonzero(allowed)  # (A,)
        if not len(ids):
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        share = len(ids) / len(allowed)
        if scans_exactly(self.config, len(ids), share, k):
            vectors = self.vectors(ids) if self.exact or fetch is None else fetch(ids)  # (A, d)
            scores, found = search(queries, vectors, k)
            return scores, ids[found]
        bits = np.packbits(allowed, bitorder="little")  # (ceil(N / 8),) uint8: FAISS reads bit i % 8 of byte i // 8
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        if self.config.kind == "flat":
            return self.faiss.search(queries, k, params=faiss.SearchParameters(sel=selector))
        if self.config.kind == "hnsw":
            ef = min(int(max(self.config.ef_search, k) / share) + 1, MAX_WIDENED)
            return self.faiss.search(queries, k, params=faiss.SearchParametersHNSW(sel=selector, efSearch=ef))
        nprobe = min(int(self.config.nprobe / share) + 1, self.config.nlist)
        params = faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)
        if fetch is None:
            return self.faiss.search(queries, k, params=params)
        _, candidates = self.faiss.search(queries, max(k, self.config.rerank), params=params)
        return rerank(queries, candidates, fetch, k)

    def vector(self, i: int) -> np.ndarray:
        """The stored vector ``i`` (used to check a cached index against the stored embeddings); flat and hnsw only."""
        return self.vectors(np.array([i]))[0]

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of ``ids`` ``(len(ids), d)`` in one FAISS call (a pair head reads a search's hits); flat and hnsw only."""
        if not self.exact:
            raise DupqError("an ivfpq index keeps codes, not vectors; read the vector from the collection's store.")
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        return self.faiss.reconstruct_batch(ids) if len(ids) else np.zeros((0, self.dim), np.float32)

    def save(self, path) -> str:
        """Write the index atomically (temporary file, fsync, rename): a crash keeps the old one.

        Returns the checksum of what was written, for :meth:`load` to check the whole file against.
        """
        data = faiss.serialize_index(self.faiss)  # (bytes,) uint8
        atomic_write(path, data.tobytes())
        return checksum_of(data)

    @classmethod
    def load(
        cls, path, dim: int, config: IndexConfig, checksum: str | None = None, extent: int | None = None
    ) -> VectorIndex:
        """Read an index file; a missing, unreadable, altered (``checksum`` given) or mismatched file raises
        :class:`DupqError`. ``extent``: the ids a rebuilt graph covers (see :meth:`cover`), from its manifest."""
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
        expected = {"flat": faiss.IndexFlatIP, "hnsw": faiss.IndexHNSWFlat, "ivfpq": faiss.IndexIVFPQ}[config.kind]
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
        if inner is not index and config.kind != "hnsw":  # only a graph is ever rebuilt
            inner = None
        if not isinstance(inner, expected) or index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise DupqError(f"the index file {path} is not a {config.kind} inner-product index of {dim} dimensions.")
        loaded = cls(dim, config, index)
        loaded.cover(extent)
        return loaded
