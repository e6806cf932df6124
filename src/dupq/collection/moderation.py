"""The moderators' side of a collection: their decisions between its questions, and the review queue.

A decision lives in the judged question's metadata (:mod:`dupq.collection.decisions`): its ``duplicate_of`` shows on
every hit of it as :attr:`~dupq.collection.hits.Hit.duplicate_of`; a decision follows the texts judged, so
:meth:`Moderated.decisions` leaves out one whose side changed since. The review queue (:mod:`dupq.collection.review`):
``add(..., pending=True)`` stores questions no search finds until a moderator decides (:meth:`Moderated.queue`,
:meth:`Moderated.decide`, :meth:`Moderated.undo`, :meth:`Moderated.reviewed`). :class:`Moderated` holds these methods of
:class:`~dupq.collection.collection.Collection`; each write is one transaction of the backend, under the collection's
write lock.
"""

from __future__ import annotations

from dupq.collection import review
from dupq.collection.backend import check_where
from dupq.collection.decisions import decision_edit, decision_pairs
from dupq.collection.rows import PENDING, check_keys, read_metadata


class Moderated:
    """A collection's moderation: :meth:`decide`, :meth:`undo`, :meth:`queue`, :meth:`reviewed`, :meth:`decisions`.

    Mixed into :class:`~dupq.collection.collection.Collection`, whose ``location``, ``_backend``,
    ``_writing()``, ``_check_open()`` and ``stored_rows()`` it uses.
    """

    def decide(
        self,
        key: str,
        *,
        duplicate_of: str | None = None,
        not_duplicate_of: str | list[str] | None = None,
        keep: bool = False,
        by: str | None = None,
        change: bool = False,
    ) -> dict:
        """Record a moderator's decision on the question of ``key``: a duplicate of ``duplicate_of`` (its canonical
        question), not a duplicate of ``not_duplicate_of`` (a key, or a list: of none of them), or (``keep``) a new
        question, no pair judged; its metadata afterwards.

        Both questions must be stored, and a duplicate's canonical question may not lead back to it (a cycle is
        refused). A question is a duplicate of one canonical question at a time. A decision that contradicts an earlier
        one (a duplicate of another canonical question, or distinct from its canonical one, or a duplicate of one judged
        distinct) is :class:`KeyConflict` unless ``change``: then it replaces the earlier one, and ``decision_changes``
        keeps what it was and when. A digest of the two texts is kept with the decision (``judged``). The stored
        metadata is read and written back in one transaction of the backend, so decisions recorded at once by several
        workers are all kept; stored decision fields of the wrong type are refused, never rewritten. A pending question
        leaves the review queue, with who (``by``) decided what and when recorded
        (:func:`~dupq.collection.review.reviewed`; :meth:`undo` takes it back).
        """
        self._check_open()
        others, edit = decision_edit(
            self._backend.find, str(self.location), key, duplicate_of, not_duplicate_of, keep, by, change
        )
        with self._writing():
            _, stored = self._backend.edit(key, edit, others)
        return read_metadata(stored)[0]

    def undo(self, key: str) -> dict:
        """Take back the review queue's decision on the question of ``key``: it is pending again, and its
        decision fields are as they were before (one transaction); its metadata afterwards."""
        self._check_open()
        check_keys([key], 1)
        with self._writing():
            _, stored = self._backend.edit(key, lambda stored: review.undone(stored, key), [])
        return read_metadata(stored)[0]

    def queue(self, where: dict | None = None) -> list[tuple[int, str | None, str, dict]]:
        """The questions waiting for a moderator as ``(id, key, text, metadata)``, in id order (a folder's: the
        oldest first); ``where`` keeps those whose metadata match, as a search's filter does."""
        self._check_open()
        where = check_where(where)
        return review.waiting(self._backend.rows_naming(PENDING), where)

    def reviewed(self) -> list[tuple[str, str, dict]]:
        """The review queue's past decisions still standing as ``(key, text, record)``, the latest first; a record
        says ``by`` whom, ``at`` what time, the ``action`` (duplicate, distinct, new) and the ``keys`` judged against."""
        self._check_open()
        return review.past(self._backend.rows_naming(review.REVIEWED))

    def decisions(self) -> list[tuple[str, str, str, str, int]]:
        """Every moderator's decision between two stored questions as ``(key, other key, text, other text,
        1 duplicate / 0 not)``, in id order.

        Left out, each kind with a warning (:func:`~dupq.collection.decisions.decision_pairs`): a decision naming
        a question removed since, one whose side's text changed since it was judged, and those of a question whose
        decision fields are of the wrong type."""
        return decision_pairs(self.stored_rows(), str(self.location))
