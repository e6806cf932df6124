"""Grouping a corpus into groups of duplicate questions (cleaning a forum's archive).

Three steps, each its own module: every question's candidate neighbours (:mod:`dupq.dedup.candidates`),
each pair judged as the model judges pairs (:mod:`dupq.modeling.verdict`), the duplicates being the
edges, and the edges made into groups (:mod:`dupq.dedup.clusters`: star clusters by default). Equal
texts are duplicates whatever the model says (score 1.0), as SemHash groups exact copies first.

**A reranker** (retrieve and rerank, as SemDeDup and NeMo Curator re-score their candidates): the
fast model proposes the candidates; the reranker re-scores each pair by the cosine of its vectors
(each question encoded once), judges it by its own verdict and scores the groups.

A representative gathers at most ``neighbours`` members found from its side, plus those that found
it. :func:`dedup` is the whole run in memory; ``dupq dedup`` streams files through :mod:`dupq.dedup.run`.

>>> from dupq.modeling.model import Model
>>> clusters = dedup(["How do I learn Python?", "How can I learn Python?", "Why is the sky blue?"], Model.load())
>>> [g.tolist() for g in clusters.groups()]
[[0, 1]]
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from dupq.core.errors import DupqError
from dupq.data.questions import check_questions
from dupq.dedup.candidates import CandidateConfig, Corpus, Plan, plan
from dupq.dedup.clusters import CLUSTERERS, METHODS, Clusters, Edges
from dupq.modeling.folder_format import check_threshold
from dupq.modeling.judge import SIMILARITY
from dupq.modeling.model import Model
from dupq.modeling.verdict import Verdicts, from_cosines, on_cosines

JUDGE_CHUNK = 32_768  # candidate pairs judged at once


@dataclass
class DedupConfig:
    """How a corpus is grouped into duplicates."""

    threshold: float | None = None  # a pair is a duplicate when the model's score is above it; None: the model's own
    method: str = "star"  # "star", "components" or "leader" (SemHash's rule): see dupq.dedup.clusters
    on: str | None = None  # the score judged: None, the model's own; "similarity", the cosine alone (faster)
    candidates: CandidateConfig = field(default_factory=CandidateConfig)  # how neighbours are found

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise DupqError(f"the grouping must be one of {', '.join(METHODS)}, not {self.method!r}.")
        if self.on not in (None, SIMILARITY):
            raise DupqError(f"dedup judges the model's own score or the cosine ({SIMILARITY!r}), not {self.on!r}.")
        if self.threshold is not None:
            self.threshold = check_threshold(self.threshold, "the threshold")
        elif self.on == SIMILARITY:
            raise DupqError("judging by the cosine alone needs a --threshold on it.")

    def threshold_for(self, model: Model) -> float:
        return model.threshold if self.threshold is None else self.threshold

    def score_is(self, model: Model) -> str:
        """Which score the threshold applies to: the model's (``similarity`` or ``probability``) or the cosine."""
        return self.on or model.threshold_on


def judge(
    model: Model,
    vectors: np.ndarray,
    rows: np.ndarray,
    scores: np.ndarray,
    ids: np.ndarray,
    threshold: float,
    on: str | None = None,
) -> Edges:
    """The duplicate pairs among candidates ``rows[i] ~ ids[i, j]`` (``scores``: their cosines), judged by
    the model's verdict at ``threshold``: each pair's score is the model's (its probability for a model
    judged on one), or the cosine alone with ``on="similarity"``."""
    a = np.broadcast_to(np.asarray(rows)[:, None], ids.shape)
    found = (ids >= 0) & (ids != a)
    a, b, cos = a[found], ids[found], scores[found]
    if not len(a):
        return Edges.empty()
    if on == SIMILARITY:
        return _duplicates(a, b, on_cosines(cos, threshold))
    parts = []
    for lo in range(0, len(a), JUDGE_CHUNK):  # a chunk's pair features stay small (the mlp head's are ~2 KB a pair)
        pa, pb, pc = a[lo : lo + JUDGE_CHUNK], b[lo : lo + JUDGE_CHUNK], cos[lo : lo + JUDGE_CHUNK]
        parts.append(_duplicates(pa, pb, _judged(model, vectors, pa, pb, pc, threshold)))
    return Edges(*(np.concatenate(x) for x in zip(*((e.a, e.b, e.score) for e in parts))))


def _judged(model: Model, vectors, a: np.ndarray, b: np.ndarray, cos: np.ndarray, threshold: float) -> Verdicts:
    """The model's verdicts of the pairs ``a[i] ~ b[i]`` of cosines ``cos`` (their ``vectors`` read by a head that needs them)."""
    return from_cosines(model, cos, lambda: (vectors[a], vectors[b]), threshold, probability=False)


def _duplicates(a: np.ndarray, b: np.ndarray, verdicts: Verdicts) -> Edges:
    """The pairs ``a[i] ~ b[i]`` judged duplicates, with their scores."""
    keep = verdicts.duplicate
    return Edges(a[keep].astype(np.int64), b[keep].astype(np.int64), verdicts.score[keep].astype(np.float32))


def scored_with_representatives(clusters: Clusters, vectors: np.ndarray, model: Model, config: DedupConfig) -> Clusters:
    """``clusters`` with each member's score against its representative, judged as :func:`judge` judges a pair.
    Star and leader groups have it already; a component's member may be joined through others, and its score is
    its best edge's until this (it may then fall below the threshold: the chain brought it in)."""
    members = np.flatnonzero((clusters.label >= 0) & ~clusters.representative)
    head = np.empty(clusters.count, dtype=np.int64)
    head[clusters.label[clusters.representative]] = np.flatnonzero(clusters.representative)
    reps = head[clusters.label[members]]
    score, threshold = clusters.score.copy(), config.threshold_for(model)
    for lo in range(0, len(members), JUDGE_CHUNK):
        a, b = members[lo : lo + JUDGE_CHUNK], reps[lo : lo + JUDGE_CHUNK]
        cos = np.einsum("nd,nd->n", vectors[a], vectors[b])  # (M,)
        if config.on == SIMILARITY:
            score[a] = on_cosines(cos, threshold).score
        else:
            score[a] = _judged(model, vectors, a, b, cos, threshold).score
    return replace(clusters, score=score)


def group(edges: Edges, vectors: np.ndarray, model: Model, config: DedupConfig) -> Clusters:
    """The groups of ``edges`` over the questions of ``vectors (N, d)`` by ``config.method``, each member scored
    with its representative (:func:`scored_with_representatives` where the grouping does not do it itself)."""
    clusters = CLUSTERERS[config.method](edges, len(vectors))
    return scored_with_representatives(clusters, vectors, model, config) if config.method == "components" else clusters


def rescored(reranked: np.ndarray, rows: np.ndarray, ids: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """The cosines ``(Q, k)`` of each query row ``rows[i]`` with its candidates ``ids[i]`` by the vectors
    ``reranked (N, d')`` (a reranker's, unit length; -inf where a candidate is -1), a chunk of rows at a time."""
    out = np.full(ids.shape, -np.inf, dtype=np.float32)
    for lo in range(0, len(rows), chunk):
        part = ids[lo : lo + chunk]  # (C, k)
        mine = np.asarray(reranked[np.asarray(rows[lo : lo + chunk])], np.float32)  # (C, d')
        theirs = np.asarray(reranked[part.clip(0).ravel()], np.float32).reshape(*part.shape, -1)  # (C, k, d')
        out[lo : lo + chunk] = np.where(part >= 0, np.einsum("cd,ckd->ck", mine, theirs), -np.inf)
    return out


def block_edges(
    model: Model,
    threshold: float,
    on: str | None,
    k: int,
    rows,
    queries,
    query_probes,
    corpus: Corpus,
    reranked: np.ndarray | None = None,
) -> Edges:
    """The duplicates found from one block of query ``rows`` (``queries``: their vectors; ``query_probes``: their
    lists, partitioned): their ``k`` candidates in ``corpus`` judged (:func:`judge`) by ``model``. With
    ``reranked`` (every question's vector by a reranker, by row), ``model`` is that reranker: each candidate
    pair is re-scored by the cosine of its two reranker vectors and judged by it. Every engine maps this
    over the blocks of a run's plan: in memory, on this machine, or as Ray tasks."""
    scores, ids = corpus.search(queries, query_probes, k)
    if reranked is None:
        return judge(model, corpus, rows, scores, ids, threshold, on)
    return judge(model, reranked, rows, rescored(reranked, rows, ids), ids, threshold, on)


def search_blocks(
    model: Model,
    config: DedupConfig,
    vectors: np.ndarray,
    searched: Plan,
    start: int = 0,
    reranked: np.ndarray | None = None,
) -> Iterator[tuple[int, Edges]]:
    """``(number, edges)`` of each block of ``searched`` from ``start`` on, in this process (one index over every
    question, built once): :func:`block_edges` mapped over the plan's blocks (``model`` the judge: the
    reranker whose vectors are ``reranked`` where one is given)."""
    threshold, corpus = config.threshold_for(model), searched.corpus(vectors)
    for number, rows in searched.blocks(start):
        q = searched.probes_of(rows)
        yield number, block_edges(model, threshold, config.on, searched.k, rows, vectors[rows], q, corpus, reranked)


def text_hash(text: str) -> int:
    """An 8-byte hash of a text: equal texts are found by their hashes, without a dictionary of every text."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def same_pairs(hashes: np.ndarray, get: Callable[[int], str]) -> Iterator[tuple[int, int]]:
    """Pairs ``(first, later)`` of equal strings, found through equal ``hashes`` (a collision is checked)."""
    order = np.argsort(hashes, kind="stable")
    h = hashes[order]
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    ends = np.r_[starts[1:], len(h)]
    for lo, hi in zip(starts[ends - starts > 1], ends[ends - starts > 1]):
        firsts: dict[str, int] = {}
        for i in order[lo:hi]:
            j = firsts.setdefault(get(int(i)), int(i))
            if j != i:
                yield j, int(i)


def same_text(texts: list[str]) -> Edges:
    """Questions of identical text, each joined to the first of its kind (score 1.0)."""
    hashes = np.array([text_hash(t) for t in texts], dtype=np.int64)
    pairs = np.asarray(list(same_pairs(hashes, texts.__getitem__)), dtype=np.int64).reshape(-1, 2)
    return Edges(pairs[:, 0], pairs[:, 1], np.ones(len(pairs), np.float32))


def dedup_vectors(
    vectors: np.ndarray,
    model: Model,
    config: DedupConfig | None = None,
    extra: Edges | None = None,
    reranker: Model | None = None,
    reranked: np.ndarray | None = None,
) -> Clusters:
    """Group questions already encoded as ``vectors (N, d)`` (``extra``: edges known otherwise, such as equal texts).
    With a ``reranker`` and its vectors ``reranked (N, d')`` of the same questions, the reranker judges the
    model's candidates and scores the groups."""
    config = config or DedupConfig()
    judging, judged = (model, vectors) if reranker is None else (reranker, reranked)
    searched = plan(vectors, config.candidates)
    parts = [extra] if extra is not None else []
    parts += [edges for _, edges in search_blocks(judging, config, vectors, searched, reranked=reranked)]
    return group(Edges.join(parts), judged, judging, config)


def dedup(texts: list[str], model: Model, config: DedupConfig | None = None, reranker: Model | None = None) -> Clusters:
    """Encode ``texts`` (by the reranker too, where one is given) and group them into duplicates (see the module
    docstring)."""
    texts = check_questions(texts)
    reranked = None if reranker is None else reranker.encode(texts)  # (N, d') each question once
    return dedup_vectors(model.encode(texts), model, config, same_text(texts), reranker, reranked)
