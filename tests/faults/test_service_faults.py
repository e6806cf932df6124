"""Faults of the service: hostile and deeply nested bodies, headers on every answer, slow and idle
connections, server-side failures, kill -9 under load, adds whose cache write fails after the commit.

Most tests run ``dupq serve`` in a subprocess (:class:`faultkit.Server`); a test that must inject a
fault into the server (a full disk, a bug) runs the app in this process with FastAPI's TestClient.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from faultkit import AUTH, TOPICS, Server, build, client, dupq, lacks_headers, stored, synthetic

from support.errors import library_refuses
from support.private import writer_connection
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


def _nested(depth: int) -> bytes:
    """JSON metadata ``depth`` levels deep: ``{"a": {"a": ... {}}}``."""
    return b'{"a": ' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def test_deeply_nested_bodies(tmp_path: Path):
    """`[` x 30,000 and metadata nested 1,500, 300 or 33 deep: 422 with the security headers, nothing stored;
    32 deep (the limit) is stored and a search returning it answers 200; the library refuses 33 deep too."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c")
    deepest = "How deeply may metadata nest?"
    with Server(folder) as server:
        refusals = [request(server.url + "/search", b"[" * 30_000)] + [
            request(server.url + "/questions", b'{"text": "How deep?", "metadata": ' + _nested(d) + b"}", AUTH)
            for d in (1500, 300, 33)
        ]
        body = json.dumps({"text": deepest}).encode()[:-1] + b', "metadata": ' + _nested(32) + b"}"
        added = request(server.url + "/questions", body, AUTH)
        found = request(server.url + "/search", json.dumps({"question": deepest, "k": 1}).encode())
        assert not server.tracebacks()
    metadata: dict = {}
    for _ in range(32):
        metadata = {"a": metadata}  # 33 levels
    with Collection.open(folder) as coll:
        assert library_refuses(lambda: coll.add(["A question with metadata too deep?"], metadata=[metadata]))
    answers = [*refusals, added, found]
    assert [a.status for a in answers] == [422] * 4 + [201, 200]
    assert not any(lacks_headers(a) for a in answers) and len(stored(folder)) == 41


def test_security_headers_everywhere(tmp_path: Path):
    """Every route and every refusal carries the security headers: 200, 201, 401, 404, 405, 409, 413, 422, and
    the JSON 500 of a bug (injected in an in-process server)."""
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

    def boom(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    with client(folder) as c:
        c.app.state.collection.search = boom
        bug = c.post("/search", json={"question": "How?"})
    assert [name for (name, status), a in answers.items() if a.status != status] == [] and bug.status_code == 500
    assert [name for (name, _), a in answers.items() if lacks_headers(a)] == [] and not lacks_headers(bug)


def test_hostile_json_bodies(tmp_path: Path):
    """NaN, Infinity, lone surrogates, k true / "3", control characters: JSON 4xx, never 500."""
    folder = build(tmp_path / "c")
    bodies = [
        ("/search", b'{"question": "\\ud800 hi"}'),
        ("/search", b'{"question": "hi", "k": NaN}'),
        ("/similarity", b'{"q1": "a", "q2": "b", "x": Infinity}'),
        ("/questions", b'{"text": "New?", "metadata": {"a": NaN}}'),
        ("/search", b'{"question": "hi", "k": true}'),
        ("/search", b'{"question": "hi", "k": "3"}'),
        ("/similarity", b'{"q1": "\\u001c", "q2": "\\u001d"}'),
        ("/search", b'{"question": "caf\xe9"}'),
    ]
    with Server(folder) as server:
        answers = [request(server.url + path, body, AUTH) for path, body in bodies]
    assert [a.status for a in answers] == [422] * len(bodies)
    assert all(isinstance(json.loads(a.body)["detail"], (str, list)) for a in answers)
    assert not any(lacks_headers(a) for a in answers)


def test_protect_reads(tmp_path: Path):
    """`serve --protect-reads` guards reads, /health too (the app's own manners: tests/service/test_service.py)."""
    folder = build(tmp_path / "c")
    with Server(folder, "--protect-reads") as server:
        codes = [request(server.url + "/health").status, request(server.url + "/health", headers=AUTH).status]
    assert codes == [401, 200]


def test_slow_request_bodies(tmp_path: Path):
    """A client that sends half a body is answered 408 (after 10 s) instead of holding the connection."""
    folder = build(tmp_path / "c")
    with Server(folder) as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        sock.settimeout(30)
        started = time.monotonic()
        answer = sock.recv(4096)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408") and b"content-security-policy" in answer.lower(), answer[:300]
    assert waited < 20


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


def test_idle_and_trickling_connections(tmp_path: Path):
    """Connections that send nothing, or trickle a header a byte a second, are closed (in 10 s), so with 1,100 idle
    sockets against a server allowed 1,024 open files a client retrying /health gets in within 20 s."""
    folder = build(tmp_path / "c")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:  # this process holds the 1,100 sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))

    def cramped():  # the server's limits, as on a machine left at 1,024 open files
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    with Server(folder, preexec_fn=cramped) as server:
        started = time.monotonic()
        trickler = socket.create_connection(("127.0.0.1", server.port))  # first, so that the server takes it
        trickler.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(1100)]
        with ThreadPoolExecutor(1) as pool:
            health = pool.submit(_health_within, server.url, started, 30)
            trickled = _closed_after(trickler, started, lambda: trickler.sendall(b"a"))
            idled = _closed_after(idle[0], started)
            answered = health.result()
        for sock in [*idle, trickler]:
            sock.close()
    assert answered < 20 and trickled < 15 and idled < 15, (answered, trickled, idled)


def _health_within(url: str, started: float, limit: float) -> float:
    """Seconds from ``started`` until ``/health`` answers 200, asking again each second (``limit`` if it never does)."""
    while time.monotonic() - started < limit:
        try:
            if request(url + "/health").status == 200:
                return time.monotonic() - started
        except OSError:  # reset, refused or timed out: the server had no room for the connection
            time.sleep(1)
    return limit


def _closed_after(sock: socket.socket, started: float, every_second=None, limit: float = 30) -> float:
    """Seconds from ``started`` until the server closes ``sock`` (``limit`` if it never does), calling ``every_second`` meanwhile."""
    while time.monotonic() - started < limit:
        try:
            if every_second is not None:
                every_second()
            poll = select.poll()  # not select(): these sockets' numbers pass 1,024
            poll.register(sock, select.POLLIN)
            if poll.poll(1000) and sock.recv(4096) == b"":
                return time.monotonic() - started
        except OSError:  # reset or broken pipe: closed
            return time.monotonic() - started
    return limit


def test_server_side_failures_are_5xx(tmp_path: Path, monkeypatch):
    """A full disk is 507 and a write lock held by another process 503 with Retry-After, each a sentence with
    the security headers (not a 400, not "cannot rollback"); searches still answer; nothing half stored."""
    import dupq.collection.folder.store

    folder = build(tmp_path / "c")
    monkeypatch.setattr(
        dupq.collection.folder.store, "BUSY_TIMEOUT", 1.0, raising=False
    )  # how long an add waits for the lock
    with client(folder) as c:
        writer = writer_connection(c.app.state.collection)
        pages = writer.execute("PRAGMA page_count").fetchone()[0]
        writer.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full: no page more
        full = c.post("/questions", json={"text": "Is the disk full?", "metadata": {"pad": "x" * 20_000}}, headers=AUTH)
        writer.execute("PRAGMA max_page_count = 1073741823")
        other = sqlite3.connect(folder / "questions.sqlite", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        busy = c.post("/questions", json={"text": "Is the store busy?"}, headers=AUTH)
        search = c.post("/search", json={"question": "How do I learn Python?"})
        other.execute("ROLLBACK")
        other.close()
        after = c.post("/questions", json={"text": "Is the store free again?"}, headers=AUTH)
    assert [a.status_code for a in (full, busy, search, after)] == [507, 503, 200, 201]
    assert "disk is full" in full.json()["detail"] and "write lock" in busy.json()["detail"]
    assert busy.headers.get("retry-after", "").isdigit()
    assert not lacks_headers(full) and not lacks_headers(busy) and len(stored(folder)) == 41
