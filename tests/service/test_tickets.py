"""The API a ticket system calls, each answer checked against the library's own (``Collection.get``, ``page``,
``search(exclude=...)``, ``decisions``), and the OpenAPI document checked as a client generator reads it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dupq.collection.collection import Collection
from dupq.modeling.model import Model
from dupq.service.app import create_app
from support.servicekit import questions

TOKEN = "ticket-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
N = 120
CATEGORIES = ["billing", "login", "export"]


@pytest.fixture(scope="module")
def texts(small_splits) -> list[str]:
    return questions(small_splits, N)


@pytest.fixture
def desk(tmp_path, tiny_model_dir, texts):
    """A client of a fresh help desk (keys q0.., a category each) and the library's own handle on it."""
    metadata = [{"category": CATEGORIES[i % 3], "n": i} for i in range(N)]
    keys = [f"q{i}" for i in range(N)]
    Collection.build(tmp_path / "desk", texts, Model.load(tiny_model_dir), keys=keys, metadata=metadata).close()
    with TestClient(create_app(tmp_path / "desk", token=TOKEN)) as client:
        yield client, client.app.state.collection


def test_the_openapi_document_is_valid_for_client_generators(desk):
    from openapi_spec_validator import validate

    client, _ = desk
    document = client.get("/openapi.json").json()
    validate(document)  # raises on a document a generator would refuse
    for path, method in [("/questions", "get"), ("/questions/{key}", "get"), ("/decisions", "get")]:
        assert method in document["paths"][path]
    assert "exclude" in document["components"]["schemas"]["SearchRequest"]["properties"]


def test_a_question_by_key_is_the_librarys(desk):
    client, coll = desk
    for key in ("q0", "q7", "q119"):
        i, text, metadata = coll.get(key)
        want = {"id": i, "key": key, "text": text, "metadata": metadata, "pending": False}
        assert client.get(f"/questions/{key}").json() == want
    missing = client.get("/questions/nobody")
    assert missing.status_code == 404 and missing.json()["detail"] == "no question with the key 'nobody'."


def every_page(client, limit: int, **params) -> list[dict]:
    """Every question GET /questions lists, page after page, ``limit`` to a page at most."""
    got, cursor = [], None
    while True:
        extra = {} if cursor is None else {"cursor": cursor}
        page = client.get("/questions", params={"limit": limit, **params, **extra}).json()
        assert len(page["questions"]) <= limit
        got += page["questions"]
        if (cursor := page["next_cursor"]) is None:
            return got


@pytest.mark.parametrize("where", [[], ["category=login"], ["category=login", "category=export", "n=5"]])
def test_pages_give_every_question_once_in_order(desk, where):
    client, coll = desk
    coll.remove(["q4", "q5"])
    coll.update("q9", text="A question of my own about invoices?")  # a new text: a new id, last
    wanted = {}
    for item in where:
        field, value = item.split("=")
        wanted.setdefault(field, set()).add(int(value) if value.isdigit() else value)
    loop = [
        {"id": i, "key": key, "text": text, "metadata": meta, "pending": meta.get("pending") is True}
        for i, key, text, meta in coll.stored_rows()
        if all(meta.get(field) in values for field, values in wanted.items())
    ]
    got = every_page(client, limit=11, where=where)
    assert got == loop and len({q["id"] for q in got}) == len(got)
    assert client.get("/questions", params={"limit": 0}).status_code == 422


def test_a_search_leaves_out_the_ticket_itself(desk, texts):
    client, coll = desk
    body = {"question": texts[3], "k": 5, "exclude": ["q3"]}
    got = client.post("/search", json=body).json()["results"]
    want = coll.search([texts[3]], k=5, exclude=["q3"])[0]
    assert [(h["key"], h["id"]) for h in got] == [(h.key, h.id) for h in want]
    assert "q3" not in {h["key"] for h in got} and len(got) == 5
    assert client.post("/search", json={"question": texts[3], "k": 5}).json()["results"][0]["key"] == "q3"


def test_a_contradicting_decision_is_409_then_a_recorded_change(desk, texts):
    client, coll = desk
    assert client.post("/questions/q1/decision", json={"duplicate_of": "q2"}, headers=AUTH).status_code == 200
    for body in ({"not_duplicate_of": "q2"}, {"duplicate_of": "q3"}):
        refused = client.post("/questions/q1/decision", json=body, headers=AUTH)
        assert refused.status_code == 409 and "contradicts" in refused.json()["detail"]
    assert coll.get("q1")[2]["duplicate_of"] == "q2"  # nothing was changed
    changed = client.post("/questions/q1/decision", json={"duplicate_of": "q3", "change": True}, headers=AUTH)
    assert changed.status_code == 200
    metadata = changed.json()["metadata"]
    assert metadata == coll.get("q1")[2] and metadata["duplicate_of"] == "q3"
    (change,) = metadata["decision_changes"]
    assert change["was"] == {"duplicate_of": "q2"} and change["now"] == {"duplicate_of": "q3"} and change["at"]
    client.post("/questions/q6/decision", json={"not_duplicate_of": "q2"}, headers=AUTH)
    exported = client.get("/decisions").json()["decisions"]
    assert [
        (d["key"], d["other"], d["text"], d["other_text"], int(d["duplicate"])) for d in exported
    ] == coll.decisions()
    assert len(exported) == 2


def test_a_ticket_sent_again_after_a_decision_is_the_same_ticket(desk, texts):
    client, coll = desk
    ticket = {
        "text": "My invoice shows the wrong address, how do I fix it?",
        "key": "T-1",
        "metadata": {"from": "desk"},
    }
    first = client.post("/questions", json=ticket, headers=AUTH)
    assert first.status_code == 201
    client.post("/questions/T-1/decision", json={"duplicate_of": "q0"}, headers=AUTH)
    again = client.post("/questions", json=ticket, headers=AUTH)
    assert again.status_code in (200, 201) and again.json()["id"] == first.json()["id"]
    other = client.post("/questions", json={**ticket, "metadata": {"from": "mail"}}, headers=AUTH)
    assert other.status_code == 409
    assert coll.get("T-1")[2]["duplicate_of"] == "q0" and len(coll) == N + 1
    queued = {**ticket, "key": "T-2", "pending": True}  # through the review queue: pending, then reviewed
    first = client.post("/questions", json=queued, headers=AUTH)
    client.post("/questions/T-2/decision", json={"not_duplicate_of": "q0"}, headers=AUTH)
    assert "pending" not in coll.get("T-2")[2]
    again = client.post("/questions", json=queued, headers=AUTH)
    assert again.status_code in (200, 201) and again.json()["id"] == first.json()["id"] and len(coll) == N + 2


def test_a_question_waiting_for_review_is_listed_and_says_so(desk):
    client, coll = desk
    ticket = {"text": "Can I pay an invoice in two parts?", "key": "T-3", "pending": True}
    assert client.post("/questions", json=ticket, headers=AUTH).status_code == 201
    listed = every_page(client, limit=50)
    assert [q["key"] for q in listed if q["pending"]] == ["T-3"] and len(listed) == len(coll)
    assert client.get("/questions/T-3").json()["pending"] is True
    only = client.get("/questions", params={"where": ["pending=true"]}).json()["questions"]
    assert [q["key"] for q in only] == ["T-3"]
    client.post("/questions/T-3/decision", json={"keep": True}, headers=AUTH)
    assert client.get("/questions/T-3").json()["pending"] is False


def test_put_answers_what_was_stored(desk):
    client, coll = desk
    for body in ({"metadata": {"category": "billing", "vip": True}}, {"text": "How do I change my invoice email?"}):
        answer = client.put("/questions/q8", json=body, headers=AUTH).json()
        i, text, metadata = coll.get("q8")
        assert answer == {"key": "q8", "id": i, "count": N, "text": text, "metadata": metadata}
    assert answer["metadata"] == {"category": "billing", "vip": True}


def test_a_ticket_left_out_is_judged_as_if_never_stored(tmp_path, tiny_model_dir, texts):
    """The ticket is left out before the hits are judged: its duplicates' scores, probabilities and tiers are those
    of a collection that never stored it (stored, the ticket's own text would stand in front of every hit and
    lower each one's margin)."""
    tiny_model = Model.load(tiny_model_dir)
    # a search calibration that weighs the margin heavily (tiers at 0.3 and 0.7), so a margin computed with the
    # ticket in front would change every probability
    tiny_model.judge.search_calibration = {
        "a": 0.5, "b": 0.5, "c": -0.5, "cosine": 1.0, "margin": 8.0, "margin_range": [-0.5, 0.3],
        "suggest": 0.3, "duplicate": 0.7,
    }  # fmt: skip
    old, ticket = texts[:-1], texts[-1]  # the ticket's text is stored nowhere else
    keys = [f"q{i}" for i in range(len(old))]
    with Collection.build(tmp_path / "without", old, tiny_model, keys=keys) as without:
        want = without.search([ticket], k=5)[0]
    with Collection.build(tmp_path / "with", old, tiny_model, keys=keys) as with_ticket:
        with_ticket.add([ticket], keys=["T-1"])
        got = with_ticket.search([ticket], k=5, exclude=["T-1"])[0]
    judged = lambda hits: [(h.id, h.score, h.probability, h.tier) for h in hits]  # noqa: E731
    assert judged(got) == judged(want)
