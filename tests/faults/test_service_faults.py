"""Faults of `dupq serve` as a user runs it: headers on every answer, protected reads, kill -9 under load, and
adds by other processes.

Faults a server in this process shows alike (nested, hostile and slow bodies, 5xx failures, adds whose cache write
fails after the commit) and idle connections are tested beside the app, in tests/service; test_mutations.py runs
those that name a fault against a broken dupq too.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from faultkit import AUTH, SECURITY_HEADERS, TOPICS, Server, build, dupq, stored

from support.serving import http as request

pytestmark = pytest.mark.faults


def test_security_headers_everywhere(tmp_path: Path):
    """Every route and every refusal of `dupq serve` carries the security headers: 200, 201, 401, 404, 405, 409, 413,
    422 (a bug's 500: tests/service/test_service_limits.py)."""
    folder = build(tmp_path / "c")
    search = json.dumps({"question": "How do I learn Python?"}).encode()
    new = json.dumps({"text": "New?", "key": "n"}).encode()
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
            ("POST /questions", 201): request(u + "/questions", new, AUTH),
            ("key conflict", 409): request(u + "/questions", json.dumps({"text": "Other?", "key": "n"}).encode(), AUTH),
            ("no token", 401): request(u + "/questions", json.dumps({"text": "New?"}).encode()),
            ("no route", 404): request(u + "/nowhere"),
            ("PUT /search", 405): request(u + "/search", search, method="PUT"),
            ("too large", 413): request(u + "/search", b" " * 70_000),
            ("bad field", 422): request(u + "/search", b'{"question": 3}'),
        }
    assert [name for (name, status), a in answers.items() if a.status != status] == []
    assert [name for (name, _), a in answers.items() if not set(SECURITY_HEADERS) <= a.headers.keys()] == []


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
