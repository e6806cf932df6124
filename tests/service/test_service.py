"""The HTTP API through FastAPI's TestClient: every endpoint, auth, limits, persistence.

Answers are checked against the library called directly (``Collection.search``,
``Model.similarity``), which the service only wraps.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from typer.testing import CliRunner

import dupq.collection.folder.cache
import dupq.index.vectors
import dupq.service.routes.similarity as route
from dupq.cli import app
from dupq.collection.collection import Collection
from dupq.collection.rows import StoreFailure
from dupq.core.errors import DupqError
from dupq.service.app import create_app
from dupq.service.batching import Batcher
from dupq.service.middleware import SECURITY_HEADERS
from dupq.service.schemas import HitOut, SearchResponse
from support.errors import refused
from support.servicekit import LiveServer, build_collection, milvus_or_skip, questions

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
N = 300


@pytest.fixture(scope="module")
def texts(small_splits) -> list[str]:
    return questions(small_splits, N)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model_dir, texts):
    return build_collection(tmp_path_factory.mktemp("coll") / "coll", tiny_model_dir, texts)


@pytest.fixture(params=["sqlite", "milvus"])
def coll_dir(request, built, tmp_path, tiny_model_dir, texts):
    """A fresh collection for each test and each store (a copy of the folder, or a new milvus-lite file), so adds do not leak."""
    if request.param == "sqlite":
        return shutil.copytree(built, tmp_path / "coll")
    return build_collection(milvus_or_skip(tmp_path / "coll.db"), tiny_model_dir, texts)


@pytest.fixture
def client(coll_dir, monkeypatch):
    monkeypatch.delenv("DUPQ_API_TOKEN", raising=False)
    with TestClient(create_app(coll_dir, token=TOKEN)) as c:
        yield c


def test_health_page_and_schema(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["questions"] == N and 0 < health["threshold"] < 1
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/static/app.js" in page.text and "/static/app.css" in page.text
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/app.css").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/similarity", "/search", "/questions", "/health"} <= set(paths)
    assert "security" in paths["/questions"]["post"] and "security" not in paths["/search"]["post"]


def test_search_answers_the_librarys_hits_as_the_validated_models_json(client, texts):
    """/search answers the hits ``Collection.search`` finds. The route writes its answer without building
    SearchResponse: its bytes are those of the validated model, awkward metadata (tiny and huge floats, non-ASCII
    text, nesting) and a key left out included."""
    odd = {"tiny": 1e-7, "huge": 1e16, "name": "Zürich 中", "nest": {"a": [1, 2.5, None, True, -0.0]}}
    added = client.post("/questions", json={"text": texts[3] + " again", "metadata": odd, "key": "odd"}, headers=AUTH)
    assert added.status_code == 201
    collection = client.app.state.collection
    tiers = collection.tiers
    for body in (
        {"question": texts[5], "k": 7},
        {"question": texts[3], "k": 5},
        {"question": texts[3], "k": 3, "exclude": ["odd"]},
    ):
        got = client.post("/search", json=body)
        hits = collection.search([body["question"]], k=body["k"], exclude=body.get("exclude"))[0]
        results = [HitOut.model_validate(h, from_attributes=True) for h in hits]
        want = SearchResponse(
            question=body["question"],
            threshold=tiers["duplicate"],
            threshold_on=tiers["on"],
            tiers=tiers,
            results=results,
        )
        assert got.headers["content-type"] == "application/json"
        assert got.content == TypeAdapter(SearchResponse).dump_json(want)
    assert any(r["metadata"] == odd for r in client.post("/search", json={"question": texts[3]}).json()["results"])
    answer = client.post("/search", json={"question": texts[5]}).json()
    assert len(answer["results"]) == 10 and answer["threshold"] == collection.threshold  # the default k
    top = answer["results"][0]
    assert (top["text"], top["metadata"]) == (texts[5], {"row": 5}) and top["score"] == pytest.approx(1.0, abs=1e-4)
    assert all(r["duplicate"] == (r["score"] > collection.threshold) for r in answer["results"])


def test_similarity_matches_the_model(client, texts):
    model = client.app.state.collection.model
    got = client.post("/similarity", json={"q1": texts[0], "q2": texts[1]}).json()
    assert got["similarity"] == pytest.approx(model.similarity(texts[0], texts[1]), abs=1e-6)
    assert got["duplicate"] == (got["similarity"] > model.threshold) and got["threshold"] == model.threshold
    same = client.post("/similarity", json={"q1": texts[0], "q2": texts[0]}).json()
    assert same["similarity"] == pytest.approx(1.0, abs=1e-5) and same["duplicate"] is True


def test_concurrent_searches_each_get_their_own_answer(client, texts):
    """Searches arriving together share one library call; each must still get its own hits."""
    queries = texts[:40]

    def one(i):
        return client.post("/search", json={"question": queries[i], "k": 1 + i % 5}).json()["results"]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(len(queries))))
    for i, results in enumerate(answers):
        assert len(results) == 1 + i % 5 and results[0]["text"] == queries[i]


def test_writes_need_the_token(client):
    body = {"text": "Is this question new?", "metadata": {"source": "test"}}
    missing = client.post("/questions", json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "token" in missing.json()["detail"]
    wrong = client.post("/questions", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["detail"] == "the bearer token is wrong."
    not_ascii = {"Authorization": "Bearer \u00e9\u00e9".encode("latin-1")}
    assert client.post("/questions", json=body, headers=not_ascii).status_code == 401
    assert client.get("/health").json()["questions"] == N
    ok = client.post("/questions", json=body, headers=AUTH)
    assert ok.status_code == 201 and ok.json()["count"] == N + 1


def test_token_from_the_environment_and_writes_off_without_one(coll_dir, monkeypatch):
    monkeypatch.delenv("DUPQ_API_TOKEN", raising=False)
    with TestClient(create_app(coll_dir)) as c:
        refused = c.post("/questions", json={"text": "Why?"}, headers=AUTH)
        assert refused.status_code == 403 and "DUPQ_API_TOKEN" in refused.json()["detail"]
    monkeypatch.setenv("DUPQ_API_TOKEN", "from-env")
    with TestClient(create_app(coll_dir)) as c:
        assert c.post("/questions", json={"text": "Why?"}, headers=AUTH).status_code == 401
        from_env = {"Authorization": "Bearer from-env"}
        assert c.post("/questions", json={"text": "Why?"}, headers=from_env).status_code == 201


def test_reads_can_be_protected(coll_dir, texts):
    with TestClient(create_app(coll_dir, token=TOKEN, protect_reads=True)) as c:
        assert c.post("/search", json={"question": texts[0]}).status_code == 401
        assert c.post("/similarity", json={"q1": "a", "q2": "b"}).status_code == 401
        assert c.post("/search", json={"question": texts[0]}, headers=AUTH).status_code == 200
        assert c.get("/health").status_code == 401 and c.get("/health", headers=AUTH).status_code == 200
        page = c.get("/")  # the page itself is open, and asks for the token when a read answers 401
        assert page.status_code == 200 and 'id="token-form"' in page.text
        assert "Authorization" in c.get("/static/app.js").text


def test_added_questions_survive_a_restart(coll_dir, monkeypatch):
    monkeypatch.delenv("DUPQ_API_TOKEN", raising=False)
    new = ["What is the capital of Mongolia today?", "How do volcanoes form under the sea?"]
    with TestClient(create_app(coll_dir, token=TOKEN)) as c:
        ids = [
            c.post("/questions", json={"text": t, "metadata": {"n": i}}, headers=AUTH).json()["id"]
            for i, t in enumerate(new)
        ]
        assert len(set(ids)) == 2
    with TestClient(create_app(coll_dir, token=TOKEN)) as c:  # a new app: the collection is read from disk
        assert c.get("/health").json()["questions"] == N + 2
        for i, (text, new_id) in enumerate(zip(new, ids)):
            top = c.post("/search", json={"question": text, "k": 3}).json()["results"][0]
            assert (top["id"], top["text"], top["metadata"]) == (new_id, text, {"n": i})


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/search", {"question": "x" * 1001}, "question"),
        ("/search", {"question": ""}, "question"),
        ("/search", {"question": "   \n"}, "question"),
        ("/search", {"question": "Why?", "k": 0}, "k"),
        ("/search", {"question": "Why?", "k": 101}, "k"),
        ("/search", {"question": "Why?", "k": "ten"}, "k"),
        ("/search", {"question": 42}, "question"),
        ("/search", {"k": 5}, "question"),
        ("/search", {"question": "Why?", "extra": 1}, "extra"),
        ("/similarity", {"q1": "Why?"}, "q2"),
        ("/similarity", {"q1": "Why?", "q2": ["a"]}, "q2"),
        ("/questions", {"text": "Why?", "metadata": [1, 2]}, "metadata"),
        ("/questions", {"text": "y" * 1001}, "text"),
    ],
)
def test_bad_fields_get_422_naming_the_field(client, path, body, field):
    r = client.post(path, json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    assert any(e["loc"][-1] == field for e in r.json()["detail"]), r.json()


def test_malformed_bodies_are_refused_as_json(client):
    for content in [b"{not json", b"[]", b'"just a string"']:
        r = client.post("/search", content=content, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and isinstance(r.json()["detail"], list)


def test_limits_are_inclusive(client):
    assert client.post("/search", json={"question": "q" * 1000, "k": 100}).status_code == 200
    assert client.post("/search", json={"question": "Why?", "k": 1}).status_code == 200


def test_oversized_bodies_get_413(client):
    big = {"text": "Why?", "metadata": {"blob": "z" * 70_000}}
    declared = client.post("/questions", json=big, headers=AUTH)
    assert declared.status_code == 413 and "bytes" in declared.json()["detail"]

    def chunks():  # no Content-Length: the size is only known as it streams in
        for _ in range(70):
            yield b" " * 1024

    streamed = client.post("/search", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413 and "bytes" in streamed.json()["detail"]
    assert client.get("/health").json()["questions"] == N


def test_library_errors_become_400(client, monkeypatch):
    collection = client.app.state.collection

    def refuse(queries, k=10, where=None, **options):
        raise DupqError("this question cannot be searched.")

    monkeypatch.setattr(collection, "search", refuse)
    r = client.post("/search", json={"question": "Why?"})
    assert r.status_code == 400 and r.json() == {"detail": "this question cannot be searched."}


def test_a_failed_batch_is_retried_item_by_item_unless_the_store_failed():
    """A batch that fails is retried one item at a time, so a bad item fails alone; a store failure (a full disk)
    answers the whole batch at once, as retrying each item alone would not help."""
    calls = []

    def fn(items):
        calls.append(list(items))
        if "full" in items:
            raise StoreFailure("the disk is full", "full")
        if "bad" in items:
            raise DupqError("bad item")
        return [item.upper() for item in items]

    async def submit(items):
        batcher = Batcher(fn, shared=lambda e: isinstance(e, StoreFailure))
        return await asyncio.gather(*(batcher.submit(x) for x in items), return_exceptions=True)

    a, bad, c, d = asyncio.run(submit(["a", "bad", "c", "d"]))
    assert (a, c, d) == ("A", "C", "D") and isinstance(bad, DupqError)
    assert calls == [["a", "bad", "c", "d"], ["a"], ["bad"], ["c"], ["d"]]  # one call, then each item alone
    calls.clear()
    assert all(isinstance(answer, StoreFailure) for answer in asyncio.run(submit(["a", "full", "c", "d"])))
    assert calls == [["a", "full", "c", "d"]]


def test_serve_command_reports_a_missing_collection(tmp_path):
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "nowhere")])
    refused(result, "does not exist")


# Faults: one test per class of fault that a hostile tester found in the service.

FAILING_BODIES = [
    ("/search", b'{"question": "\\ud800 hello"}'),
    ("/search", b'{"question": "How?", "k": NaN}'),
    ("/search", b'{"question": "How?", "k": Infinity}'),
    ("/similarity", b'{"q1": "How?", "q2": "-Infinity", "x": -Infinity}'),
    ("/questions", b'{"text": "A new question about NaN?", "metadata": {"score": NaN}}'),
    ("/questions", b'{"text": "A new question?", "metadata": {"\\udfff": 1}}'),
    ("/search", b'{"question": "How?", "k": true}'),
    ("/search", b'{"question": "How?", "k": "3"}'),
    ("/search", b'{"question": "How?", "k": 3.5}'),
    ("/similarity", b'{"q1": "\\u001c", "q2": "\\u001d"}'),
    ("/similarity", b'{"q1": "???", "q2": "!!!"}'),
    ("/questions", b'{"text": "..."}'),
    ("/search", b'{"question": "caf\xe9"}'),
]


@pytest.mark.parametrize("path, body", FAILING_BODIES)
def test_hostile_bodies_get_a_json_422_and_store_nothing(client, path, body):
    r = client.post(path, content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/json" and r.json()["detail"]
    assert {name.decode() for name, _ in SECURITY_HEADERS} <= set(r.headers)
    assert client.get("/health").json()["questions"] == N


def test_concurrent_adds_after_a_failing_commit_are_stored_once(coll_dir, monkeypatch):
    """The cache write fails after every commit (a full disk). 5 concurrent adds without a key, each retried by its
    client after a server error: each stored once (an add that fails after its commit shows as twice). 5 with an
    Idempotency-Key, every one retried: the same ids, and a key sent with another question is a conflict."""

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dupq.collection.folder.cache, "SAVE_DURING_ADD", 1)
    monkeypatch.setattr(dupq.index.vectors, "atomic_write", full_disk)
    countries = ("Kenya", "Chile", "Japan", "Norway", "Mexico")
    keyless = [f"What language is spoken in {country}?" for country in countries]
    new = [f"What is the tallest mountain in {country}?" for country in countries]
    with TestClient(create_app(coll_dir, token=TOKEN), raise_server_exceptions=False) as c:
        questions = c.get("/health").json()["questions"]
        vectors = c.app.state.collection.model.encode(keyless + new)
        assert len({v.tobytes() for v in vectors}) == 10  # the model tells them apart, so a search finds each
        codes = []

        def add_keyless(text):  # nothing makes a retry safe: one retry after a server error
            for _ in range(2):
                codes.append(c.post("/questions", json={"text": text}, headers=AUTH).status_code)
                if codes[-1] < 500:
                    return

        with ThreadPoolExecutor(5) as pool:
            list(pool.map(add_keyless, keyless))
        twice = c.get("/health").json()["questions"] - questions - len(keyless)
        assert twice == 0 and max(codes) < 500, f"{twice} stored twice; answers {sorted(codes)}"

        def add(i):
            return c.post("/questions", json={"text": new[i]}, headers={**AUTH, "Idempotency-Key": f"req-{i}"})

        with ThreadPoolExecutor(5) as pool:
            first = list(pool.map(add, range(5)))
        assert [r.status_code for r in first] == [201] * 5
        again = [add(i) for i in range(5)]  # a client retrying every request
        assert [r.json()["id"] for r in again] == [r.json()["id"] for r in first]
        by_body = c.post("/questions", json={"text": new[0], "key": "req-0"}, headers=AUTH)
        assert by_body.json()["id"] == first[0].json()["id"]
        conflict = c.post(
            "/questions", json={"text": "Another question entirely?"}, headers={**AUTH, "Idempotency-Key": "req-0"}
        )
        assert conflict.status_code == 409 and "req-0" in conflict.json()["detail"]
        mismatch = c.post("/questions", json={"text": new[1], "key": "a"}, headers={**AUTH, "Idempotency-Key": "b"})
        assert mismatch.status_code == 409
        assert c.get("/health").json()["questions"] == questions + 10
        found = [
            h["text"] for q in keyless + new for h in c.post("/search", json={"question": q, "k": 1}).json()["results"]
        ]
        assert found == keyless + new


def test_the_server_sees_adds_of_another_process(client):
    new = "Which river flows through the most countries in the world?"
    with Collection.open(client.app.state.collection.location) as other:
        (new_id,) = other.add([new])
    top = client.post("/search", json={"question": new, "k": 1}).json()["results"][0]
    assert (top["id"], top["text"]) == (new_id, new)


def test_scores_are_clamped_and_refusals_are_json(client, monkeypatch):
    judged = {"similarity": 1.0000001, "probability": None, "duplicate": True, "threshold": 0.7}  # float32 rounding
    monkeypatch.setattr(route, "judge", lambda model, a, b: [judged])
    assert client.post("/similarity", json={"q1": "How?", "q2": "Why?"}).json()["similarity"] == 1.0
    monkeypatch.setattr(route, "judge", lambda model, a, b: 1 / 0)  # a bug: still a JSON answer
    r = TestClient(client.app, raise_server_exceptions=False).post("/similarity", json={"q1": "How?", "q2": "Why?"})
    assert r.status_code == 500 and r.json() == {"detail": "internal error; the server log has the details."}
    for r in (client.get("/nowhere"), client.put("/search"), client.get("/static/nothing.js")):
        assert r.status_code in (404, 405) and r.headers["content-type"] == "application/json"
    assert client.head("/").status_code == 200


def test_security_headers_and_no_cdn(client):
    for r in (client.get("/"), client.get("/health"), client.post("/search", json={})):
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "default-src 'self'" in r.headers["content-security-policy"]
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert "cdn" not in client.get("/").text.lower()
    assert client.get("/openapi.json").status_code == 200


def test_slow_bodies_are_cut_off(coll_dir):

    with LiveServer(create_app(coll_dir, token=TOKEN, body_timeout=0.5)) as server:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            started = time.monotonic()
            sock.settimeout(10)
            answer = sock.recv(4096)
            assert time.monotonic() - started < 5
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 seconds" in answer
        assert b"content-security-policy" in answer.lower()


def test_serve_on_a_port_in_use_fails_before_announcing(built, tmp_path):

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", str(built), "--port", str(port)])
    assert refused(result).startswith("error: cannot listen on 127.0.0.1:") and "serving" not in result.output


def test_search_is_reranked_where_the_collection_has_a_reranker(tmp_path, texts, tiny_model, head_model):
    """/search orders and judges by the collection's reranker; "rerank": false gives the model's order; a
    collection without one refuses "rerank": true in one sentence, a 409 (the schema allows the request)."""
    Collection.build(tmp_path / "r", texts, tiny_model, rerank=head_model).close()
    query = texts[7]
    with TestClient(create_app(tmp_path / "r", token=TOKEN)) as c:
        collection = c.app.state.collection
        reranked = c.post("/search", json={"question": query, "k": 5}).json()
        plain = c.post("/search", json={"question": query, "k": 5, "rerank": False}).json()
        want = collection.search([query], k=5)[0]
        fast = collection.search([query], k=5, rerank=False)[0]
    assert [r["id"] for r in reranked["results"]] == [h.id for h in want]
    assert {r["ranked_by"] for r in reranked["results"]} == {"reranker"}
    assert reranked["threshold"] == head_model.threshold and plain["threshold"] == tiny_model.threshold
    assert [r["id"] for r in plain["results"]] == [h.id for h in fast]
    assert {r["ranked_by"] for r in plain["results"]} == {"model"}
    Collection.build(tmp_path / "p", texts[:20], tiny_model).close()
    with TestClient(create_app(tmp_path / "p", token=TOKEN)) as c:
        answer = c.post("/search", json={"question": query, "rerank": True})
    assert answer.status_code == 409 and "has no reranker" in answer.json()["detail"]
    assert str(tmp_path) not in answer.json()["detail"]  # the server's folder is its own business
