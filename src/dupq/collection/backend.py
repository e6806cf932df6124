"""What keeps a collection: the interface every backend implements whole, and the filter rule they share.

A backend stores rows ``(id, key, text, metadata JSON)`` with one float32 vector each, and searches the vectors.
:class:`~dupq.collection.collection.Collection` joins a backend and the model (it encodes, judges and builds hits); it
never asks which backend it holds (:class:`~dupq.collection.location.Location` picks it). Three exist: a folder kept by
SQLite and FAISS (:mod:`dupq.collection.folder.backend`), Milvus (:mod:`dupq.collection.milvus.backend`) and Postgres
with pgvector (:mod:`dupq.collection.postgres.backend`).

What every backend guarantees (the collection's promises rest on these):

* :meth:`Backend.add`, :meth:`Backend.remove`, :meth:`Backend.update` and :meth:`Backend.edit`
  are each **one transaction** (for Milvus: one acknowledged request; Milvus's ``edit`` is a read
  and then one): when they return the change is durable
  and seen by every reader, in every process, at its next search; if they raise or the process
  dies first, none of it is applied.
* **Keys make retries idempotent**: adding a stored key with the same question stores nothing
  and answers the stored id (another text raises :class:`~dupq.collection.rows.KeyConflict`); an
  update to what is stored already changes nothing; a key not stored is
  :class:`~dupq.collection.rows.UnknownKey`.
* **Pending questions are left out**: :meth:`Backend.search` answers no row that :data:`HIDDEN`
  matches (a question waiting in the review queue, :mod:`dupq.collection.review`) unless asked
  (``pending=True``); a filter still loses nothing of the others.
* **Reranker vectors follow their rows** (a backend that keeps them, :attr:`Backend.reranks`): a
  question's reranker vector is stored with the digest of the text it encodes
  (:func:`~dupq.collection.rows.text_digest`) in one transaction of its own; a removal drops the
  removed rows' in its transaction, and a vector whose digest is not its row's text's is stale
  (the collection reads it as missing and encodes the text again).
* **A filter loses nothing**: :meth:`Backend.search` with ``where`` answers the ``k`` best of the
  rows whose metadata match (:func:`matches` is the rule, checked against it in the tests),
  however few match.

``where`` is ``{field: [values]}`` (:func:`check_where`): a row matches when, for every field, its metadata's value is
one of the values (JSON scalars compared as Python compares them). A filter's text holds no control character (U+0000 to
U+001F, U+007F to U+009F): SQLite reads a string only up to U+0000, and Milvus's filter expressions take no escape for
them, so they are the caller's one sentence before any store sees them. Typed on a command line, a value that reads as a
number or a boolean is also matched as the text it was typed as (:func:`where_from_text`): metadata from a CSV file is
all text.
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from dupq.collection.rows import PENDING, read_metadata
from dupq.core.errors import DupqError

Row = tuple  # (key or None, text, metadata as JSON text or None)
Where = dict[str, list]  # field -> the values it may hold (any of them)

# The rule of a filter, in one place: check_where enforces it, the service's schema says it with these.
FIELD_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"  # a field name: what every backend can quote safely
FIELD = re.compile(FIELD_PATTERN)
MAX_FIELDS = 32  # fields in one filter (with MAX_VALUES each, within SQLite's 32,766 parameters)
MAX_VALUES = 1_000  # values of one field in a filter
NUMBERS = (-(2**63), 2**63)  # a filter's numbers: lo < x < hi, what SQLite and Milvus hold in 64 bits
MAX_ID = 2**63 - 1  # the largest id a store holds (a page's cursor beyond it is the end)
TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"  # a filter's text: no control character
TEXT = re.compile(TEXT_PATTERN)


def check_where(where) -> Where | None:
    """``where`` (``{field: value or [values]}``) as ``{field: [values]}``, None when empty; a DupqError names what is wrong.

    A field name matches :data:`FIELD_PATTERN`; a value is a string, a boolean or a number within
    :data:`NUMBERS`; a list holds 1 to :data:`MAX_VALUES` of them (any of them matches).
    """
    if not where:
        return None
    if not isinstance(where, dict):
        raise DupqError(f"a filter is an object of field: value, not a {type(where).__name__}.")
    if len(where) > MAX_FIELDS:
        raise DupqError(f"a filter names at most {MAX_FIELDS} fields, not {len(where)}.")
    out = {}
    for field, values in where.items():
        if not isinstance(field, str) or not FIELD.fullmatch(field):
            raise DupqError(
                f"the filter field {field!r} must be letters, digits and _ (at most 64, not starting with a digit)."
            )
        values = values if isinstance(values, list) else [values]
        if not values or len(values) > MAX_VALUES:
            raise DupqError(f"the filter on {field!r} needs 1 to {MAX_VALUES:,} values, got {len(values)}.")
        for v in values:
            if not _filter_value(v):
                raise DupqError(
                    f"the filter on {field!r} takes strings, booleans and numbers strictly within ±2^63, not {v!r}."
                )
            if isinstance(v, str) and not TEXT.fullmatch(v):
                raise DupqError(f"the filter on {field!r} holds a control character ({v!r}); a filter's text may not.")
        out[field] = values
    return out


def where_from_text(pairs: list[tuple[str, str]]) -> Where:
    """A filter of ``(field, value)`` pairs typed as text (``--where FIELD=VALUE``; a field twice: either value).

    A value that reads as a JSON number or boolean matches that number or boolean and the text as
    typed too, so ``priority=1`` finds ``1`` and ``"1"`` (a CSV file's metadata is all text)."""
    import json

    where: dict[str, list] = {}
    for field, value in pairs:
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):  # text, however deeply it nests brackets
            parsed = value
        typed = isinstance(parsed, (bool, int, float)) and _filter_value(parsed)
        where.setdefault(field, []).extend([parsed, value] if typed else [value])
    return where


def _filter_value(v) -> bool:
    if isinstance(v, (bool, str)):
        return True
    return isinstance(v, (int, float)) and NUMBERS[0] < v < NUMBERS[1]  # NaN compares False


def matches(metadata: dict, where: Where | None) -> bool:
    """Whether a row's ``metadata`` passes ``where``: the rule every backend's filter follows."""
    if not where:
        return True
    return all(
        field in metadata and _scalar(metadata[field]) and metadata[field] in values for field, values in where.items()
    )


HIDDEN: Where = {PENDING: [True]}  # the rows a search leaves out unless asked: questions waiting for a moderator


def hidden(metadata: dict) -> bool:
    """Whether a row of ``metadata`` waits in the review queue, and so is left out of searches (:data:`HIDDEN`)."""
    return matches(metadata, HIDDEN)


def _scalar(value) -> bool:
    return isinstance(value, (str, int, float)) and value is not None


def hit_arrays(found: list) -> tuple[np.ndarray, np.ndarray]:
    """``scores (Q, k')`` and ``ids (Q, k')`` (-1: none) of each query's hits ``[(id, score), ...]``, best first."""
    width = max((len(hits) for hits in found), default=0)
    scores = np.zeros((len(found), width), np.float32)
    ids = np.full((len(found), width), -1, np.int64)
    for q, hits in enumerate(found):
        for j, (i, score) in enumerate(hits):
            ids[q, j], scores[q, j] = i, score
    return scores, ids


def in_order(found: dict, ids: list[int], dim: int, where: str) -> np.ndarray:
    """The vectors of ``ids`` from ``found`` (id -> vector), ``(len(ids), dim)`` float32; a DupqError names an id not found."""
    missing = [i for i in ids if i not in found]
    if missing:
        raise DupqError(f"{where} holds no question with id {missing[0]}.")
    return np.array([found[i] for i in ids], dtype=np.float32).reshape(len(ids), dim)


@dataclass(frozen=True)
class IndexStats:
    """What a collection's search index holds, as this process last caught it up: a read-only view."""

    kind: str  # flat, hnsw or ivfpq (IndexConfig.kind)
    vectors: int  # vectors in the index: removed questions' too, until the graph is built again without them
    removed: int  # of those, removed questions' (every search filters them out)
    generation: int  # how many times the graph was built again without its removed questions (0: never)
    exact: bool  # whether search scores are exact inner products
    rebuilding: bool = False  # a thread of this process is building the graph again now


class Backend(ABC):
    """Rows and their vectors by id, searched by inner product. Thread-safe; the collection serialises writes."""

    manifest: dict  # the collection's manifest (dupq.collection.manifest)
    exact: bool  # whether search scores are exact inner products
    cache_error: str | None = None  # why a cache could not be written (the rows are stored all the same)
    reranks: bool = False  # whether it keeps reranker vectors (reranked, keep_reranked): a folder does

    @classmethod
    @abstractmethod
    def build(cls, location, manifest: dict, chunks: Iterator[tuple]) -> Backend:
        """A new collection at ``location`` of ``chunks`` ``(start, texts, keys, metadata, vectors)``, visible only when complete."""

    @classmethod
    @abstractmethod
    def open(cls, location) -> Backend:
        """The collection at ``location``, its manifest checked; a DupqError names what is wrong."""

    @classmethod
    def holds(cls, location) -> bool:
        """Whether ``location`` looks like a collection of this backend without opening it (default: yes, open says)."""
        return True

    @abstractmethod
    def count(self) -> int:
        """How many questions are stored (every committed change, this process's or another's)."""

    @abstractmethod
    def add(self, texts: list[str], keys: list, metadata: list, vectors: np.ndarray) -> list[int]:
        """Store the questions (metadata as JSON text) and their ``vectors (M, d)`` in one transaction; their ids."""

    @abstractmethod
    def remove(self, keys: list[str]) -> list[int]:
        """Remove the questions of ``keys`` in one transaction (all of them, or none and UnknownKey); their ids."""

    @abstractmethod
    def update(self, key: str, text: str | None, metadata: str | None, vector: np.ndarray | None) -> int:
        """Give ``key``'s question a new ``text`` (with its ``vector (d,)``) and/or ``metadata`` (JSON text;
        None: keep), in one transaction; its id afterwards (a new text may give a new id)."""

    @abstractmethod
    def edit(self, key: str, change: Callable[[str | None], str | None], others: list[str]) -> tuple[int, str | None]:
        """Read ``key``'s metadata (JSON text), store ``change(it)`` in its place and check that ``others`` are
        stored, all in one transaction (a read-modify-write no other writer can interleave with); its id and
        new metadata. UnknownKey, and nothing changed, when ``key`` or one of ``others`` is not stored."""

    @abstractmethod
    def find(self, keys: list[str]) -> dict[str, tuple[int, str, str | None]]:
        """``{key: (id, text, metadata JSON)}`` of the stored ``keys`` (missing ones left out)."""

    @abstractmethod
    def search(
        self, vectors: np.ndarray, k: int, where: Where | None = None, pending: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``scores (Q, k')`` and ``ids (Q, k')`` (-1: none) of the stored rows that match ``where``, best first;
        the rows :data:`HIDDEN` matches are left out unless ``pending``."""

    @abstractmethod
    def rows(self, ids: list[int]) -> dict[int, Row]:
        """``{id: (key, text, metadata JSON)}`` of the stored ``ids`` (missing ones left out)."""

    @abstractmethod
    def vectors(self, ids) -> np.ndarray:
        """The stored vectors of ``ids``, ``(len(ids), d)`` float32 (a pair head reads the hits')."""

    @abstractmethod
    def all_vectors(self) -> np.ndarray:
        """Every stored vector, ``(N, d)`` float32, in id order."""

    @abstractmethod
    def all_rows(self) -> list[tuple[int, Row]]:
        """Every stored ``(id, (key, text, metadata JSON))``, in id order."""

    def page(self, after: int, limit: int, where: Where | None = None) -> list[tuple[int, Row]]:
        """Up to ``limit`` stored ``(id, (key, text, metadata JSON))`` of ids above ``after`` whose metadata match
        ``where``, in id order (by default filtered from :meth:`all_rows`; a store that can, answers in one query)."""
        out = []
        for i, row in self.all_rows():
            if i > after and matches(read_metadata(row[2])[0], where):
                out.append((i, row))
                if len(out) == limit:
                    break
        return out

    def rows_naming(self, field: str) -> list[tuple[int, Row]]:
        """Every stored ``(id, (key, text, metadata JSON))`` whose metadata has ``field``, in id order (by default
        a scan of :meth:`all_rows`; a store that can find them faster says so)."""
        return [(i, row) for i, row in self.all_rows() if field in read_metadata(row[2])[0]]

    def reranked(self, ids: list[int], dim: int) -> dict[int, tuple[str, np.ndarray]]:
        """``{id: (digest of the text it encodes, reranker vector (dim,) float32)}`` of the ``ids`` that have one stored."""
        raise DupqError(f"a collection kept by {type(self).__name__} keeps no reranker vectors yet.")

    def keep_reranked(self, ids: list[int], digests: list[str], vectors: np.ndarray) -> None:
        """Store the reranker ``vectors (M, d')`` of ``ids`` with their texts' digests, in one transaction, replacing
        any stored; an id no longer stored is skipped (removed meanwhile)."""
        raise DupqError(f"a collection kept by {type(self).__name__} keeps no reranker vectors yet.")

    def indexed(self) -> int:
        """How many vectors the search index holds (by default the stored questions: the store searches itself)."""
        return self.count()

    def index_stats(self) -> IndexStats:
        """The index's kind and size (by default: the stored questions, none removed, never rebuilt)."""
        return IndexStats(self.manifest["index"]["kind"], self.indexed(), 0, 0, self.exact)

    def writers_held(self) -> contextlib.AbstractContextManager:
        """A context in which the writers of other processes wait (a copy's last round reads with it held);
        by default none is held (Milvus has no such lock, and its last round is not held)."""
        return contextlib.nullcontext()

    def refreshed(self) -> float | None:
        """When (``time.time()``) this process's index last caught up with the store; None when it never lags."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Write what a cache lacks and release connections; closing twice is harmless."""
