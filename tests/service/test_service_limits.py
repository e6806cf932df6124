"""The service's limits and failures, each a promise of the README's "what bad input gets": a body nested too deep
is a 422 before anything parses it; every answer, a bug's 500 included, carries the security headers; a full disk is
a 507 and a busy store a 503 with ``Retry-After``, never a 400; a connection that does not deliver a request's
headers in time is closed.

A test takes the collection it serves as its first argument, ``folder``, so that ``tests/faults/test_mutations.py``
can run it against a deliberately broken dupq and show that it fails on the fault it names."""

from __future__ import annotations

import json
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dupq.collection.collection import Collection
from dupq.collection.folder.backend import DATABASE
from dupq.modeling.model import Model
from dupq.service import connections
from dupq.service.app import create_app
from dupq.service.connections import HEADER_TIMEOUT, KEEP_ALIVE
from support.private import writer_connection
from support.serving import LiveServer, ServeProcess, http

TOKEN = "limits-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")
TEXTS = [f"How do I learn about {topic} in step {i}?" for i, topic in enumerate(["Python", "rice", "chess"] * 10)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("limits") / "c"
    Collection.build(folder, TEXTS, Model.load()).close()
    return folder


@pytest.fixture
def folder(built, tmp_path) -> Path:
    return shutil.copytree(built, tmp_path / "c")


def served(folder: Path) -> TestClient:
    """The service of ``folder`` in this process; a bug's exception is answered as the app answers it, a 500."""
    return TestClient(create_app(folder, token=TOKEN), raise_server_exceptions=False)


def guarded(r) -> bool:
    """A JSON answer with a detail and every security header."""
    return all(name in r.headers for name in SECURITY_HEADERS) and bool(r.json()["detail"])


def nested(depth: int) -> bytes:
    """JSON metadata ``depth`` levels deep: ``{"a": {"a": ... {}}}``."""
    return b'{"a": ' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def add_body(text: str, depth: int) -> bytes:
    return json.dumps({"text": text}).encode()[:-1] + b', "metadata": ' + nested(depth) + b"}"


def test_deeply_nested_bodies_are_refused_before_parsing(folder):
    """`[` x 30,000 made the parser recurse (a 500); 300 levels were stored and then failed every search."""
    headers = {**AUTH, "Content-Type": "application/json"}
    with served(folder) as client:
        questions = client.get("/health").json()["questions"]
        deep = [client.post("/search", content=b"[" * 30_000, headers=headers)]
        deep += [client.post("/questions", content=add_body("How deep?", d), headers=headers) for d in (1500, 300, 33)]
        assert [r.status_code for r in deep] == [422] * 4 and all(guarded(r) for r in deep)
        assert "nests objects and arrays more than 33 levels" in deep[0].json()["detail"][0]["msg"]
        assert client.get("/health").json()["questions"] == questions
        limit = client.post("/questions", content=add_body("How deeply may metadata nest?", 32), headers=headers)
        assert limit.status_code == 201
        hit = client.post("/search", json={"question": "How deeply may metadata nest?", "k": 1}).json()["results"][0]
    assert hit["metadata"] == json.loads(nested(32))


def test_a_bugs_500_carries_the_security_headers(folder, monkeypatch):
    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    with served(folder) as client:
        monkeypatch.setattr(client.app.state.collection, "search", bug)
        r = client.post("/search", json={"question": "How do I learn Python?"})
    assert r.status_code == 500 and guarded(r) and r.json()["detail"].startswith("internal error")


def test_a_full_disk_is_507_and_a_busy_store_503(folder):
    """Both were 400s ("cannot rollback - no transaction is active", "database is locked"): the server's failures."""
    with served(folder) as client:
        questions = client.get("/health").json()["questions"]
        writer = writer_connection(client.app.state.collection)
        pages = writer.execute("PRAGMA page_count").fetchone()[0]
        writer.execute(f"PRAGMA max_page_count = {pages}")  # no page more: SQLite's "database or disk is full"
        full = client.post(
            "/questions", json={"text": "Is the disk full?", "metadata": {"pad": "x" * 20_000}}, headers=AUTH
        )
        assert full.status_code == 507 and guarded(full) and "disk is full" in full.json()["detail"]
        assert "rollback" not in full.json()["detail"]
        writer.execute("PRAGMA max_page_count = 1073741823")

        writer.execute("PRAGMA busy_timeout = 500")  # wait half a second for the lock, not BUSY_TIMEOUT's 30
        other = sqlite3.connect(folder / DATABASE, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            busy = client.post("/questions", json={"text": "Is the store busy?"}, headers=AUTH)
            assert busy.status_code == 503 and guarded(busy) and "write lock" in busy.json()["detail"]
            assert int(busy.headers["retry-after"]) > 0
            assert client.post("/search", json={"question": "How do I learn Python?"}).status_code == 200
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert client.post("/questions", json={"text": "Is the store free again?"}, headers=AUTH).status_code == 201
        assert client.get("/health").json()["questions"] == questions + 1


def connect(port: int, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(first)
    return sock


def closed_after(sock: socket.socket, started: float, limit: float, trickle: bytes = b"") -> float:
    """Seconds from ``started`` until the server closes ``sock`` (``limit`` if it does not), sending ``trickle`` each second."""
    sock.settimeout(1.0)
    while time.monotonic() - started < limit:
        try:
            if trickle:
                sock.sendall(trickle)
            if sock.recv(4096) == b"":
                break
        except TimeoutError:
            continue
        except OSError:
            break
    return time.monotonic() - started


def test_idle_and_trickling_connections_are_closed(folder):
    """`dupq serve` as a user runs it, on a machine left at 1,024 open files: a connection must deliver a request's
    headers within 10 s (old: never closed), so 1,100 idle sockets keep a client retrying /health out for no longer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:  # this process holds the 1,100 sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))

    def cramped():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    with ServeProcess(folder, preexec_fn=cramped) as server:
        started = time.monotonic()
        trickler = connect(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # first: the server takes it
        kept = connect(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # answered, then left open
        idle = [connect(server.port) for _ in range(1100)]
        with ThreadPoolExecutor(1) as pool:
            health = pool.submit(health_within, server.url, started, 30)
            kept.settimeout(10)
            assert kept.recv(4096).startswith(b"HTTP/1.1 200")
            kept_closed = closed_after(kept, time.monotonic(), 30)
            trickled = closed_after(trickler, started, 30, trickle=b"a")
            idled = closed_after(idle[0], started, 30)
            answered = health.result()
        for sock in (*idle, trickler, kept):
            sock.close()
    assert HEADER_TIMEOUT - 1 < idled < HEADER_TIMEOUT + 3
    assert HEADER_TIMEOUT - 1 < trickled < HEADER_TIMEOUT + 3
    assert kept_closed < KEEP_ALIVE + 3 and answered < 2 * HEADER_TIMEOUT


def health_within(url: str, started: float, limit: float) -> float:
    """Seconds from ``started`` until ``/health`` answers 200, asking again each second (``limit`` if it never does)."""
    while time.monotonic() - started < limit:
        try:
            if http(url + "/health").status == 200:
                return time.monotonic() - started
        except OSError:  # reset, refused or timed out: the server had no room for the connection
            time.sleep(1)
    return limit


def test_a_request_whose_headers_arrive_in_time_is_answered(folder):
    """The deadline cuts only what is late: a client that pauses under it is served, on the same connection too."""
    with LiveServer(create_app(folder, token=TOKEN), header_timeout=1.0) as server:
        sock = connect(server.port, b"GET /health HTTP/1.1\r\n")
        time.sleep(0.5)
        sock.sendall(b"Host: x\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(0.5)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        assert closed_after(sock, time.monotonic(), 10) < 3  # then idle past the deadline: closed
        sock.close()


def test_serve_raises_its_open_files_limit_to_the_hard_limit():
    """1,024 open files (a common default) is 1,000 idle sockets; the hard limit is often far higher."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 2048)); "
        "from dupq.service.connections import allow_many_connections; print(allow_many_connections(), "
        "resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["2048", "2048"]


@pytest.mark.parametrize("base", ["httptools", "h11"])
def test_a_request_uvicorn_cannot_parse_gets_the_security_headers(folder, base, monkeypatch):
    """A malformed request is answered by uvicorn itself, before the app: a 400 that closes the
    connection and carries the headers every other answer carries (old: uvicorn's bare 400)."""
    if base == "h11":  # the protocol uvicorn falls back to without httptools
        from uvicorn.protocols.http.h11_impl import H11Protocol

        monkeypatch.setattr(
            connections, "protocol", lambda t: type("DeadlineH11", (connections.HeaderDeadline, H11Protocol), {})
        )
    with LiveServer(create_app(folder, token=TOKEN)) as server:
        sock = connect(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
        sock.settimeout(10)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("ascii").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    assert status.startswith("HTTP/1.1 400") and b"Invalid HTTP request" in body
    assert all(name in headers for name in SECURITY_HEADERS)
    assert int(headers["content-length"]) == len(body) and headers["connection"] == "close"
