"""The review queue on every store: pending questions stored, kept out of searches, listed, decided and undone.

Each check compares with a naive reference: a brute-force search over the stored vectors of the rows that
are not pending (a loop over :meth:`Collection.stored_rows` with :func:`~dupq.collection.backend.hidden`),
and the queue as that loop lists it.
"""

from __future__ import annotations

import pytest
from collkit import ASKS, TOPICS, check_search  # the first eight topics here

from dupq.collection.backend import check_where, hidden, matches
from dupq.collection.collection import Collection
from dupq.collection.review import shared_words
from dupq.core.errors import DupqError

CATEGORIES = ["billing", "login", "export"]


def old_questions(n: int = 120) -> tuple[list[str], list[str], list[dict]]:
    texts = [f"{ASKS[i % 4].format(TOPICS[(i // 4) % 8])} And {TOPICS[(i // 32) % 8]}?" for i in range(n)]
    return texts, [f"t{i}" for i in range(n)], [{"category": CATEGORIES[i % 3], "n": i} for i in range(n)]


NEW = [f"{ASKS[i % 4].format(TOPICS[i % 8])} Asked again {i}?" for i in range(6)]


def waiting(coll: Collection, where=None) -> list[str]:
    """The naive queue: every stored row, in id order, whose metadata says pending (and match ``where``)."""
    where = check_where(where)
    return [key for _, key, _, meta in coll.stored_rows() if hidden(meta or {}) and matches(meta or {}, where)]


@pytest.fixture
def desk(location, tiny_model):
    texts, keys, meta = old_questions()
    with Collection.build(location, texts, tiny_model, keys=keys, metadata=meta) as coll:
        categories = [{"category": CATEGORIES[i % 3]} for i in range(len(NEW))]
        coll.add(NEW, categories, [f"p{i}" for i in range(len(NEW))], pending=True)
        yield coll


def test_pending_questions_are_kept_out_of_searches_and_listed(desk):
    coll = desk
    assert len(coll) == 120 + len(NEW)
    assert [key for _, key, _, _ in coll.queue()] == waiting(coll)  # in id order (a folder's: as added)
    assert sorted(waiting(coll)) == [f"p{i}" for i in range(len(NEW))]
    assert [key for _, key, _, _ in coll.queue({"category": "login"})] == waiting(coll, {"category": "login"})
    assert sorted(waiting(coll, {"category": "login"})) == ["p1", "p4"]
    check_search(coll, NEW, k=len(coll))  # its own text finds no pending question, itself included
    check_search(coll, NEW[:2], len(coll), {"category": ["login", "export"]})
    assert coll.get("p0")[2] == {"category": "billing", "pending": True}
    assert coll.add([NEW[0]], [{"category": "billing"}], ["p0"], pending=True) == [coll.get("p0")[0]]  # a retry


def test_a_decision_takes_a_question_out_of_the_queue_and_undo_puts_it_back(desk):
    coll = desk
    meta = coll.decide("p0", duplicate_of="t1", by="ana")
    assert meta["duplicate_of"] == "t1" and "pending" not in meta
    assert meta["reviewed"]["by"] == "ana" and meta["reviewed"]["action"] == "duplicate"
    coll.decide("p1", not_duplicate_of=["t2", "t3"], by="bo")
    coll.decide("p2", keep=True)
    assert waiting(coll) == [key for _, key, _, _ in coll.queue()]
    assert sorted(waiting(coll)) == ["p3", "p4", "p5"]
    check_search(coll, NEW, k=len(coll))  # the decided ones are found again
    assert coll.search([NEW[2]], k=1)[0][0].key == "p2"
    assert sorted((a, b, y) for a, b, _, _, y in coll.decisions()) == [
        ("p0", "t1", 1),
        ("p1", "t2", 0),
        ("p1", "t3", 0),
    ]
    past = coll.reviewed()
    assert {key: (r["action"], r["keys"], r["by"]) for key, _, r in past} == {
        "p0": ("duplicate", ["t1"], "ana"),
        "p1": ("distinct", ["t2", "t3"], "bo"),
        "p2": ("new", [], None),
    }
    assert all(r["at"].endswith("+00:00") for _, _, r in past)
    assert [r["at"] for _, _, r in past] == sorted((r["at"] for _, _, r in past), reverse=True)

    again = coll.undo("p0")
    assert again == {"category": "billing", "pending": True}
    assert waiting(coll) == [key for _, key, _, _ in coll.queue()]
    assert sorted(waiting(coll)) == ["p0", "p3", "p4", "p5"]
    check_search(coll, NEW, k=len(coll))
    assert [(a, b) for a, b, _, _, _ in coll.decisions() if a == "p0"] == []
    assert "p0" not in [key for key, _, _ in coll.reviewed()]
    with pytest.raises(DupqError, match="no decision from the review queue"):
        coll.undo("p0")
    with pytest.raises(DupqError, match="no decision from the review queue"):
        coll.undo("t5")


def test_an_undo_restores_the_decisions_made_before_the_queue(desk):
    coll = desk
    before = {"not_duplicate_of": ["t7"], "pending": True}  # judged by a ticket system before it was queued
    coll.add(["How do I learn about chess again?"], [before], ["p9"], pending=True)
    coll.decide("p9", duplicate_of="t8", by="ana")
    assert "not_duplicate_of" in coll.get("p9")[2] and "p9" not in waiting(coll)
    assert coll.undo("p9") == before and "p9" in waiting(coll)


def test_refused_decisions(desk):
    coll = desk
    for wrong in ({}, {"duplicate_of": "t1", "keep": True}, {"not_duplicate_of": []}):
        with pytest.raises(DupqError, match="give"):
            coll.decide("p0", **wrong)
    with pytest.raises(DupqError, match="moderator's name"):
        coll.decide("p0", keep=True, by="\x07bell")
    with pytest.raises(DupqError, match="against itself"):
        coll.decide("p0", not_duplicate_of=["t1", "p0"])
    assert "p0" in waiting(coll)


def test_shared_words_leave_out_the_common_ones():
    assert shared_words("How do I lose weight FAST?", "fast ways to lose weight") == ["lose", "weight", "fast"]
    assert shared_words("Why is the sky blue?", "How do I cook rice?") == []
