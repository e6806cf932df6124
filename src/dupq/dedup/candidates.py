"""Each question's nearest neighbours among all the others, in memory that grows linearly.

Up to ``exact_below`` questions the search is **exact** (FAISS's flat scan, blocked). Above it the questions are
**partitioned** (an inverted file, Jégou, Douze & Schmid 2011; SemDeDup and NeMo Curator partition by k-means too):
spherical k-means puts each in one of ``P = N / list_size`` lists, and a question is compared only with the ``nprobe``
lists nearest to it, so its cost stays ``nprobe x list_size`` whatever ``N``; queries go in list order, so consecutive
ones scan lists in the cache. With ``P > FLAT_LISTS`` the centroids are searched approximately, as FAISS advises: the
probes through an HNSW graph (``IVFn_HNSW32``, a beam of :data:`PROBE_BEAM` x ``nprobe``) and the k-means' assignments
through a nested ``IVFn(IVFm)``.

The lists a query probes (:func:`probes`) come from the centroids alone, so :func:`search_lists` over a part of the
lists finds what the whole index finds: how the Ray run (:mod:`dupq.dedup.ray_engine`) spreads it over machines.

>>> v = np.eye(3, dtype=np.float32)
>>> exact_neighbours(v, v, 2)[1][:, 0].tolist()
[0, 1, 2]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import faiss
import numpy as np
from faiss.contrib.ivf_tools import add_preassigned, search_preassigned

from dupq.core.errors import DupqError

FLAT_LISTS = 4096  # up to this many lists, centroids are searched exactly (one matrix product)
BLOCK = 16_384  # queries searched and judged at once
PROBE_BEAM = 3  # past FLAT_LISTS, HNSW's efSearch is this times nprobe (docs/scale.md measures each beam)


@dataclass
class CandidateConfig:
    """How each question's neighbours are found."""

    neighbours: int = 20  # candidates per question: more finds bigger groups, costs time and disk
    exact_below: int = 10_000  # exact search up to this many questions (where it is as fast); partitioned above
    list_size: int = 512  # partitioned: mean questions per list (more = better recall, more time per question)
    nprobe: int = 8  # partitioned: lists each question is compared with (more = better recall, more time)
    seed: int = 0  # k-means' sample and start

    def __post_init__(self) -> None:
        for name in ("neighbours", "list_size", "nprobe"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DupqError(f"{name} must be a whole number of at least 1, not {value!r}.")

    def partitioned(self, n: int) -> bool:
        return n > self.exact_below

    def lists(self, n: int) -> int:
        return max(1, n // self.list_size)


def exact_neighbours(queries: np.ndarray, corpus: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-``k`` of ``corpus`` for each query by inner product: ``scores, ids (Q, k')``, best first.

    FAISS's flat scan (``IndexFlatIP``): blocked matrix products and a heap per query, so no ``(Q, N)``
    matrix is ever held whole."""
    index = faiss.IndexFlatIP(corpus.shape[1])
    index.add(np.ascontiguousarray(corpus, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(corpus)))


def _flat_or_graph(centroids: np.ndarray, nprobe: int = 1) -> faiss.Index:
    """An inner-product index over centroids: exact up to :data:`FLAT_LISTS`, an HNSW graph beyond
    (searched with a beam of :data:`PROBE_BEAM` times ``nprobe``)."""
    d = centroids.shape[1]
    if len(centroids) <= FLAT_LISTS:
        index = faiss.IndexFlatIP(d)
    else:
        index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction, index.hnsw.efSearch = 80, PROBE_BEAM * nprobe
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    return index


def _assigner(train: np.ndarray, p: int, seed: int) -> faiss.Index:
    """The index k-means assigns its sample with: exact up to :data:`FLAT_LISTS` lists; beyond, an inverted
    file of ``sqrt(P)`` cells over the centroids (its cells drawn from the sample), 8 cells probed."""
    d = train.shape[1]
    if p <= FLAT_LISTS:
        return faiss.IndexFlatIP(d)
    cells = int(np.sqrt(p))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, cells, faiss.METRIC_INNER_PRODUCT)
    index.cp.spherical, index.cp.seed, index.nprobe = True, seed, 8
    index.train(train[np.random.default_rng(seed).choice(len(train), size=min(len(train), 64 * cells), replace=False)])
    return index


def train_centroids(vectors: np.ndarray, config: CandidateConfig) -> np.ndarray:
    """Spherical k-means centroids ``(P, d)`` of ``vectors``, trained on a sample of 32 per list (FAISS's ``Clustering``)."""
    n, d = vectors.shape
    p = config.lists(n)
    clustering = faiss.Clustering(d, p)
    clustering.niter, clustering.seed, clustering.spherical = 10, config.seed, True
    clustering.max_points_per_centroid, clustering.min_points_per_centroid = 32, 1
    sample = np.random.default_rng(config.seed).choice(n, size=min(n, 32 * p), replace=False)
    train = np.ascontiguousarray(vectors[np.sort(sample)], dtype=np.float32)
    clustering.train(train, _assigner(train, p, config.seed))
    return faiss.vector_to_array(clustering.centroids).reshape(p, d)


def probes(vectors: np.ndarray, centroids: np.ndarray, nprobe: int, block: int = 65_536) -> np.ndarray:
    """The ``nprobe`` lists each vector is compared with ``(N, nprobe)`` int32; the first is its own list."""
    nprobe = min(nprobe, len(centroids))
    quantizer = _flat_or_graph(centroids, nprobe)
    out = np.empty((len(vectors), nprobe), dtype=np.int32)
    for lo in range(0, len(vectors), block):
        out[lo : lo + block] = quantizer.search(np.ascontiguousarray(vectors[lo : lo + block], np.float32), nprobe)[1]
    return out


def list_index(centroids: np.ndarray, vectors: np.ndarray, ids: np.ndarray, lists: np.ndarray) -> faiss.Index:
    """An ``IndexIVFFlat`` over these centroids holding ``vectors`` under their global ``ids`` in their ``lists``."""
    p, d = centroids.shape
    quantizer = faiss.IndexFlatIP(d)  # never searched: every add and search here is preassigned
    quantizer.add(np.ascontiguousarray(centroids, dtype=np.float32))
    index = faiss.IndexIVFFlat(quantizer, d, p, faiss.METRIC_INNER_PRODUCT)
    index.is_trained = True
    if len(vectors):
        # Named here: add_preassigned keeps only a raw pointer to ids, so a temporary would be freed under it.
        x, where, keys = np.ascontiguousarray(vectors, np.float32), lists.astype(np.int64), ids.astype(np.int64)
        add_preassigned(index, x, where, keys)
    return index


def search_lists(
    index: faiss.Index, queries: np.ndarray, query_probes: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``k`` best among the vectors of its probed lists: ``scores, ids (Q, k)``, -1 where fewer."""
    index.nprobe = query_probes.shape[1]
    return search_preassigned(index, np.ascontiguousarray(queries, np.float32), k, query_probes.astype(np.int64))


def query_order(first_list: np.ndarray) -> np.ndarray:
    """Queries in the order of their own list (stable), so consecutive ones scan the same lists."""
    return np.argsort(first_list, kind="stable")


@dataclass
class Plan:
    """How a run's queries are searched, decided once: in blocks of ``block`` query rows, exactly among all
    the questions (``centroids`` None) or among the lists each probes (``probed``, the first its own)."""

    n: int  # questions
    k: int  # candidates per query, itself among them
    block: int = BLOCK  # query rows per block
    centroids: np.ndarray | None = None  # (P, d) the lists' centroids; None: exact
    probed: np.ndarray | None = None  # (N, nprobe) int32 the lists each question probes

    @property
    def order(self) -> np.ndarray:
        """The query rows in the order they are searched: by their own list, so consecutive ones scan the same lists."""
        return np.arange(self.n) if self.probed is None else query_order(np.asarray(self.probed[:, 0]))

    def blocks(self, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        """``(number, rows)`` of each block from ``start`` on (a resumed run skips the blocks it recorded)."""
        order = self.order
        for number, lo in enumerate(range(0, self.n, self.block)):
            if number >= start:
                yield number, order[lo : lo + self.block]

    @cached_property
    def _lists(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each question's own list, the questions by list, and where each list starts among them."""
        lists = np.asarray(self.probed[:, 0])
        order = query_order(lists)
        return lists, order, np.searchsorted(lists[order], np.arange(len(self.centroids) + 1))

    def probes_of(self, rows: np.ndarray) -> np.ndarray | None:
        return None if self.probed is None else np.asarray(self.probed[rows])

    def corpus(self, vectors: np.ndarray, rows: np.ndarray | None = None) -> Corpus:
        """What queries are searched among: every question, or (``rows`` given, partitioned) the questions of the
        lists those rows probe, which find what the whole index finds (how the Ray run ships a block)."""
        if self.probed is None or rows is None:
            lists = None if self.probed is None else np.asarray(self.probed[:, 0])
            return Corpus(vectors, None, lists, self.centroids)
        lists, order, bounds = self._lists
        wanted = np.unique(np.asarray(self.probed[rows]))
        ids = np.sort(np.concatenate([order[bounds[j] : bounds[j + 1]] for j in wanted]))
        return Corpus(np.asarray(vectors[ids]), ids, lists[ids], self.centroids)


def plan(vectors: np.ndarray, config: CandidateConfig, partition=None, block: int = BLOCK) -> Plan:
    """The :class:`Plan` of ``vectors (N, d)``: exact up to ``exact_below`` questions, partitioned above it with
    the centroids and probes that ``partition(vectors, config)`` gives (by default trained here, :func:`partition`)."""
    n, k = len(vectors), config.neighbours + 1
    if not config.partitioned(n):
        return Plan(n, k, block)
    centroids, probed = (partition or _partition)(vectors, config)
    return Plan(n, k, block, centroids, probed)


def _partition(vectors: np.ndarray, config: CandidateConfig) -> tuple[np.ndarray, np.ndarray]:
    """The k-means centroids of ``vectors`` and the lists each probes."""
    centroids = train_centroids(vectors, config)
    return centroids, probes(vectors, centroids, config.nprobe)


class Corpus:
    """The vectors queries are searched among, under their global ids (``ids`` None: all of them, ids their rows),
    with each one's own list and the lists' ``centroids`` when partitioned. The index is built at the first search."""

    def __init__(self, vectors, ids: np.ndarray | None, lists: np.ndarray | None, centroids: np.ndarray | None):
        self.vectors, self.ids, self.lists, self.centroids = vectors, ids, lists, centroids
        self._index = None

    def __getitem__(self, wanted: np.ndarray) -> np.ndarray:
        """The vectors of global ids ``wanted`` (the judge reads a pair's two)."""
        return self.vectors[wanted if self.ids is None else np.searchsorted(self.ids, wanted)]

    def search(self, queries: np.ndarray, query_probes: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``k`` best by inner product (among its probed lists when partitioned): ``scores, ids (Q, k')``."""
        if self.centroids is None:
            return exact_neighbours(queries, self.vectors, k)
        if self._index is None:
            ids = np.arange(len(self.vectors)) if self.ids is None else self.ids
            self._index = list_index(self.centroids, self.vectors, ids, self.lists)
        return search_lists(self._index, queries, query_probes, k)


def neighbour_blocks(
    vectors: np.ndarray, config: CandidateConfig, block: int = BLOCK, start: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(rows, scores, ids)`` for blocks of query rows, covering every row once: each row's
    ``neighbours + 1`` best candidates (itself among them) by inner product, -1 where fewer.

    ``start`` skips the first blocks (a resumed run); blocks are fixed by ``N`` and the config."""
    searched = plan(vectors, config, block=block)
    corpus = searched.corpus(vectors)
    for _, rows in searched.blocks(start):
        yield rows, *_padded(*corpus.search(vectors[rows], searched.probes_of(rows), searched.k), searched.k)


def _padded(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if scores.shape[1] == k:
        return scores, ids
    pad = k - scores.shape[1]
    return (
        np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf),
        np.pad(ids, ((0, 0), (0, pad)), constant_values=-1),
    )
