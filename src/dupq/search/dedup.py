"""Grouping a corpus into clusters of duplicate questions (cleaning a forum's archive).

Two questions are a duplicate pair when the model calls them so (their cosine, or their
probability for a model judged on it, above the threshold: :mod:`dupq.modeling.verdict`).
Joining pairs transitively (connected components) chains: A~B, B~C, C~D puts A and D in one
cluster although they may ask different things, and on a large archive a few such chains glue
thousands of questions together. So the clusters here are **stars** (greedy star clustering,
Aslam, Pelekhov & Rus 2004): in order of falling number of duplicates, each question not yet
in a cluster becomes a representative and takes all its duplicates not yet in a cluster. Every member is then a duplicate *of its
representative* (so any two members are within twice the threshold's angle of each other), and
a question whose duplicates were all taken by other representatives stays on its own.

Candidates come from an exact k-nearest-neighbour search (:func:`dupq.search.vectors.search`), so a
representative can gather at most ``neighbours`` members; raise it for archives where one
question is asked hundreds of times.

>>> scores = np.array([[1.0, 0.9], [1.0, 0.9], [1.0, 0.1]])
>>> ids = np.array([[0, 1], [1, 0], [2, 0]])
>>> [c.members for c in star_clusters(scores, ids, threshold=0.8)]
[[0, 1]]
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dupq.core.files import DupqError, atomic_write
from dupq.data.tokenizer import check_questions
from dupq.modeling.formats import check_threshold
from dupq.modeling.model import Model
from dupq.modeling.verdict import from_cosines
from dupq.search.vectors import search


@dataclass
class DedupConfig:
    """How a corpus is grouped into duplicates."""

    threshold: float | None = (
        None  # a pair is a duplicate above this score (the model's: similarity or probability); None = the model's threshold
    )
    neighbours: int = 20  # candidates per question: more finds bigger clusters, costs more time and memory


@dataclass
class Cluster:
    """Questions that are all duplicates of one representative (indices into the corpus)."""

    representative: int
    members: list[int]  # the representative first, then by falling similarity to it
    scores: list[float]  # each member's similarity to the representative (1.0 for itself)


def star_clusters(scores: np.ndarray, ids: np.ndarray, threshold: float) -> list[Cluster]:
    """Greedy star clusters from each question's nearest neighbours ``scores (N, k)``, ``ids (N, k)``.

    Row ``i`` lists question ``i``'s candidates (its own id and ids of -1 are ignored). A pair
    is an edge when its score is above ``threshold``, seen from either side. Questions are taken
    by falling number of edges (ties: the smaller index); one not yet in a cluster becomes a
    representative with all its neighbours not yet in a cluster. Clusters of one are not returned.
    """
    n = len(scores)
    rows = np.broadcast_to(np.arange(n)[:, None], ids.shape)
    keep = (scores > threshold) & (ids != rows) & (ids >= 0)
    a, b, s = rows[keep], ids[keep], scores[keep]
    a, b, s = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([s, s])  # both directions
    order = np.lexsort((-s, b, a))  # by source, target, best score first
    a, b, s = a[order], b[order], s[order]
    first = np.ones(len(a), dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])  # one edge per ordered pair
    a, b, s = a[first], b[first], s[first]
    degree = np.bincount(a, minlength=n)  # (N,)
    offsets = np.concatenate([[0], np.cumsum(degree)])  # CSR: neighbours of i are b[offsets[i]:offsets[i+1]]
    assigned = np.zeros(n, dtype=bool)
    clusters = []
    for centre in np.lexsort((np.arange(n), -degree)):
        if degree[centre] == 0:
            break
        if assigned[centre]:
            continue
        nb, ns = b[offsets[centre] : offsets[centre + 1]], s[offsets[centre] : offsets[centre + 1]]
        free = ~assigned[nb]
        if not free.any():
            continue
        nb, ns = nb[free], ns[free]
        by_score = np.lexsort((nb, -ns))
        members, member_scores = [int(centre), *nb[by_score].tolist()], [1.0, *ns[by_score].tolist()]
        assigned[members] = True
        clusters.append(Cluster(int(centre), members, member_scores))
    return clusters


def dedup(texts: list[str], model: Model, config: DedupConfig | None = None) -> list[Cluster]:
    """Encode ``texts`` and group them into star clusters of duplicates (see the module docstring)."""
    config = config or DedupConfig()
    if config.neighbours < 1:
        raise DupqError(f"neighbours must be at least 1, got {config.neighbours}.")
    threshold = model.threshold if config.threshold is None else check_threshold(config.threshold, "the threshold")
    vectors = model.encode(check_questions(texts))  # (N, d)
    scores, ids = search(vectors, vectors, config.neighbours + 1)  # +1: each question finds itself
    rows = np.broadcast_to(np.arange(len(texts))[:, None], ids.shape)
    found = ids >= 0
    judged = from_cosines(  # each candidate pair judged as the model judges pairs (the score only)
        model,
        scores[found],
        vectors=lambda: (vectors[rows[found]], vectors[ids[found]]),
        threshold=threshold,
        probability=False,
    )
    scores = np.full(scores.shape, -np.inf)
    scores[found] = judged.score
    scores[ids == rows] = 1.0  # each question found itself: not an edge (star_clusters skips it)
    return star_clusters(scores, ids, threshold)


def write_clusters(
    path: str | os.PathLike, clusters: list[Cluster], texts: list[str], keys: list[str] | None, info: dict
) -> None:
    """Write clusters as ``.json`` (one object, the clusters inside) or ``.csv`` (one row per member)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise DupqError(f"--out must end in .json or .csv, not {path.name!r}.")

    def member(i: int, score: float) -> dict:
        row = {"index": i, "text": texts[i], "score": round(score, 4)}
        if keys is not None:
            row["id"] = keys[i]
        return row

    if suffix == ".json":
        body = {
            **info,
            "clusters": [
                {
                    "representative": c.representative,
                    "size": len(c.members),
                    "members": [member(i, s) for i, s in zip(c.members, c.scores)],
                }
                for c in clusters
            ],
        }
        atomic_write(path, (json.dumps(body, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))
        return
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["cluster", "representative", "index", *(["id"] if keys is not None else []), "score", "text"])
    for number, c in enumerate(clusters):
        for i, s in zip(c.members, c.scores):
            key = [inert(keys[i])] if keys is not None else []
            writer.writerow([number, int(i == c.representative), i, *key, round(s, 4), inert(texts[i])])
    atomic_write(path, out.getvalue().encode("utf-8"))


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula


def inert(cell: str) -> str:
    """A user's text as a CSV cell that a spreadsheet shows and never runs: one starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice against CSV injection).

    >>> inert("=HYPERLINK(A1)"), inert("How do I -x?")
    ("'=HYPERLINK(A1)", 'How do I -x?')
    """
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell
