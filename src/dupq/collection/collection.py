"""A persistent, searchable question collection: a backend that keeps the questions, and the model.

A collection joins a **backend** (:class:`~dupq.collection.backend.Backend`, whose promises it rests on: each write one
transaction, keys make retries idempotent, a filter loses nothing) and the model that encodes the questions. Where it
lives picks the backend (:class:`~dupq.collection.location.Location`); nothing here asks which.

**Crash safety.** When a write returns, the change is durable and every reader sees it at its next search; a ``kill -9``
before the commit leaves none of it. After the commit nothing fails the call: an index that could not follow catches up
from the stored embeddings on the next read, so a caller never sees an error for an applied change. ``build`` writes
under a hidden name and renames at the end.

**Keys** (the caller's id: a qid, a ticket number, an ``Idempotency-Key``) ride on every hit; a retried add or update
stores nothing. Moderators' decisions and the review queue (``add(..., pending=True)``) are
:class:`~dupq.collection.moderation.Moderated`'s methods. **A reranker** (``build(..., rerank=MODEL)``, in the manifest)
orders and judges each search's best candidates (:mod:`dupq.collection.rerank`); ``rerank=False`` skips it. **Scoped
search**: ``search(..., where={"product": "mail", "status": ["open", "solved"]})``.

>>> coll = Collection.build("runs/faq", ["How do I learn Python?"], Model.load("runs/model"))  # doctest: +SKIP
>>> coll.search(["What is the best way to learn Python?"], k=1)[0][0].text                   # doctest: +SKIP
'How do I learn Python?'
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import numpy as np

from dupq.collection import review
from dupq.collection.backend import MAX_ID, Backend, IndexStats, check_where, hidden, matches
from dupq.collection.building import build_inputs, encoded_chunks
from dupq.collection.calibration import KeptCalibration, judge_hits
from dupq.collection.hits import Hit, hits_of_queries, without_ids, without_removed_canonicals
from dupq.collection.location import Location
from dupq.collection.manifest import model_for, new_manifest, reranker_for
from dupq.collection.moderation import Moderated
from dupq.collection.rerank import RERANK_BATCH, Reranking, joined, rerank_candidates
from dupq.collection.rows import KeyConflict, StoreFailure, UnknownKey, check_keys, check_metadata, read_metadata
from dupq.core.errors import DupqError
from dupq.data.questions import check_questions
from dupq.index.vectors import IndexConfig
from dupq.modeling.model import Model
from dupq.modeling.verdict import clip_cosines, search_margins, search_tiers

log = logging.getLogger(__name__)

__all__ = ["Collection", "Hit", "IndexStats", "KeyConflict", "Location", "StoreFailure", "UnknownKey"]


class Collection(Moderated):
    """Stored questions, their embeddings and a search index, and the model that encodes them.

    Build one with :meth:`build`, reopen it with :meth:`open`; ``location`` is a folder or a Milvus
    URI. Searches may run in several threads at once; writes are serialised.
    """

    def __init__(self, location: Location, model: Model, backend: Backend, reranker: Model | None = None):
        self.location = location
        self.folder = location.path  # a folder collection's folder, else None
        self.model = model
        self.reranker = reranker  # the model that orders a search's candidates (None: the model's order stands)
        self.manifest = backend.manifest
        self._backend = backend
        self._write_lock = threading.Lock()
        self._reranking = None if reranker is None else Reranking(reranker, backend, self._writing, str(location))
        self._closed = False
        self._damaged: set[int] = set()  # questions whose stored metadata was found damaged (warned once)
        # the collection's own search calibration, fitted on its decisions, read again when its file changes
        self._kept = KeptCalibration(self.folder, model.fingerprint())

    # Building and opening.

    @classmethod
    def build(
        cls,
        location,
        texts: list[str],
        model: Model,
        *,
        keys: list[str | None] | None = None,
        metadata: list[dict] | None = None,
        index: str | IndexConfig = "flat",
        stored: bool = False,
        rerank: Model | None = None,
        rerank_now: bool = False,
    ) -> Collection:
        """Encode ``texts`` and store them as a new collection at ``location`` (a folder that must not hold one, or a Milvus URI).

        ``keys`` are the caller's unique ids for the questions (None for a question without one);
        ``index`` is ``"flat"`` (exact), ``"hnsw"`` (approximate) or ``"ivfpq"`` (compressed, re-ranked
        exactly; at least :func:`~dupq.index.vectors.training_size` questions), or an :class:`IndexConfig`.
        ``stored``: the texts are another collection's questions (a re-encoding), so one stored before
        the 1,000-character rule is kept whole rather than refused; the other rules of a question hold.
        ``rerank``: a model that orders every search's candidates (recorded in the manifest); its vectors of
        the questions are computed now with ``rerank_now``, else each at the question's first search.
        """
        location = Location.parse(location)
        texts, keys, meta, config = build_inputs(texts, keys, metadata, index, stored)
        if rerank is not None and not location.backend().reranks:
            raise DupqError(
                f"{location} cannot keep a reranker's vectors yet; build a collection with one in a folder."
            )
        manifest = new_manifest(model, config, rerank)
        backend = location.backend().build(location, manifest, encoded_chunks(texts, keys, meta, model))
        coll = cls(location, model, backend, rerank)
        if rerank is not None and rerank_now:
            coll.rerank_all()
        return coll

    @classmethod
    def open(cls, location, model: Model | None = None, rerank: Model | None = None) -> Collection:
        """Open a collection (a folder or a Milvus URI); with no ``model``, load the one it was built with
        (and its reranker, with no ``rerank``).

        A model whose fingerprint differs from the recorded one is refused: its vectors would
        not be comparable with the stored ones (a reranker's likewise).
        """
        location = Location.parse(location)
        backend = location.backend().open(location)
        try:
            model = model_for(backend.manifest, model, location)
            reranker = reranker_for(backend.manifest, rerank, location)
        except BaseException:
            backend.close()
            raise
        return cls(location, model, backend, reranker)

    # Reading it.

    @property
    def threshold(self) -> float:
        """The threshold of a hit's verdict: its duplicate tier's."""
        return self.tiers["duplicate"]

    @property
    def tiers(self) -> dict:
        """The thresholds of a hit's tiers, ``{"suggest", "duplicate", "on"}`` (:func:`dupq.modeling.verdict.search_tiers`)."""
        return search_tiers(self.model, self.calibration)

    @property
    def calibration(self) -> dict | None:
        """The collection's own search calibration, fitted on its decisions (None: the model's judges its hits)."""
        return self._kept.current()[0]

    @property
    def calibration_scopes(self) -> dict | None:
        """Its fits per scope, ``{"field", "fits": {value: calibration}}`` (None: the collection's judges every hit)."""
        return self._kept.current()[1]

    def calibration_info(self) -> dict:
        """What judges this collection's hits (:meth:`~dupq.collection.calibration.KeptCalibration.info`)."""
        return self._kept.info(self.model.judge.search_calibration)

    def use_calibration(self, calibration: dict, scopes: dict | None = None) -> None:
        """Keep ``calibration`` (a search calibration fitted on this collection's decisions) and its ``scopes`` as
        the collection's own, written atomically; every process's searches use it from their next one."""
        with self._writing():
            self._kept.keep(calibration, scopes, self.location)

    def tiers_of(self, reranked: bool) -> dict:
        """:attr:`tiers` of a search's hits: the reranker's where it ordered and judged them."""
        return search_tiers(self.reranker) if reranked else self.tiers

    @property
    def cache_error(self) -> str | None:
        """Why the index cache could not be written (the questions are stored all the same), or None."""
        return self._backend.cache_error

    def refreshed(self) -> float | None:
        """When this process's index last caught up with the store (``time.time()``); None for a backend that never lags."""
        return self._backend.refreshed()

    def __len__(self) -> int:
        return self._backend.count()

    def writers_held(self):
        """A context in which other processes' writers to this collection wait (for a copy's last round)."""
        self._check_open()
        return self._backend.writers_held()

    @property
    def indexed(self) -> int:
        """How many vectors the search index holds (removed questions' too, until it is built again)."""
        self._check_open()
        return self._backend.indexed()

    def index_stats(self) -> IndexStats:
        """The search index's kind, its vectors, the removed questions among them and how often it was built again
        (:class:`~dupq.collection.backend.IndexStats`), as this process last caught it up with the store."""
        self._check_open()
        return self._backend.index_stats()

    def stored_vectors(self, ids=None) -> np.ndarray:
        """The stored embeddings, read from the store, not the index: of ``ids`` ``(len(ids), d)`` float32, or
        (None) of every stored question ``(N, d)`` in id order."""
        self._check_open()
        if ids is None:
            return self._backend.all_vectors()
        return self._backend.vectors(np.asarray(ids, dtype=np.int64))

    def stored_rows(self) -> list[tuple[int, str | None, str, dict | None]]:
        """Every stored question as ``(id, key, text, metadata)``, in id order: what a build with another model takes."""
        self._check_open()
        return [
            (i, key, text, read_metadata(meta)[0] if meta else None)
            for i, (key, text, meta) in self._backend.all_rows()
        ]

    def nearest(self, vectors: np.ndarray, k: int = 10, where: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` of the index's ``k`` nearest stored vectors to each row of ``vectors``: no text, no judging."""
        self._check_open()
        return self._backend.search(np.asarray(vectors, dtype=np.float32), k, check_where(where))

    def page(
        self, after: int | None = None, limit: int = 100, where: dict | None = None
    ) -> tuple[list[tuple[int, str | None, str, dict]], int | None]:
        """A page of the stored questions in id order: up to ``limit`` ``(id, key, text, metadata)`` of ids above
        ``after`` (None: from the first) whose metadata match ``where`` (as in :meth:`search`), and the cursor of
        the next page (the last id given; None when no question is left). Pages that follow one another's
        cursor give every question once; a question whose text changes meanwhile moves to the end (a new id).
        """
        self._check_open()
        where = check_where(where)
        if limit < 1:
            raise DupqError(f"a page holds at least 1 question, got {limit}.")
        rows = self._backend.page(-1 if after is None else min(after, MAX_ID), limit + 1, where)
        out = [(i, key, text, read_metadata(meta)[0]) for i, (key, text, meta) in rows[:limit]]
        return out, (out[-1][0] if len(rows) > limit else None)

    def search(
        self,
        queries: list[str],
        k: int = 10,
        where: dict | None = None,
        *,
        rerank: bool | None = None,
        candidates: int | None = None,
        exclude: list[str] | None = None,
    ) -> list[list[Hit]]:
        """The ``k`` stored questions most similar to each query, best first (every committed change included).

        ``where`` (``{field: value or [values]}``) keeps the questions whose metadata match: each field equal to its
        value (or to one of its values). With a reranker (``rerank`` None or True) the model's ``candidates`` best
        (default :func:`~dupq.collection.rerank.rerank_candidates`, at least ``k``) are ordered and judged by the
        reranker; ``rerank=False`` keeps the model's order and verdicts. ``exclude``: keys of questions left out (a
        ticket searching for its own duplicates leaves itself out); the ``k`` best of the rest.
        """
        self._check_open()
        queries = check_questions(queries, "query")
        where = check_where(where)
        exclude = [exclude] if isinstance(exclude, str) else list(exclude or [])
        left_out = set(check_keys(exclude, len(exclude)))
        if k < 1:
            raise DupqError(f"k must be at least 1, got {k}.")
        reranking = self.reranks(rerank)
        if candidates is not None and candidates < 1:
            raise DupqError(f"candidates must be at least 1, got {candidates}.")
        if not queries:
            return []
        vectors = self.model.encode(queries)  # (Q, d)
        wanted = max(k, 2) + len(left_out)  # a runner-up for the top hit; a key left out is at most one hit of a query
        depth = max(wanted, candidates or rerank_candidates(self.reranker)) if reranking else wanted
        scores, ids = self._backend.search(vectors, depth, where)  # (Q, depth'), (Q, depth')
        judge, hit_vectors, rows = self.model, self._backend.vectors, None
        if reranking:
            vectors = self.reranker.encode(queries, RERANK_BATCH)  # (Q, d') the queries as the reranker sees them
            ids = self._and_the_rerankers_nearest(vectors, ids, depth, where)  # (Q, C')
            scores, ids, rows, hit_vectors = self._reranking.reordered(vectors, ids, wanted)  # (Q, k'), (Q, k')
            judge = self.reranker
        if left_out:  # before the margins: a ticket's own text must not stand in front of its duplicates
            scores, ids = without_ids(
                scores, ids, [found[0] for found in self._backend.find(sorted(left_out)).values()]
            )
        scores = clip_cosines(scores)  # (Q, k')
        found = ids >= 0  # (Q, k') FAISS pads with -1 where it found fewer than k
        margins = search_margins(scores, found)  # (Q, k') how far each hit stands out from the others
        scores, ids, found, margins = scores[:, :k], ids[:, :k], found[:, :k], margins[:, :k]
        owner = np.repeat(np.arange(len(queries)), found.sum(1))  # (H,) the query of each hit
        hit_scores, hit_ids = scores[found], ids[found]  # (H,) every query's hits, query after query
        rows = rows if rows is not None else self._backend.rows(hit_ids.tolist())
        # every hit of every query judged in one call (one pass of a pair head for a batch of queries)
        own, scopes = (None, None) if reranking else self._kept.current()
        judged = judge_hits(
            judge,
            hit_scores,
            margins[found],
            lambda: (vectors[owner], hit_vectors(hit_ids)),
            own,
            scopes,
            lambda: [read_metadata(rows[i][2])[0] if i in rows else {} for i in hit_ids.tolist()],
        )
        hits = hits_of_queries(found.sum(1), hit_scores, hit_ids, judged, rows, reranking, self._damage)
        return without_removed_canonicals(hits, self._backend.find)

    def _and_the_rerankers_nearest(self, vectors: np.ndarray, ids: np.ndarray, depth: int, where) -> np.ndarray:
        """The model's candidates ``ids (Q, C)`` and, after them, the reranker's own ``depth`` nearest of each query
        ``vectors (Q, d')`` among the questions whose reranker vector is stored and that a search may answer
        (matching ``where``, not waiting for review): the nearest read four times deeper until each query has
        ``depth`` of those, or every stored vector has been read."""
        admitted = set(ids[ids >= 0].tolist())  # the model's own: the backend's search applied the same rules
        checked, width = set(admitted), depth
        while True:
            extra = self._reranking.nearest(vectors, width)  # (Q, E)
            if extra.size == 0:  # nothing stored yet
                return ids
            new = set(extra.ravel().tolist()) - checked
            for i, (_, _, meta) in self._backend.rows(sorted(new)).items():
                metadata = read_metadata(meta)[0]
                if not hidden(metadata) and matches(metadata, where):
                    admitted.add(i)
            checked |= new
            enough = all(sum(i in admitted for i in row) >= depth for row in extra.tolist())
            if enough or extra.shape[1] < width:
                return joined(ids, extra, admitted, depth)
            width *= 4

    def reranks(self, rerank: bool | None = None) -> bool:
        """Whether a search with ``rerank`` (None: where the collection has a reranker) is reranked; True without
        a reranker is refused in one sentence."""
        if rerank and self.reranker is None:
            raise DupqError(f"{self.location} has no reranker; build a collection with one (--rerank MODEL).")
        return self.reranker is not None if rerank is None else bool(rerank)

    def load_reranker(self) -> None:
        """Load the reranker's network and read its stored vectors now, not in a first search's time (a server does
        as it starts); nothing without a reranker."""
        self._check_open()
        if self._reranking is not None:
            self._reranking.load()

    def rerank_all(self) -> int:
        """Encode with the reranker every stored question whose reranker vector is not stored yet; how many were."""
        self._check_open()
        self.reranks(True)
        return self._reranking.encode_all()

    def stored_reranker_vectors(self) -> dict[int, np.ndarray]:
        """The reranker vectors stored now, ``{id: (d',)}``, of the stored questions whose text they encode (a stale
        one is left out); nothing is encoded."""
        self._check_open()
        return {} if self._reranking is None else self._reranking.stored()

    @property
    def reranker_encoded(self) -> int:
        """How many questions this process has encoded with the reranker (each once, then stored)."""
        return 0 if self._reranking is None else self._reranking.encoded

    def _damage(self, i: int, what: str) -> None:
        """Warn of a damaged row once, not on every search that finds it (the search goes on without it)."""
        if i not in self._damaged:
            self._damaged.add(i)
            log.warning("%s (%s).", what, self.location)

    def get(self, key: str) -> tuple[int, str, dict]:
        """``(id, text, metadata)`` of the question stored under ``key``, or :class:`UnknownKey`."""
        self._check_open()
        found = self._backend.find([key]).get(key)
        if found is None:
            raise UnknownKey(f"no question with the key {key!r} is stored in {self.location}.")
        i, text, meta = found
        return i, text, read_metadata(meta)[0]

    # Changing it.

    def add(
        self,
        texts: list[str],
        metadata: list[dict] | None = None,
        keys: list[str | None] | None = None,
        *,
        pending: bool | list[bool] = False,
    ) -> list[int]:
        """Store ``texts`` (and their metadata) in one transaction; returns their ids.

        When this returns, the questions are on disk and searchable; if the process dies before, none of them is stored.
        A question whose ``key`` is stored already is not stored again: its stored id is returned (the same key with
        another text or metadata raises :class:`KeyConflict`). ``pending`` (one for all, or one per question): they wait
        in the review queue, and no search finds them until a moderator decides (their metadata holds ``pending: true``;
        each needs a key, which the decision names).
        """
        self._check_open()
        texts = check_questions(texts)
        if pending:
            metadata = review.queued(texts, metadata, keys, pending)
        meta = check_metadata(metadata, len(texts))
        keys = check_keys(keys, len(texts))
        if not texts:
            return []
        vectors = self.model.encode(texts)  # (M, d)
        with self._writing():
            return self._backend.add(texts, keys, meta, vectors)

    def remove(self, keys: list[str]) -> list[int]:
        """Remove the questions of ``keys`` in one transaction; their ids. A key not stored removes nothing
        and raises :class:`UnknownKey`; once this returns no search finds them, in any process."""
        self._check_open()
        keys = [keys] if isinstance(keys, str) else list(keys)
        keys = check_keys(keys, len(keys))
        if not keys or None in keys:
            raise DupqError("give the keys of the questions to remove.")
        with self._writing():
            return self._backend.remove(list(dict.fromkeys(keys)))

    def update(self, key: str, text: str | None = None, metadata: dict | None = None) -> int:
        """Give the question of ``key`` a new ``text`` and/or new ``metadata`` (replacing the stored
        metadata) in one transaction; its id afterwards (a new text may give it a new id). The old
        text is found no more; an update to what is stored already writes nothing."""
        self._check_open()
        check_keys([key], 1)
        if text is None and metadata is None:
            raise DupqError("give a new text or new metadata for the question.")
        meta = None if metadata is None else (check_metadata([metadata], 1)[0] or "")
        vector = None
        if text is not None:
            text = check_questions([text])[0]
            vector = self.model.encode([text])[0]  # (d,)
        with self._writing():
            return self._backend.update(key, text, meta, vector)

    def close(self) -> None:
        """Write the index cache if many rows are missing from it, and release the backend."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self._backend.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """The collection's write lock held, once it is checked open (a write of the backend goes inside)."""
        with self._write_lock:
            self._check_open()
            yield

    def _check_open(self) -> None:
        if self._closed:
            raise StoreFailure(f"the collection {self.location} is closed.", "unreachable")

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
