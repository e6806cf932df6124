"""The moderators' review queue: questions stored as *pending*, kept out of searches until a moderator decides.

A pending question is stored like any other, with ``pending: true`` in its metadata (the reserved field
:data:`~dupq.collection.rows.PENDING`); every backend's search leaves it out unless asked
(:data:`~dupq.collection.backend.HIDDEN` is the rule), so that a new question is nobody's duplicate before
a moderator has seen it. A moderator's decision on it (:meth:`~dupq.collection.collection.Collection.decide`)
clears the flag and keeps a record of the decision in the field :data:`REVIEWED`::

    {"by": "ana", "at": "2026-11-27T14:03:00+00:00", "action": "duplicate", "keys": ["faq/17"],
     "before": {}}   # the decision fields as they were, so that an undo restores them

:func:`reviewed` writes that record, :func:`undone` takes it back (pending again, the decision fields as
they were before), and :func:`shared_words` says which words a question shares with a candidate (what the
page highlights). ``action`` is ``duplicate`` (of ``keys[0]``), ``distinct`` (a duplicate of none of ``keys``)
or ``new`` (kept as a new question, no pair judged).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from dupq.collection.backend import hidden, matches
from dupq.collection.rows import (
    DECISION_FIELDS,
    PENDING,
    REVIEWED,
    KeyConflict,
    check_metadata,
    one_each,
    read_metadata,
)
from dupq.core.errors import DupqError
from dupq.data.tokenizer import STRIP, word_parts

ACTIONS = ("duplicate", "distinct", "new")
MAX_BY = 100  # characters of a moderator's name
# Words too common to say anything about two questions (shared_words leaves them out).
COMMON = frozenset(
    "a an the and or of to in on for at by with is are was be do does did can could how what why when where who "
    "which i my me you your it its this that there from as if not no".split()
)


def queued(texts: list[str], metadata, keys, pending) -> list:
    """The metadata of an add whose questions (``pending``: all of them, or one flag each) wait in the queue."""
    flags = one_each(pending, len(texts), "pending flags") if isinstance(pending, list) else [pending] * len(texts)
    keys = one_each(keys, len(texts), "keys")
    for n, (flag, key) in enumerate(zip(flags, keys)):
        if flag and key is None:
            raise DupqError(f"pending question {n + 1} needs a key: a moderator's decision names it.")
    metadata = one_each(metadata, len(texts), "metadata entries")
    # what is not a dict stays as it was, for check_metadata to refuse in its own words
    return [
        {**(m or {}), PENDING: True} if flag and (m is None or isinstance(m, dict)) else m
        for m, flag in zip(metadata, flags)
    ]


def decision(duplicate_of: str | None, not_duplicate_of, keep: bool) -> tuple[str, list[str]]:
    """The action of a decision (see the module's text) and the keys it judges the question against; a
    DupqError unless exactly one of the three is given (``not_duplicate_of``: a key, or a non-empty list)."""
    if (duplicate_of is not None) + (not_duplicate_of is not None) + bool(keep) != 1:
        raise DupqError("give one decision: duplicate_of, not_duplicate_of or keep.")
    if duplicate_of is not None:
        return "duplicate", [duplicate_of]
    if keep:
        return "new", []
    given = list(not_duplicate_of) if isinstance(not_duplicate_of, (list, tuple)) else [not_duplicate_of]
    distinct = [k for n, k in enumerate(given) if k not in given[:n]]  # once each; check_keys refuses a non-key
    if not distinct:
        raise DupqError("give the keys of the questions this one does not duplicate.")
    return "distinct", distinct


def check_by(by: str | None) -> str | None:
    """A moderator's name as given (None: not given), or a DupqError: at most :data:`MAX_BY` characters, no control one."""
    if by is None:
        return None
    if not isinstance(by, str) or not by.strip() or len(by) > MAX_BY or not by.isprintable():
        raise DupqError(f"a moderator's name is 1 to {MAX_BY} printable characters, not {by!r}.")
    return by.strip()


def reviewed(before: str | None, after: str | None, action: str, keys: list[str], by: str | None) -> str | None:
    """The metadata ``after`` a decision (JSON text), with the pending flag cleared and the decision recorded
    (:data:`REVIEWED`), where the question was pending ``before``; else ``after`` as it is."""
    old, _ = read_metadata(before)
    if not hidden(old):
        return after
    metadata, _ = read_metadata(after)
    metadata.pop(PENDING, None)
    at = datetime.now(UTC).isoformat(timespec="seconds")
    metadata[REVIEWED] = dict(
        by=by, at=at, action=action, keys=keys, before={f: old[f] for f in DECISION_FIELDS if f in old}
    )
    return check_metadata([metadata], 1)[0]


def undone(stored: str | None, key: str) -> str:
    """``key``'s metadata (JSON text) with its queue decision taken back: pending again, its decision fields as
    they were before it; a DupqError when it holds no queue decision."""
    metadata, _ = read_metadata(stored)
    record = metadata.get(REVIEWED)
    if not isinstance(record, dict) or not isinstance(record.get("before", {}), dict):
        raise KeyConflict(f"{key!r} holds no decision from the review queue to undo; nothing was changed.")
    for field in DECISION_FIELDS:
        metadata.pop(field, None)
    metadata |= {f: v for f, v in record.get("before", {}).items() if f in DECISION_FIELDS}
    del metadata[REVIEWED]
    metadata[PENDING] = True
    return check_metadata([metadata], 1)[0]


def decision_record(metadata: dict) -> dict | None:
    """The queue decision recorded in ``metadata`` (by, at, action, keys), None when there is none."""
    record = metadata.get(REVIEWED)
    if not isinstance(record, dict) or record.get("action") not in ACTIONS:
        return None
    return {f: record.get(f) for f in ("by", "at", "action", "keys")}


def words(text: str) -> list[str]:
    """A question's words as the model reads them (its punctuation stripped, lowercased), in order, once each."""
    out = [part for word in text.translate(STRIP).lower().split() for part in word_parts(word)]
    return list(dict.fromkeys(out))


def shared_words(text: str, other: str) -> list[str]:
    """The words of ``text`` that ``other`` holds too, in ``text``'s order, the most common English ones left out.

    >>> shared_words("How do I lose weight fast?", "Fast ways to lose weight")
    ['lose', 'weight', 'fast']
    """
    theirs = set(words(other))
    return [w for w in words(text) if w in theirs and w not in COMMON]


def waiting(rows, where) -> list[tuple[int, str | None, str, dict]]:
    """The pending ones of stored ``rows`` (``(id, (key, text, metadata JSON))``) that match ``where``, as
    ``(id, key, text, metadata)``, in the rows' order."""
    read = [(i, key, text, read_metadata(meta)[0]) for i, (key, text, meta) in rows]
    return [row for row in read if hidden(row[3]) and matches(row[3], where)]


def past(rows) -> list[tuple[str, str, dict]]:
    """The queue decisions recorded in stored ``rows`` as ``(key, text, record)``, the latest first (ties: the key)."""
    found = []
    for _, (key, text, meta) in rows:
        record = decision_record(read_metadata(meta)[0])
        if record is not None and isinstance(key, str):
            found.append((key, text, record))
    return sorted(found, key=lambda r: (json.dumps(r[2].get("at")), r[0]), reverse=True)
