"""Moderators' decisions on a collection's questions: how one is recorded in a question's metadata, and read back.

A decision lives in the judged question's reserved metadata fields (:mod:`dupq.collection.rows`). :func:`recorded` is
the change one decision makes (one that contradicts an earlier decision is a :class:`~dupq.collection.rows.KeyConflict`
unless sent as a change: none is replaced silently), :func:`refuse_cycle` keeps canonical questions from leading back to
the judged one, and :func:`decision_pairs` reads every decision back as a labelled pair, leaving out (with a warning)
what no longer holds. The collection applies them in one transaction of its backend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from dupq.collection import review
from dupq.collection.rows import (
    CHANGES,
    DUPLICATE_OF,
    JUDGED,
    NOT_DUPLICATE_OF,
    KeyConflict,
    UnknownKey,
    check_keys,
    check_metadata,
    decision_problem,
    judged_digest,
    read_metadata,
)
from dupq.core.errors import DupqError

log = logging.getLogger(__name__)

LONGEST_CHAIN = 1_000  # canonical questions followed from a new decision's to find a cycle


def contradicted(metadata: dict, other: str, duplicate: bool) -> dict | None:
    """The earlier decision of ``metadata`` that judging it a duplicate of ``other`` (or distinct from it) would
    contradict, as ``{field: key}``, or None: a duplicate of another canonical question, or distinct from ``other``
    (for a duplicate); a duplicate of ``other`` (for distinct). The same decision again contradicts nothing."""
    canonical = metadata.get(DUPLICATE_OF)
    if duplicate and canonical is not None and canonical != other:
        return {DUPLICATE_OF: canonical}
    if duplicate and other in metadata.get(NOT_DUPLICATE_OF, []):
        return {NOT_DUPLICATE_OF: other}
    if not duplicate and canonical == other:
        return {DUPLICATE_OF: other}
    return None


def recorded(
    stored: str | None, key: str, other: str, duplicate: bool, digest: str, change: bool = False, at: str = ""
) -> str:
    """The metadata of ``key`` (stored as JSON text) once it is judged a duplicate of ``other`` (or distinct
    from it), as JSON text; stored decision fields of the wrong type are refused, never rewritten.

    A decision that contradicts an earlier one (:func:`contradicted`) is refused with :class:`KeyConflict`
    unless ``change``; then it replaces the earlier one, and ``decision_changes`` keeps what it was changed
    from and ``at`` (when, ISO 8601).
    """
    metadata, _ = read_metadata(stored)  # damaged metadata reads as {} and is replaced
    problem = decision_problem(metadata)
    if problem:
        raise DupqError(
            f"the stored metadata of {key!r} {problem}; correct it with an update first (nothing was changed)."
        )
    now = {DUPLICATE_OF if duplicate else NOT_DUPLICATE_OF: other}
    was = contradicted(metadata, other, duplicate)
    if was is not None and not change:
        ((field, earlier),) = was.items()
        raise KeyConflict(
            f"{key!r} is recorded already as {field} {earlier!r}, which this decision contradicts; "
            "send it as a change to replace that decision (nothing was changed)."
        )
    if was is not None:
        metadata[CHANGES] = [*metadata.get(CHANGES, []), {"was": was, "now": now, "at": at}]
    distinct = metadata.get(NOT_DUPLICATE_OF, [])
    if duplicate:
        metadata[DUPLICATE_OF] = other
        distinct = [k for k in distinct if k != other]
    else:
        if metadata.get(DUPLICATE_OF) == other:
            del metadata[DUPLICATE_OF]
        distinct = [*dict.fromkeys([*distinct, other])]
    if distinct:
        metadata[NOT_DUPLICATE_OF] = distinct
    else:
        metadata.pop(NOT_DUPLICATE_OF, None)
    named = {metadata.get(DUPLICATE_OF), *distinct}
    metadata[JUDGED] = {k: v for k, v in metadata.get(JUDGED, {}).items() if k in named} | {other: digest}
    return check_metadata([metadata], 1)[0] or ""


def decision_edit(
    find: Callable[[list[str]], dict],
    where: str,
    key: str,
    duplicate_of: str | None,
    not_duplicate_of,
    keep: bool,
    by: str | None,
    change: bool,
) -> tuple[list[str], Callable[[str | None], str | None]]:
    """The keys a decision (:meth:`~dupq.collection.collection.Collection.decide`'s arguments) judges ``key``
    against, and the edit of ``key``'s stored metadata that records it, once every check that needs no write has
    passed: the keys, both questions stored (``find(keys)``: ``{key: (id, text, metadata)}`` of those stored in
    the collection ``where``), no cycle of canonical questions."""
    action, others = review.decision(duplicate_of, not_duplicate_of, keep)
    by = review.check_by(by)
    check_keys([key, *others], len(others) + 1)
    if key in others:
        raise DupqError(f"a question cannot be judged against itself ({key!r}).")
    texts = {k: text for k, (_, text, _) in find([key, *others]).items()}
    for k in (key, *others):
        if k not in texts:
            raise UnknownKey(f"no question with the key {k!r} is stored in {where}; nothing was changed.")
    if duplicate_of is not None:
        refuse_cycle(lambda k: find([k]).get(k), key, duplicate_of)
    digests = {other: judged_digest(texts[key], texts[other]) for other in others}
    at = datetime.now(UTC).isoformat(timespec="seconds")

    def edit(stored: str | None) -> str | None:
        after = stored
        for other in others:
            after = recorded(after, key, other, duplicate_of is not None, digests[other], change, at)
        return review.reviewed(stored, after, action, others, by)

    return others, edit


def refuse_cycle(find: Callable[[str], tuple | None], key: str, canonical: str) -> None:
    """Refuse ``key`` as a duplicate of ``canonical`` when ``canonical``'s own canonical questions lead back to
    ``key``; ``find(k)`` is the stored ``(id, text, metadata)`` of a key, None when none is stored."""
    seen = [key, canonical]
    for _ in range(LONGEST_CHAIN):
        found = find(seen[-1])
        after = read_metadata(found[2])[0].get(DUPLICATE_OF) if found else None
        if not isinstance(after, str) or after in seen[1:]:
            return
        if after == key:
            chain = " -> ".join([*seen, key])
            raise KeyConflict(f"{key!r} cannot be a duplicate of {canonical!r}: that makes a cycle ({chain}).")
        seen.append(after)


def decision_pairs(rows, where: str) -> list[tuple[str, str, str, str, int]]:
    """Every decision between two stored questions of ``rows`` (``(id, key, text, metadata)``) as ``(key, other
    key, text, other text, 1 duplicate / 0 not)``, in the rows' order.

    Left out, each kind with a warning naming ``where``: a decision naming a question removed since, one whose
    side's text changed since it was judged (its ``judged`` digest differs; decisions stored before digests were
    kept have none and are kept), and the decisions of a question whose decision fields are of the wrong type.
    """
    texts = {key: text for _, key, text, _ in rows if key is not None}
    out, changed, malformed = [], [], []
    for _, key, text, meta in rows:
        if key is None or not meta:
            continue
        if decision_problem(meta):
            malformed.append(key)
            continue
        judged = meta.get(JUDGED, {})
        canonical = [(meta[DUPLICATE_OF], 1)] if DUPLICATE_OF in meta else []
        for other, y in canonical + [(k, 0) for k in meta.get(NOT_DUPLICATE_OF, [])]:
            if other not in texts:
                continue
            if other in judged and judged[other] != judged_digest(text, texts[other]):
                changed.append(f"{key}-{other}")
                continue
            out.append((key, other, text, texts[other], y))
    for keys, why in (
        (changed, "a question's text changed since it was judged"),
        (malformed, "their decision fields are not of the types dupq writes"),
    ):
        if keys:
            first = ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")
            log.warning("%d decisions of %s are left out: %s (%s).", len(keys), where, why, first)
    return out
