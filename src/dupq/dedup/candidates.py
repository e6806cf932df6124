"""Each question's nearest neighbours among all the others, in memory that grows linearly.

Deduplicating ``N`` questions needs, for each, its ``k`` most similar others; the pairs among them
that the model judges duplicates are the edges the groups are made of (:mod:`dupq.dedup.clusters`).

* Up to ``exact_below`` questions the search is **exact** (FAISS's flat scan, blocked inside).
* Above it the questions are **partitioned** (an inverted file, Jégou, Douze & Schmid 2011, as
  FAISS's ``IndexIVFFlat``; SemDeDup and NeMo Curator also partition by k-means): spherical k-means
  puts each question in one of ``P = N / list_size`` lists, and a question is compared only with the
  questions of the ``nprobe`` lists whose centroids are nearest to it. The cost per question stays
  ``nprobe x list_size`` inner products whatever ``N``. Queries are taken in the order of their
  list, so consecutive queries scan the same lists while they are in the cache. With many lists
  (``P > FLAT_LISTS``) the centroids are searched approximately, as FAISS advises for a large
  ``nlist``: the probes through an HNSW graph (index factory ``IVFn_HNSW32``) searched with a beam
  of :data:`PROBE_BEAM` times ``nprobe``, and the k-means' assignment steps through an inverted file
  over the centroids themselves (a nested ``IVFn(IVFm)``), so neither costs a question time in
  proportion to ``P`` (the graph ``log P``, the nested lists ``sqrt P``).

The lists a query probes (:func:`probes`) come from the centroids alone, so a task that holds only
those lists finds what the whole index finds: :func:`search_lists` is the same search over a part,
which is how the Ray run (:mod:`dupq.dedup.ray_engine`) spreads it over machines.

>>> v = np.eye(3, dtype=np.float32)
>>> exact_neighbours(v, v, 2)[1][:, 0].tolist()
[0, 1, 2]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import faiss
import numpy as np
from faiss.contrib.ivf_tools import add_preassigned, search_preassigned

from dupq.core.errors import DupqError

FLAT_LISTS = 4096  # up to this many lists, centroids are searched exactly (one matrix product)
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


def neighbour_blocks(
    vectors: np.ndarray, config: CandidateConfig, block: int = 16_384, start: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(rows, scores, ids)`` for blocks of query rows, covering every row once: each row's
    ``neighbours + 1`` best candidates (itself among them) by inner product, -1 where fewer.

    ``start`` skips the first blocks (a resumed run); blocks are fixed by ``N`` and the config."""
    n = len(vectors)
    k = config.neighbours + 1
    if not config.partitioned(n):
        for lo in range(start * block, n, block):
            rows = np.arange(lo, min(n, lo + block))
            s, i = exact_neighbours(vectors[rows], vectors, k)
            yield rows, *_padded(s, i, k)
        return
    centroids = train_centroids(vectors, config)
    probed = probes(vectors, centroids, config.nprobe)
    index = list_index(centroids, vectors, np.arange(n), probed[:, 0])
    order = query_order(probed[:, 0])
    for lo in range(start * block, n, block):
        rows = order[lo : lo + block]
        s, i = search_lists(index, vectors[rows], probed[rows], k)
        yield rows, s, i


def _padded(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if scores.shape[1] == k:
        return scores, ids
    pad = k - scores.shape[1]
    return (
        np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf),
        np.pad(ids, ((0, 0), (0, pad)), constant_values=-1),
    )
