"""Fault cases of the service: hostile and deeply nested bodies, headers on every answer, slow and idle
connections, server-side failures, kill -9 under load, adds whose cache write fails after the commit.

Most cases run ``dupq serve`` in a subprocess (:class:`faultkit.Server`); a case that must inject a
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
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from faultkit import AUTH, TOPICS, Result, Server, build, dupq, http, lacks_headers, refused, request, stored, synthetic


def adds_after_a_failing_commit(tmp: Path) -> Result:
    """The cache write fails after every commit (a full disk): 5 concurrent adds without keys, each retried by
    its client if it failed: every question stored once (an add that fails after its commit shows as twice)."""
    from fastapi.testclient import TestClient

    import dupq.search.cache
    import dupq.search.vectors
    from dupq.service.app import create_app

    folder = build(tmp / "c")
    saved = dupq.search.cache.SAVE_DURING_ADD, dupq.search.vectors.atomic_write
    dupq.search.cache.SAVE_DURING_ADD = 1

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    dupq.search.vectors.atomic_write = full_disk
    codes = []
    try:
        new = synthetic(5, offset=100)
        with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as c:

            def add(i):  # a client: no key (nothing makes a retry safe), one retry after a server error
                for _ in range(2):
                    code = c.post(
                        "/questions", json={"text": new[i]}, headers={"Authorization": "Bearer t"}
                    ).status_code
                    codes.append(code)
                    if code < 500:
                        return

            with ThreadPoolExecutor(5) as pool:
                list(pool.map(add, range(5)))
    finally:
        dupq.search.cache.SAVE_DURING_ADD, dupq.search.vectors.atomic_write = saved
    texts = [t for _, _, t in stored(folder)]
    twice = sum(max(texts.count(t) - 1, 0) for t in new)
    lost = sum(t not in texts for t in new)
    errors = sum(code >= 500 for code in codes)
    return Result(
        errors == 0 and twice == 0 and lost == 0,
        data_lost=lost,
        server_500s=sum(code == 500 for code in codes),
        detail=f"{twice} stored twice; answers {sorted(codes)}",
    )


def _nested(depth: int) -> bytes:
    """JSON metadata ``depth`` levels deep: ``{"a": {"a": ... {}}}``."""
    return b'{"a": ' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def deeply_nested_bodies(tmp: Path) -> Result:
    """`[` x 30,000 and metadata nested 1,500, 300 or 33 deep: 422 with the security headers, nothing stored;
    32 deep (the limit) is stored and a search returning it answers 200; the library refuses 33 deep too."""
    from dupq.core.files import DupqError
    from dupq.search.collection import Collection

    folder = build(tmp / "c")
    deepest = "How deeply may metadata nest?"
    with Server(folder) as server:
        refusals = [request(server.url + "/search", b"[" * 30_000)] + [
            request(server.url + "/questions", b'{"text": "How deep?", "metadata": ' + _nested(d) + b"}", AUTH)
            for d in (1500, 300, 33)
        ]
        body = json.dumps({"text": deepest}).encode()[:-1] + b', "metadata": ' + _nested(32) + b"}"
        added = request(server.url + "/questions", body, AUTH)
        found = request(server.url + "/search", json.dumps({"question": deepest, "k": 1}).encode())
        tracebacks = server.tracebacks()
    metadata: dict = {}
    for _ in range(32):
        metadata = {"a": metadata}  # 33 levels
    try:
        with Collection.open(folder) as coll:
            coll.add(["A question with metadata too deep?"], metadata=[metadata])
        library = False
    except DupqError:
        library = True
    answers = [*refusals, added, found]
    ok = [a.status for a in refusals] == [422] * 4 and added.status == 201 and found.status == 200
    ok = ok and library and not any(lacks_headers(a) for a in answers) and len(stored(folder)) == 41
    return Result(
        ok,
        tracebacks=tracebacks,
        server_500s=sum(a.status == 500 for a in answers),
        detail=f"{[a.status for a in answers]}, library refused: {library}",
    )


def security_headers_everywhere(tmp: Path) -> Result:
    """Every route and every refusal carries the security headers: 200, 201, 401, 404, 405, 409, 413, 422, and
    the JSON 500 of a bug (injected in an in-process server)."""
    from fastapi.testclient import TestClient

    from dupq.service.app import create_app

    folder = build(tmp / "c")
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

    with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as c:
        c.app.state.collection.search = boom
        answers[("a bug", 500)] = c.post("/search", json={"question": "How?"})
    wrong = [name for (name, status), a in answers.items() if _status(a) != status]
    bare = [name for (name, _), a in answers.items() if lacks_headers(a)]
    return Result(
        not wrong and not bare,
        server_500s=sum(_status(a) == 500 for (name, _), a in answers.items() if name != "a bug"),
        detail=f"wrong status: {wrong}; without headers: {bare}",
    )


def _status(answer) -> int:
    """The status of a :class:`faultkit.Answer` or of a TestClient response."""
    return answer.status if hasattr(answer, "status") else answer.status_code


def hostile_json_bodies(tmp: Path) -> Result:
    """NaN, Infinity, lone surrogates, k true / "3", control characters: JSON 4xx, never 500."""
    folder = build(tmp / "c")
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
    codes = [a.status for a in answers]
    json_ok = all(isinstance(json.loads(a.body)["detail"], (str, list)) for a in answers)
    ok = codes == [422] * len(bodies) and json_ok and not any(lacks_headers(a) for a in answers)
    return Result(ok, server_500s=sum(c == 500 for c in codes), detail=str(codes))


def service_manners(tmp: Path) -> Result:
    """HEAD /, JSON refusals, security headers, no CDN docs, protected reads incl. /health."""
    folder = build(tmp / "c")
    with Server(folder, "--protect-reads") as server:
        request = urllib.request.Request(server.url + "/")
        with urllib.request.urlopen(request) as r:
            headers, page = r.headers, r.read()
        codes = {
            "head": http(server.url + "/", method="HEAD")[0],
            "docs": http(server.url + "/docs")[0],
            "health open": http(server.url + "/health")[0],
            "health token": http(server.url + "/health", headers=AUTH)[0],
            "missing": http(server.url + "/nowhere")[0],
        }
    ok = codes == {"head": 200, "docs": 404, "health open": 401, "health token": 200, "missing": 404}
    ok = ok and "default-src 'self'" in headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"
    ok = (
        ok
        and headers["X-Content-Type-Options"] == "nosniff"
        and b'id="token-form"' in page
        and b"cdn" not in page.lower()
    )
    return Result(ok, detail=str(codes))


def serve_on_a_port_in_use(tmp: Path) -> Result:
    """The error comes before any "serving ..." line."""
    folder = build(tmp / "c")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        run = dupq("serve", str(folder), "--port", str(taken.getsockname()[1]))
    ok, tracebacks = refused(run)
    return Result(ok and b"serving" not in run.stdout, tracebacks=tracebacks)


def slow_request_bodies(tmp: Path) -> Result:
    """A client that sends half a body is answered 408 (after 10 s) instead of holding the connection."""
    folder = build(tmp / "c")
    with Server(folder) as server:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            sock.settimeout(30)
            started = time.monotonic()
            answer = sock.recv(4096)
            waited = time.monotonic() - started
    ok = answer.startswith(b"HTTP/1.1 408") and b"content-security-policy" in answer.lower() and waited < 20
    return Result(ok, detail=f"answered after {waited:.1f}s")


def kill_9_server_under_load(tmp: Path) -> Result:
    """Crash safety (held before): kill -9 the server during concurrent adds and searches; acknowledged adds survive."""
    folder = build(tmp / "c", index="hnsw")
    acknowledged, errors = {}, []
    stop = threading.Event()
    with Server(folder) as server:

        def client(n: int) -> None:
            i = 0
            while not stop.is_set():
                text = f"Client {n} asks question number {i} about {TOPICS[i % 10]}?"
                try:
                    status, body = http(server.url + "/questions", json.dumps({"text": text}).encode(), AUTH)
                    http(server.url + "/search", json.dumps({"question": text, "k": 3}).encode())
                except OSError:
                    return
                if status == 201:
                    acknowledged[text] = json.loads(body)["id"]
                elif status >= 500:
                    errors.append(status)
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
    lost = sum(rows.get(text) != i for text, i in acknowledged.items())
    with Server(folder) as again:
        health = json.loads(http(again.url + "/health")[1])
    return Result(
        lost == 0 and bool(acknowledged) and health["questions"] == len(rows),
        data_lost=lost,
        server_500s=len(errors),
        detail=f"{len(acknowledged)} acknowledged, {len(rows) - 40} stored",
    )


def reads_see_other_processes(tmp: Path) -> Result:
    """A running server finds a question that `dupq index add` (another process) stored."""
    folder = build(tmp / "c")
    with Server(folder) as server:
        http(server.url + "/search", json.dumps({"question": "warm up"}).encode())
        dupq("index", "add", str(folder), "Which river flows through the most countries?")
        status, body = http(
            server.url + "/search",
            json.dumps({"question": "Which river flows through the most countries?", "k": 1}).encode(),
        )
    top = json.loads(body)["results"][0]["text"] if status == 200 else None
    return Result(
        top == "Which river flows through the most countries?",
        data_lost=int(top is None),
        server_500s=int(status >= 500),
    )


def idle_and_trickling_connections(tmp: Path) -> Result:
    """Connections that send nothing, or trickle a header a byte a second, are closed (in 10 s), so with 1,100 idle
    sockets against a server allowed 1,024 open files a client retrying /health gets in within 20 s."""
    folder = build(tmp / "c")
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
    return Result(
        answered < 20 and trickled < 15 and idled < 15,
        detail=f"/health answered after {answered:.1f}s; idle closed after {idled:.1f}s, trickler after {trickled:.1f}s",
    )


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


def server_side_failures_are_5xx(tmp: Path) -> Result:
    """A full disk is 507 and a write lock held by another process 503 with Retry-After, each a sentence with
    the security headers (not a 400, not "cannot rollback"); searches still answer; nothing half stored."""
    from fastapi.testclient import TestClient

    import dupq.search.store
    from dupq.service.app import create_app

    folder = build(tmp / "c")
    saved = getattr(dupq.search.store, "BUSY_TIMEOUT", None)
    dupq.search.store.BUSY_TIMEOUT = 1.0  # how long an add waits for the lock (30 s in use)
    auth = {"Authorization": "Bearer t"}
    try:
        with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as c:
            writer = c.app.state.collection._backend.store._db
            pages = writer.execute("PRAGMA page_count").fetchone()[0]
            writer.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full: no page more
            full = c.post(
                "/questions", json={"text": "Is the disk full?", "metadata": {"pad": "x" * 20_000}}, headers=auth
            )
            writer.execute("PRAGMA max_page_count = 1073741823")
            other = sqlite3.connect(folder / "questions.sqlite", isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            busy = c.post("/questions", json={"text": "Is the store busy?"}, headers=auth)
            search = c.post("/search", json={"question": "How do I learn Python?"})
            other.execute("ROLLBACK")
            other.close()
            after = c.post("/questions", json={"text": "Is the store free again?"}, headers=auth)
    finally:
        dupq.search.store.BUSY_TIMEOUT = saved
    said = [a.json().get("detail", "") for a in (full, busy)]
    ok = full.status_code == 507 and "disk is full" in said[0] and busy.status_code == 503
    ok = ok and busy.headers.get("retry-after", "").isdigit() and "write lock" in said[1]
    ok = (
        ok
        and search.status_code == 200
        and after.status_code == 201
        and not lacks_headers(full)
        and not lacks_headers(busy)
    )
    return Result(
        ok and len(stored(folder)) == 41,
        server_500s=sum(a.status_code == 500 for a in (full, busy, search, after)),
        detail=f"full {full.status_code}, busy {busy.status_code}: {said}"[:300],
    )


CASES = [
    adds_after_a_failing_commit,
    hostile_json_bodies,
    deeply_nested_bodies,
    security_headers_everywhere,
    service_manners,
    serve_on_a_port_in_use,
    slow_request_bodies,
    idle_and_trickling_connections,
    server_side_failures_are_5xx,
    reads_see_other_processes,
    kill_9_server_under_load,
]
