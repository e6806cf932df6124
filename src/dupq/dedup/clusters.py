"""Three ways to turn duplicate pairs (the **edges**, :class:`Edges`) into groups; the choice decides what a group means.

* :func:`star` (the default): greedy star clustering (Aslam, Pelekhov & Rus 2004): by falling
  number of edges, each question not yet grouped becomes a representative and takes every
  neighbour not yet grouped; every member is a duplicate *of its representative*, so a chain
  A~B~C~D never joins A and D through B and C.
* :func:`components`: connected components; chains glue far-apart questions (the reference,
  as NeMo Curator's and SemDeDup's groups within a partition).
* :func:`leader`: SemHash's rule: in input order, a question joins the best earlier
  representative it is a duplicate of, or becomes one.

Each returns :class:`Clusters`: per question its group (-1 alone), whether it is the
representative, and its score with the representative (1.0 for itself; a component's member its
best edge's, until :func:`dupq.dedup.grouping.group` scores it).

>>> e = Edges(np.array([0, 1]), np.array([1, 2]), np.array([0.9, 0.8], np.float32))
>>> star(e, 4).label.tolist(), components(e, 4).label.tolist()
([0, 0, 0, -1], [0, 0, 0, -1])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

METHODS = ("star", "components", "leader")


@dataclass
class Edges:
    """Duplicate pairs ``a[i] ~ b[i]`` with their score; each unordered pair at most once."""

    a: np.ndarray  # (E,) int64
    b: np.ndarray  # (E,) int64
    score: np.ndarray  # (E,) float32

    def __len__(self) -> int:
        return len(self.a)

    @classmethod
    def empty(cls) -> Edges:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))

    @classmethod
    def join(cls, parts: list[Edges]) -> Edges:
        """One edge list from several, each unordered pair once (with its best score)."""
        if not parts:
            return cls.empty()
        a = np.concatenate([p.a for p in parts]).astype(np.int64)
        b = np.concatenate([p.b for p in parts]).astype(np.int64)
        s = np.concatenate([p.score for p in parts]).astype(np.float32)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        keep = lo != hi
        lo, hi, s = lo[keep], hi[keep], s[keep]
        order = np.lexsort((-s, hi, lo))  # by pair, best score first
        lo, hi, s = lo[order], hi[order], s[order]
        first = np.ones(len(lo), dtype=bool)
        first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        return cls(lo[first], hi[first], s[first])

    def both_ways(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR adjacency: ``offsets (n + 1,)``, ``neighbour (2E,)``, ``score (2E,)``, each row best score first."""
        a, b = np.concatenate([self.a, self.b]), np.concatenate([self.b, self.a])
        s = np.concatenate([self.score, self.score])
        order = np.lexsort((b, -s, a))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(a, minlength=n), out=offsets[1:])
        return offsets, b[order], s[order]


@dataclass
class Clusters:
    """Groups of duplicates over ``N`` questions."""

    label: np.ndarray  # (N,) int64: group number, -1 for a question without duplicates
    representative: np.ndarray  # (N,) bool: the question its group is named after
    score: np.ndarray  # (N,) float32: score with the group's representative (1.0 for it; nan alone)

    @property
    def count(self) -> int:
        return int(self.label.max() + 1) if len(self.label) else 0

    @property
    def duplicates(self) -> int:
        """Questions that could go: members that are not representatives."""
        return int(((self.label >= 0) & ~self.representative).sum())

    def groups(self) -> Iterator[np.ndarray]:
        """Each group's question indices, the representative first, then by falling score (ties: index)."""
        grouped = np.flatnonzero(self.label >= 0)
        order = np.lexsort((grouped, -self.score[grouped], ~self.representative[grouped], self.label[grouped]))
        grouped = grouped[order]
        bounds = np.flatnonzero(np.diff(self.label[grouped])) + 1
        yield from np.split(grouped, bounds) if len(grouped) else ()


def _numbered(n: int, representative_of: np.ndarray, score: np.ndarray) -> Clusters:
    """Clusters from each question's representative (-1: alone), numbered by falling size (ties: representative)."""
    grouped = representative_of >= 0
    reps, sizes = np.unique(representative_of[grouped], return_counts=True)
    number = np.full(n, -1, dtype=np.int64)
    number[reps[np.lexsort((reps, -sizes))]] = np.arange(len(reps))
    label = np.full(n, -1, dtype=np.int64)
    label[grouped] = number[representative_of[grouped]]
    is_rep = np.zeros(n, dtype=bool)
    is_rep[reps] = True
    score = np.where(grouped, score, np.nan).astype(np.float32)
    score[reps] = 1.0
    return Clusters(label, is_rep, score)


def star(edges: Edges, n: int) -> Clusters:
    """Greedy star clusters: by falling degree (ties: smaller index), a free question takes its free neighbours."""
    offsets, nb, ns = edges.both_ways(n)
    degree = np.diff(offsets)
    representative_of = np.full(n, -1, dtype=np.int64)
    score = np.zeros(n, dtype=np.float32)
    for centre in np.lexsort((np.arange(n), -degree)):
        if degree[centre] == 0:
            break
        if representative_of[centre] >= 0:
            continue
        lo, hi = offsets[centre], offsets[centre + 1]
        free = representative_of[nb[lo:hi]] < 0
        if not free.any():
            continue
        members = nb[lo:hi][free]
        representative_of[members] = centre
        score[members] = ns[lo:hi][free]
        representative_of[centre] = centre
    return _numbered(n, representative_of, score)


def components(edges: Edges, n: int) -> Clusters:
    """Connected components; a component's representative is its member of highest degree (ties: smaller
    index) and a member's score is its best edge's (members need not be the representative's neighbours)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(edges)), (edges.a, edges.b)), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    offsets, _, ns = edges.both_ways(n)
    degree = np.diff(offsets)
    best = np.full(n, np.nan, dtype=np.float32)
    has = degree > 0
    best[has] = ns[offsets[:-1][has]]  # each row's first neighbour is its best
    order = np.lexsort((np.arange(n), -degree, comp))  # per component: highest degree first
    first = np.ones(n, dtype=bool)
    first[1:] = comp[order][1:] != comp[order][:-1]
    head = np.empty(comp.max() + 1 if n else 0, dtype=np.int64)
    head[comp[order][first]] = order[first]
    representative_of = np.where(has, head[comp], -1)
    return _numbered(n, representative_of, best)


def leader(edges: Edges, n: int) -> Clusters:
    """SemHash's rule in input order: a question joins the best of its earlier neighbours' representatives
    that it is itself a neighbour of, else it leads a group of its own (if a later question joins it)."""
    offsets, nb, ns = edges.both_ways(n)
    representative_of = np.arange(n)
    score = np.ones(n, dtype=np.float32)
    for i in range(n):
        lo, hi = offsets[i], offsets[i + 1]
        if lo == hi:
            continue
        row, row_s = nb[lo:hi], ns[lo:hi]
        earlier = row[row < i]
        if not len(earlier):
            continue
        leaders = np.unique(representative_of[earlier])
        ok = np.isin(row, leaders)  # leaders that are i's own neighbours; the row is best score first
        if ok.any():
            j = int(np.argmax(ok))
            representative_of[i], score[i] = row[j], row_s[j]
    led = np.bincount(representative_of, minlength=n) > 1
    alone = (representative_of == np.arange(n)) & ~led
    representative_of[alone] = -1
    return _numbered(n, representative_of, score)


CLUSTERERS = {"star": star, "components": components, "leader": leader}
