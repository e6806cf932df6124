"""What a stored row may hold, checked on the way in and on the way out, and how a store fails.

Every backend takes its rows through :func:`check_metadata` and :func:`check_keys`, gives ids by the key rule
(:func:`place`), reads metadata back through :func:`read_metadata`, and reports its own failures as
:class:`StoreFailure`, whose ``reason`` the service turns into an HTTP status.

Reserved metadata fields (:func:`decision_problem` is their rule): ``duplicate_of`` (one key), ``not_duplicate_of`` (a
list of keys), ``judged`` (``{key: digest}`` of the two texts each decision was made on, :func:`judged_digest`),
``decision_changes`` (each decision changed, from what and when), ``pending`` (waiting for a moderator: out of searches)
and ``reviewed`` (the review queue's decision). Metadata holds no U+0000: SQLite's ``json_extract`` stops at it, so
``"acme\\u0000evil"`` would pass the filter ``"acme"``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator

from dupq.core.errors import DupqError
from dupq.core.nesting import MAX_DEPTH, json_depth, nesting
from dupq.data.questions import check_key, is_key

PARAMETERS = 900  # ids or keys sent in one statement or request (SQLite's limit is 999 in old builds)
# The metadata fields of moderators' decisions: the canonical question's key, keys judged distinct, what was judged.
DUPLICATE_OF, NOT_DUPLICATE_OF, JUDGED = "duplicate_of", "not_duplicate_of", "judged"
CHANGES = "decision_changes"  # the decisions changed since first recorded: [{"was": {...}, "now": {...}, "at": ...}]
DECISION_FIELDS = (DUPLICATE_OF, NOT_DUPLICATE_OF, JUDGED, CHANGES)  # what an undo of a queue decision puts back
PENDING = "pending"  # true: waiting in the review queue, left out of searches (dupq.collection.review)
REVIEWED = "reviewed"  # the record of a queue decision: by, at, action, keys, before (dupq.collection.review)


class KeyConflict(DupqError):
    """A write that what is stored refuses: a key stored already with another question or other metadata, or a
    decision that would make a cycle of canonical questions (the service's 409)."""


class UnknownKey(DupqError):
    """A key no stored question has (a removal or an update of it; the service's 404)."""


class StoreFailure(DupqError):
    """The store failed for a reason of its own, not the caller's: a full disk, a lock held too long, damage.

    ``reason`` says which, so that the service can answer with the right status (507 for
    ``"full"``, 503 for ``"busy"``, ``"read-only"`` or ``"unreachable"``, 500 otherwise).
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason  # "full", "busy", "read-only", "unreachable", "damaged" or "failed"


def one_each(values, n: int, what: str) -> list:
    """``values`` as a list of ``n`` (one per question), or ``n`` Nones when none were given."""
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise DupqError(f"got {len(values)} {what} for {n} questions; give one per question.")
    return values


def check_metadata(metadata, n: int) -> list[str | None]:
    """Each question's metadata as JSON text (None for none), or a :class:`DupqError` naming the bad one.

    Metadata is a dict of JSON values, finite numbers only, nested at most
    :data:`~dupq.core.nesting.MAX_DEPTH` levels (deeper, it could be stored but not served again).
    """
    out = []
    for i, m in enumerate(one_each(metadata, n, "metadata entries")):
        if m is not None and not isinstance(m, dict):
            raise DupqError(f"the metadata of question {i + 1} is a {type(m).__name__}, not a dict.")
        if m is not None and nesting(m, MAX_DEPTH) > MAX_DEPTH:
            raise DupqError(f"the metadata of question {i + 1} nests more than {MAX_DEPTH} levels deep.")
        if m and holds_nul(m):
            raise DupqError(f"the metadata of question {i + 1} holds the character U+0000, which metadata may not.")
        problem = decision_problem(m) if m else None
        if problem:
            raise DupqError(f"the metadata of question {i + 1} {problem}.")
        try:
            text = json.dumps(m, ensure_ascii=False, allow_nan=False) if m else None
            if text is not None:
                text.encode("utf-8")  # a lone surrogate is not text a store can keep
        except (TypeError, ValueError) as e:  # NaN and Infinity are not JSON either
            raise DupqError(f"the metadata of question {i + 1} cannot be stored as JSON ({e}).") from None
        out.append(text)
    return out


def holds_nul(value) -> bool:
    """Whether a JSON value holds U+0000 in any string, an object's names included."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    return isinstance(value, list) and any(holds_nul(v) for v in value)


def decision_problem(metadata: dict) -> str | None:
    """What is wrong with ``metadata``'s reserved decision fields (as the end of a sentence), None when nothing is.

    ``duplicate_of`` is one key, ``not_duplicate_of`` a list of keys (a CSV's text ``"12"`` is no list:
    read as one, it named the keys ``"1"`` and ``"2"``), ``judged`` an object of keys and digests.
    """
    canonical = metadata.get(DUPLICATE_OF)
    if DUPLICATE_OF in metadata and not is_key(canonical):
        return f"gives {DUPLICATE_OF} {canonical!r}, which is not one key (it names one question)"
    distinct = metadata.get(NOT_DUPLICATE_OF)
    if NOT_DUPLICATE_OF in metadata and not (isinstance(distinct, list) and all(is_key(k) for k in distinct)):
        return f"gives {NOT_DUPLICATE_OF} {distinct!r}, which is not a list of keys"
    judged = metadata.get(JUDGED)
    if JUDGED in metadata and not (
        isinstance(judged, dict) and all(is_key(k) and isinstance(v, str) for k, v in judged.items())
    ):
        return f"gives {JUDGED} {judged!r}, which is not an object of keys and digests (dupq writes it)"
    changes = metadata.get(CHANGES)
    if CHANGES in metadata and not (isinstance(changes, list) and all(isinstance(c, dict) for c in changes)):
        return f"gives {CHANGES} {changes!r}, which is not a list of objects (dupq writes it)"
    return None


def undecided(metadata: str | None) -> str | None:
    """Metadata (JSON text) without what moderators and the review queue add to it (the decision fields,
    ``pending``, ``reviewed``): what a client sends, before and after a decision."""
    value, damage = read_metadata(metadata)
    moderated = (*DECISION_FIELDS, PENDING, REVIEWED)
    if damage or not any(field in value for field in moderated):
        return metadata
    rest = {k: v for k, v in value.items() if k not in moderated}
    return json.dumps(rest, ensure_ascii=False) if rest else None


def judged_digest(text: str, other: str) -> str:
    """A short digest of the two texts a decision was made on (which question is which counts)."""
    both = json.dumps([text, other], ensure_ascii=False, default=repr).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(both, digest_size=8).hexdigest()


def text_digest(text: str) -> str:
    """A short digest of a stored question's text: a reranker vector is kept with the digest of the text it encodes,
    so that a vector whose row now holds another text is known as stale."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


class _NotJSON(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NotJSON(f"{name} is not a JSON number")


def read_metadata(text: str | None) -> tuple[dict, str | None]:
    """A stored row's metadata as a dict, and why it is damaged (None when it is not).

    What ``add`` stores always reads back; a row written by anything else may hold text that is
    not JSON, JSON that is not an object, ``NaN`` (which no JSON reader takes) or nesting that
    could not be served. Such metadata reads as ``{}`` with the reason, so one damaged row
    neither fails every search that finds it nor slips invalid JSON into an answer.
    """
    if not text:
        return {}, None
    if not isinstance(text, str):
        return {}, f"it is {type(text).__name__}, not JSON text"
    if json_depth(text, MAX_DEPTH) > MAX_DEPTH:
        return {}, f"it nests more than {MAX_DEPTH} levels deep"
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as e:
        return {}, f"it is not valid JSON ({e})"
    if not isinstance(value, dict):
        return {}, f"it is a JSON {type(value).__name__}, not an object"
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return {}, "it holds a lone surrogate escape, which is not Unicode text"
    return value, None


def same_metadata(a: str | None, b: str | None) -> bool:
    """Whether two rows' metadata (JSON text, None for none) hold the same JSON value: a keyed retry
    may list an object's names in another order, or write ``1.0`` for ``1``, and is the same add."""
    if a == b:
        return True
    (va, damaged_a), (vb, damaged_b) = read_metadata(a), read_metadata(b)
    return not (damaged_a or damaged_b) and _same(va, vb)


def _same(a, b) -> bool:
    """JSON equality: objects by their names, numbers by value, ``true`` never ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def check_keys(keys, n: int) -> list[str | None]:
    """Each question's key (None for none), checked by the one rule of a key (:func:`~dupq.data.questions.check_key`)."""
    keys = one_each(keys, n, "keys")
    for i, k in enumerate(keys):
        if k is not None:
            check_key(k, f"the key of question {i + 1}")
    return keys


def place(
    texts: list[str],
    meta: list[str | None],
    keys: list[str | None],
    stored: dict[str, tuple[int, str, str | None]],
    new_id: Callable[[int, str | None], int],
) -> tuple[list[int], list[int]]:
    """The id of each question, and the positions of those to store (the key rule of every store).

    ``stored`` maps the given keys that are stored already to ``(id, text, metadata)``; a key seen there, or earlier in
    the same call, keeps its id (:class:`KeyConflict` if its text or metadata differ; stored metadata counts as the same
    without the decisions recorded on it since, so a ticket sent again after a moderator's decision is the same ticket);
    ``new_id(n, key)`` is the id of the ``n``-th new question.
    """
    stored = dict(stored)
    ids, new = [], []
    given: dict[str, int] = {}  # the keys new in this call: the question that brought each
    for j, (text, m, key) in enumerate(zip(texts, meta, keys)):
        if key is not None and key in stored:
            i, stored_text, stored_meta = stored[key]
            same = stored_text == text and (
                same_metadata(stored_meta, m) or same_metadata(undecided(stored_meta), undecided(m))
            )
            if not same and key in given:  # no id is taken: nothing is stored
                raise KeyConflict(
                    f"the key {key!r} is given to questions {given[key] + 1} and {j + 1} of one add, "
                    "with another question or metadata; nothing was stored."
                )
            if not same:
                raise KeyConflict(f"the key {key!r} is stored already (id {i}) with another question or metadata.")
            ids.append(i)
            continue
        ids.append(new_id(len(new), key))
        new.append(j)
        if key is not None:
            stored[key], given[key] = (ids[-1], text, m), j
    return ids, new


def in_parts(values: list) -> Iterator[list]:
    """``values`` in parts of at most :data:`PARAMETERS` (what one statement or request may name)."""
    for lo in range(0, len(values), PARAMETERS):
        yield values[lo : lo + PARAMETERS]


def taken(positions: list[int], *columns: list) -> list[list]:
    """The values at ``positions`` of each of ``columns`` (the new rows of an add, which :func:`place` names)."""
    return [[column[j] for j in positions] for column in columns]


def edited(stored: dict, key: str, others: list[str], change, where) -> tuple[int, str | None, str | None]:
    """The edit rule every backend's ``edit`` applies to the rows it read (``stored``: key -> ``(id, text,
    metadata)``): ``key`` and ``others`` must all be stored, else :class:`UnknownKey`; returns ``key``'s id, its
    metadata before, and after ``change``."""
    check_stored(stored, [key, *others], where, "changed")
    i, _, old = stored[key]
    return i, old, change(old)


def check_stored(stored: dict, keys: list[str], where, undone: str) -> None:
    """:class:`UnknownKey` naming the first of ``keys`` not in ``stored`` (and that nothing was ``undone``)."""
    missing = [k for k in keys if k not in stored]
    if missing:
        raise UnknownKey(f"no question with the key {missing[0]!r} is stored in {where}; nothing was {undone}.")
