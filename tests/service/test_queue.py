"""The review queue over HTTP (TestClient): pending questions posted, hidden from /search, listed by /queue with their
candidates, decided through the decision route (who and when kept), undone, and their past decisions listed.

The queue is compared with a naive loop over the stored rows (what is pending, in id order, by category) and the
candidates with a search of the same text.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dupq.collection.backend import hidden
from dupq.collection.collection import Collection
from dupq.collection.review import shared_words
from dupq.modeling.model import Model
from dupq.service.app import create_app
from support.servicekit import questions

TOKEN = "queue-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NEW = [
    ("n0", "How can I lose weight fast?", "billing"),
    ("n1", "How do I learn Python quickly?", "login"),
    ("n2", "Why is the sky blue at noon?", "billing"),
    ("n3", "What is the best way to lose weight?", "export"),
    ("n4", "How can I cook rice well?", "login"),
]


@pytest.fixture
def client(tmp_path, tiny_model_dir, small_splits):
    texts = questions(small_splits, 300)
    folder = tmp_path / "coll"
    Collection.build(folder, texts, Model.load(tiny_model_dir), keys=[str(i) for i in range(len(texts))]).close()
    with TestClient(create_app(folder, token=TOKEN)) as c:
        for key, text, category in NEW:
            body = {"text": text, "key": key, "metadata": {"category": category}, "pending": True}
            assert c.post("/questions", json=body, headers=AUTH).status_code == 201
        yield c, folder


def waiting(folder, category=None) -> list[str]:
    """The naive queue: the stored rows that are pending, in id order (and of ``category``)."""
    with Collection.open(folder) as coll:
        rows = coll.stored_rows()
    return [k for _, k, _, m in rows if hidden(m or {}) and category in (None, (m or {}).get("category"))]


def listed(c, **params) -> list[str]:
    answer = c.get("/queue", params=params)
    assert answer.status_code == 200, answer.text
    return [item["key"] for item in answer.json()["items"]]


def test_pending_questions_wait_in_the_queue_with_their_candidates(client):
    c, folder = client
    assert listed(c) == waiting(folder) == [key for key, _, _ in NEW]
    for _, text, _ in NEW:  # no search finds a pending question, its own text's included
        found = c.post("/search", json={"question": text, "k": 100}).json()["results"]
        assert not {h["key"] for h in found} & {k for k, _, _ in NEW}
    page = c.get("/queue", params={"size": 2, "page": 2}).json()
    categories = {"billing": 2, "login": 2, "export": 1}
    assert (page["total"], page["field"], page["categories"]) == (5, "category", categories)
    assert [item["key"] for item in page["items"]] == ["n2", "n3"]
    item = page["items"][0]
    assert item["category"] == "billing" and item["metadata"] == {"category": "billing", "pending": True}
    search = c.post("/search", json={"question": item["text"], "k": 5}).json()["results"]
    assert [h["key"] for h in item["candidates"]] == [h["key"] for h in search]
    assert [h["score"] for h in item["candidates"]] == pytest.approx([h["score"] for h in search])
    for h in item["candidates"]:
        assert h["shared"] == shared_words(item["text"], h["text"]) and isinstance(h["duplicate"], bool)
    assert listed(c, category="login") == waiting(folder, "login") == ["n1", "n4"]
    assert listed(c, category="nothing") == []
    by_key = c.get("/queue", params={"field": "key"}).json()  # another field: the same queue, its categories by it
    assert [item["key"] for item in by_key["items"]] == listed(c) and by_key["categories"] == {}
    bad = c.post("/questions", json={"text": "A question without its key?", "pending": True}, headers=AUTH)
    assert bad.status_code == 422, bad.text


def test_decide_undo_and_past_decisions(client):
    c, folder = client
    candidate = c.get("/queue").json()["items"][0]["candidates"][0]["key"]
    who = {**AUTH, "X-Moderator": "Ana%20Mar%C3%ADa"}  # a name in UTF-8, percent-encoded as a header must be
    decided = c.post("/questions/n0/decision", json={"duplicate_of": candidate}, headers=who)
    assert decided.status_code == 200, decided.text
    assert decided.json()["metadata"]["duplicate_of"] == candidate
    assert c.post("/questions/n1/decision", json={"not_duplicate_of": ["3", "4"]}, headers=AUTH).status_code == 200
    assert c.post("/questions/n2/decision", json={"keep": True}, headers=AUTH).status_code == 200
    assert listed(c) == waiting(folder) == ["n3", "n4"]
    found = c.post("/search", json={"question": NEW[2][1], "k": 1}).json()["results"][0]
    assert found["key"] == "n2"  # decided: found by searches again
    past = c.get("/queue/decided").json()["decisions"]
    assert {d["key"]: (d["action"], d["keys"], d["by"]) for d in past} == {
        "n0": ("duplicate", [candidate], "Ana María"),
        "n1": ("distinct", ["3", "4"], None),
        "n2": ("new", [], None),
    }
    assert [d["at"] for d in past] == sorted((d["at"] for d in past), reverse=True)
    assert len(c.get("/queue/decided", params={"limit": 1}).json()["decisions"]) == 1

    assert c.post("/questions/n0/undo").status_code == 401
    undone = c.post("/questions/n0/undo", headers=AUTH)
    assert undone.status_code == 200 and undone.json()["metadata"] == {"category": "billing", "pending": True}
    assert listed(c) == waiting(folder) == ["n0", "n3", "n4"]
    assert "n0" not in {d["key"] for d in c.get("/queue/decided").json()["decisions"]}
    assert c.post("/questions/n0/undo", headers=AUTH).status_code == 409  # nothing left to undo
    assert c.post("/questions/nobody/undo", headers=AUTH).status_code == 404
    itself = c.post("/questions/n3/decision", json={"not_duplicate_of": ["1", "n3"]}, headers=AUTH)
    assert itself.status_code == 409
    both = c.post("/questions/n3/decision", json={"keep": True, "duplicate_of": "1"}, headers=AUTH)
    assert both.status_code == 422
