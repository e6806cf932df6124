"""Faults of `dupq serve` as a user runs it: headers on every answer, protected reads, kill -9 under load, other
processes' adds, and adds whose cache write fails after the commit (a full disk, injected in an in-process app).

The service's limits (nested, hostile and slow bodies, idle connections, 5xx failures) are tested beside the app
in tests/service, those that name a fault mutation-tested from test_mutations.py.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from faultkit import AUTH, TOPICS, Server, build, client, dupq, lacks_headers, stored, synthetic

from support.serving import http as request

pytestmark = pytest.mark.faults


def test_adds_after_a_failing_commit(tmp_path: Path, monkeypatch):
    """The cache write fails after every commit (a full disk): 5 concurrent adds without keys, each retried by
    its client if it failed: every question stored once (an add that fails after its commit shows as twice)."""
    import dupq.collection.folder.cache
    import dupq.index.vectors

    folder = build(tmp_path / "c")
    monkeypatch.setattr(dupq.collection.folder.cache, "SAVE_DURING_ADD", 1)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dupq.index.vectors, "atomic_write", full_disk)
    new, codes = synthetic(5, offset=100), []
    with client(folder) as c:

        def add(i):  # a client: no key (nothing makes a retry safe), one retry after a server error
            for _ in range(2):
                codes.append(c.post("/questions", json={"text": new[i]}, headers=AUTH).status_code)
                if codes[-1] < 500:
                    return

        with ThreadPoolExecutor(5) as pool:
            list(pool.map(add, range(5)))
    texts = [t for _, _, t in stored(folder)]
    twice = sum(max(texts.count(t) - 1, 0) for t in new)
    assert twice == 0 and all(code < 500 for code in codes), f"{twice} stored twice; answers {sorted(codes)}"
    assert all(t in texts for t in new)


def test_security_headers_everywhere(tmp_path: Path):
    """Every route and every refusal of `dupq serve` carries the security headers: 200, 201, 401, 404, 405, 409, 413,
    422 (a bug's 500: tests/service/test_service_limits.py)."""
    folder = build(tmp_path / "c")
    search = json.dumps({"question": "How do I learn Python?"}).encode()
    with Server(folder) as server:
        u = server.url
        answers = {
            ("GET /", 200): request(u + "/"),
            ("HEAD /", 200): request(u + "/", method="HEAD"),
            ("GET /health", 200): request(u + "/health"),
            ("GET /static/app.js", 200): request(u + "/static/app.js"),
            ("GET /openapi.json", 200): request(u + "/openapi.json"),
            ("POST /search", 200): request(u + "/search", search),
            ("POST /similarity", 200): request(u + "/similarity", json.dumps({"q1": "How?", "q2": "Why?"}).encode()),
            ("POST /questions", 201): request(
                u + "/questions", json.dumps({"text": "New?", "key": "n"}).encode(), AUTH
            ),
            ("key conflict", 409): request(u + "/questions", json.dumps({"text": "Other?", "key": "n"}).encode(), AUTH),
            ("no token", 401): request(u + "/questions", json.dumps({"text": "New?"}).encode()),
            ("no route", 404): request(u + "/nowhere"),
            ("PUT /search", 405): request(u + "/search", search, method="PUT"),
            ("too large", 413): request(u + "/search", b" " * 70_000),
            ("bad field", 422): request(u + "/search", b'{"question": 3}'),
        }
    assert [name for (name, status), a in answers.items() if a.status != status] == []
    assert [name for (name, _), a in answers.items() if lacks_headers(a)] == []


def test_protect_reads(tmp_path: Path):
    """`serve --protect-reads` guards reads, /health too (the app's own manners: tests/service/test_service.py)."""
    folder = build(tmp_path / "c")
    with Server(folder, "--protect-reads") as server:
        codes = [request(server.url + "/health").status, request(server.url + "/health", headers=AUTH).status]
    assert codes == [401, 200]


def test_kill_9_server_under_load(tmp_path: Path):
    """Crash safety: kill -9 the server during concurrent adds and searches; acknowledged adds survive."""
    folder = build(tmp_path / "c", index="hnsw")
    acknowledged, errors = {}, []
    stop = threading.Event()
    with Server(folder) as server:

        def client(n: int) -> None:
            i = 0
            while not stop.is_set():
                text = f"Client {n} asks question number {i} about {TOPICS[i % 10]}?"
                try:
                    answer = request(server.url + "/questions", json.dumps({"text": text}).encode(), AUTH)
                    request(server.url + "/search", json.dumps({"question": text, "k": 3}).encode())
                except OSError:
                    return
                if answer.status == 201:
                    acknowledged[text] = json.loads(answer.body)["id"]
                elif answer.status >= 500:
                    errors.append(answer.status)
                i += 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        time.sleep(6)
        server.proc.kill()
        stop.set()
        for t in threads:
            t.join()
    rows = {t: i for i, _, t in stored(folder)}
    assert acknowledged and 500 not in errors
    assert [text for text, i in acknowledged.items() if rows.get(text) != i] == []  # acknowledged, then lost
    with Server(folder) as again:
        assert json.loads(request(again.url + "/health").body)["questions"] == len(rows)


def test_reads_see_other_processes(tmp_path: Path):
    """A running server finds a question that `dupq index add` (another process) stored."""
    folder = build(tmp_path / "c")
    question = "Which river flows through the most countries?"
    with Server(folder) as server:
        request(server.url + "/search", json.dumps({"question": "warm up"}).encode())
        dupq("index", "add", str(folder), question)
        answer = request(server.url + "/search", json.dumps({"question": question, "k": 1}).encode())
    assert answer.status == 200 and json.loads(answer.body)["results"][0]["text"] == question
