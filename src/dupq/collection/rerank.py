"""A collection's reranker: the model that orders a search's candidates, and its stored vectors of the questions.

Retrieve and rerank (sentence-transformers' retrieve-and-rerank; SemDeDup and NeMo Curator re-score
their nearest-neighbour candidates the same way): the collection's model finds each query's
:data:`RERANK_CANDIDATES` best stored questions fast, and a slower, better model orders them by
its own cosine and judges them. The reranker's vector of a stored question is encoded once, the
first time the question is a candidate (or for all of them at a build with ``rerank_now``), and
kept by the backend with the digest of the text it encodes
(:meth:`~dupq.collection.backend.Backend.keep_reranked`). A vector whose digest is not its
question's text's is stale and is encoded again, so what is stored never disagrees with the text,
whatever was killed when.

The stored vectors are candidates too (hybrid candidate generation, as sentence-transformers'
retrieve-and-rerank joins its retrievers' candidates before re-scoring them): a search also takes
the reranker's own nearest questions among those whose vector is stored (:meth:`Reranking.nearest`,
exact, over the vectors held in memory). A question the fast model ranks too low is found all the
same once its vector is stored, so a collection's searches come to equal the reranker's own over
every question as its vectors fill in, and equal it at once after ``rerank_now``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import numpy as np

from dupq.collection.backend import Backend
from dupq.collection.rows import StoreFailure, text_digest
from dupq.index.vectors import search
from dupq.modeling.model import Model

log = logging.getLogger(__name__)

RERANK_CANDIDATES = 100  # the model's best questions a reranker without its own number orders (the named ones record
# theirs, dupq-lab rerank-k's choice on the help-desk dev half: 200 for both)
RERANK_CHUNK = 4_096  # questions encoded by the reranker and stored per transaction (encode_all)
RERANK_BATCH = 16  # texts per forward pass of the reranker: sorted by length, a small batch pads little (a first
# search's 100 candidates in one batch of 128 padded to the longest: 2x the CPU of batches of 16, dupq-lab rerank-cost)


def rerank_candidates(reranker: Model) -> int:
    """How many of the fast model's best ``reranker`` orders when a search does not say: the number its search
    calibration records (chosen for it on the help-desk dev half, as the named models' are), else
    :data:`RERANK_CANDIDATES`."""
    return int((reranker.judge.search_calibration or {}).get("candidates") or RERANK_CANDIDATES)


class HeldVectors:
    """Reranker vectors held in memory for the reranker's own search: ``(n, d')`` rows and the id of each, a row
    added for a new id and overwritten for a known one. Not thread-safe: :class:`Reranking` holds its lock."""

    def __init__(self, dim: int):
        self.matrix = np.zeros((0, dim), dtype=np.float32)  # (room, d'), the first ``size`` rows held
        self.ids = np.zeros(0, dtype=np.int64)  # (room,)
        self.row: dict[int, int] = {}
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def put(self, ids: list[int], vectors: np.ndarray) -> None:
        """Hold ``vectors (M, d')`` of ``ids``."""
        for i, v in zip(ids, vectors):
            at = self.row.get(i)
            if at is None:
                at = self.row[i] = self.size
                if at == len(self.ids):  # full: twice the room (amortised O(1) per vector)
                    room = max(1_024, 2 * len(self.ids))
                    self.matrix = np.concatenate([self.matrix, np.zeros((room - at, self.matrix.shape[1]), np.float32)])
                    self.ids = np.concatenate([self.ids, np.full(room - at, -1, np.int64)])
                self.ids[at] = i
                self.size += 1
            self.matrix[at] = v

    def view(self) -> HeldVectors:
        """The rows held now, sharing their memory (a later put may write a row in it, or grow new arrays)."""
        out = HeldVectors(self.matrix.shape[1])
        out.matrix, out.ids, out.size = self.matrix[: self.size], self.ids[: self.size], self.size
        return out

    def nearest(self, queries: np.ndarray, k: int) -> np.ndarray:
        """``(Q, k')`` ids of the held vectors nearest each of ``queries (Q, d')`` by inner product, best first."""
        if self.size == 0:
            return np.zeros((len(queries), 0), dtype=np.int64)
        return self.ids[search(queries, self.matrix[: self.size], min(k, self.size))[1]]


def joined(ids: np.ndarray, extra: np.ndarray, admitted: set[int], limit: int) -> np.ndarray:
    """``(Q, C')`` each query's candidates ``ids (Q, C)`` (-1: none), then the first ``limit`` of ``extra (Q, E)``
    in ``admitted``, those it lacks, in their order; -1 pads.

    >>> joined(np.array([[3, 1, -1]]), np.array([[1, 7, 9, 8]]), {1, 7, 8}, 2).tolist()
    [[3, 1, 7]]
    """
    rows = []
    for mine, theirs in zip(ids.tolist(), extra.tolist()):
        row = [i for i in mine if i >= 0]
        seen = set(row)
        for i in [i for i in theirs if i in admitted][:limit]:
            if i not in seen:
                seen.add(i)
                row.append(i)
        rows.append(row)
    out = np.full((len(rows), max(map(len, rows), default=0)), -1, dtype=np.int64)
    for q, row in enumerate(rows):
        out[q, : len(row)] = row
    return out


class Reranking:
    """A reranker and the vectors of it a backend stores. Thread-safe: one thread encodes what is missing."""

    def __init__(
        self, model: Model, backend: Backend, writing: Callable[[], contextlib.AbstractContextManager], where: str
    ):
        self.model = model
        self.encoded = 0  # questions this process encoded with the reranker (each once)
        self._backend, self._writing, self.where = backend, writing, where
        self._lock = threading.Lock()
        self._held: HeldVectors | None = None  # the stored vectors, read at the first nearest(), then kept in step

    def nearest(self, queries: np.ndarray, k: int) -> np.ndarray:
        """``(Q, k')`` ids of the stored questions whose stored vectors are nearest each of ``queries (Q, d')``, best
        first: those stored when this process first asked and those it has stored since. An id may since have been
        removed or its text changed: :meth:`reordered` reads the rows and scores what is there now."""
        with self._lock:  # the rows held now; the search runs outside the lock (a row written meanwhile only
            held = self._read_held().view()  # changes which candidates are found: reordered() scores what is stored)
        return held.nearest(queries, k)

    def load(self) -> None:
        """Load the reranker's network (a transformer's loads at its first encode) and read the stored vectors."""
        self.model.encode(["dupq"])
        with self._lock:
            self._read_held()

    def _read_held(self) -> HeldVectors:
        """The held vectors, read from the backend the first time (the caller holds the lock)."""
        if self._held is None:
            held = HeldVectors(self.model.out_dim)
            stored = self.stored()
            held.put(list(stored), list(stored.values()))
            self._held = held
        return self._held

    def reordered(self, queries: np.ndarray, ids: np.ndarray, k: int) -> tuple:
        """The candidates ``ids (Q, C)`` (-1: none) ordered by the reranker's cosine with ``queries (Q, d')``, the ``k``
        best of each: ``scores (Q, k)``, ``ids (Q, k)`` (-1: none), the rows read and a function of hit ids giving
        their reranker vectors ``(H, d')`` (a pair head reads them). A tie keeps the model's order."""
        rows = self._backend.rows(ids[ids >= 0].tolist())
        table = self.vectors(rows)
        out_scores = np.zeros((len(ids), k), dtype=np.float32)
        out_ids = np.full((len(ids), k), -1, dtype=np.int64)
        for q, row in enumerate(ids.tolist()):
            kept = [i for i in row if i in table]  # a question removed meanwhile (or damaged) is no candidate
            if not kept:
                continue
            cosines = np.stack([table[i] for i in kept]) @ queries[q]  # (C,)
            order = np.argsort(-cosines, kind="stable")[:k]  # (k',)
            out_scores[q, : len(order)], out_ids[q, : len(order)] = cosines[order], np.asarray(kept)[order]
        width = self.model.out_dim

        def vectors_of(hits: np.ndarray) -> np.ndarray:  # (H, d')
            return np.array([table[i] for i in hits.tolist()], np.float32).reshape(len(hits), width)

        return out_scores, out_ids, rows, vectors_of

    def vectors(self, rows: dict) -> dict[int, np.ndarray]:
        """The reranker's vector ``(d',)`` of each row (``{id: (key, text, metadata)}``; damaged texts left out): the
        stored one where its digest is the text's, else encoded now and stored, each question once."""
        texts = {i: row[1] for i, row in rows.items() if isinstance(row[1], str)}
        digests = {i: text_digest(text) for i, text in texts.items()}

        def stored(ids: list[int]) -> dict[int, np.ndarray]:
            found = self._backend.reranked(ids, self.model.out_dim)
            return {i: v for i, (digest, v) in found.items() if digest == digests[i]}  # another digest: stale

        table = stored(list(texts))
        if len(table) < len(texts):
            with self._lock:  # one thread encodes what is missing; the others find it stored
                table.update(stored([i for i in texts if i not in table]))
                missing = [i for i in texts if i not in table]
                if missing:
                    vectors = self.model.encode([texts[i] for i in missing], RERANK_BATCH)  # (M, d')
                    self.encoded += len(missing)
                    table.update(zip(missing, vectors))
                    self._keep(missing, [digests[i] for i in missing], vectors)
        return table

    def _keep(self, ids: list[int], digests: list[str], vectors: np.ndarray) -> None:
        """Store reranker vectors; a store that refuses (read-only, full) only means they are encoded again next time.
        Held for :meth:`nearest` either way (the caller holds the lock)."""
        if self._held is not None:
            self._held.put(ids, vectors)
        try:
            with self._writing():
                self._backend.keep_reranked(ids, digests, vectors)
        except StoreFailure as e:
            log.warning(
                "the reranker's vectors could not be stored in %s (%s); they are encoded again next time.",
                self.where,
                e,
            )

    def encode_all(self) -> int:
        """Encode every stored question whose reranker vector is not stored yet; how many were."""
        before, every = self.encoded, self._backend.all_rows()
        for lo in range(0, len(every), RERANK_CHUNK):
            self.vectors(dict(every[lo : lo + RERANK_CHUNK]))
        return self.encoded - before

    def stored(self) -> dict[int, np.ndarray]:
        """The stored vectors ``{id: (d',)}`` of the stored questions whose text they encode (stale ones left out)."""
        texts = {i: row[1] for i, row in self._backend.all_rows()}
        found = self._backend.reranked(list(texts), self.model.out_dim)
        return {
            i: v for i, (digest, v) in found.items() if isinstance(texts[i], str) and digest == text_digest(texts[i])
        }

    def adopt(self, by_digest: dict[str, np.ndarray]) -> int:
        """Store, for each stored question whose text's digest is in ``by_digest``, that reranker vector (a
        re-encoding keeps the reranker's work); how many were stored."""
        every = self._backend.all_rows()
        kept = 0
        for lo in range(0, len(every), RERANK_CHUNK):
            part = [(i, text_digest(row[1])) for i, row in every[lo : lo + RERANK_CHUNK] if isinstance(row[1], str)]
            part = [(i, d) for i, d in part if d in by_digest]
            if part:
                ids, digests = map(list, zip(*part))
                with self._lock:
                    self._keep(ids, digests, np.stack([by_digest[d] for d in digests]))
                kept += len(part)
        return kept
