"""Faults of the API's face: keys that hold a ``/``, redirects to a client's host, a token for readers,
an empty body's status, and the metrics and restart of a worker killed under ``dupq serve --workers 2``.

The API's own rules run in this process with FastAPI's TestClient; what only ``dupq serve`` does
(its tokens from the environment, its workers and their metrics folder) runs it in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from faultkit import AUTH, Server, build, client, dupq, folder_of

from support.errors import refused
from support.serving import free_port
from support.serving import http as request

pytestmark = pytest.mark.faults

KEYS = ["faq/17", "a/b/c", "50%", "why?", "x#y", "x/decision"]  # printable ASCII: keys the key rule allows


def _path(key: str, encode_slash: bool) -> str:
    from urllib.parse import quote

    return "/questions/" + quote(key, safe="/" if not encode_slash else "")


def test_keys_with_a_slash(tmp_path: Path):
    """Every key the key rule allows reaches PUT, the decision route and DELETE, written with its `/` or as %2F."""
    folder = build(tmp_path / "c", keys=True)
    answers = {}
    with client(folder) as c:
        for n, key in enumerate(KEYS):
            added = c.post("/questions", json={"text": f"Where is stored question {n}?", "key": key}, headers=AUTH)
            assert added.status_code == 201, (key, added.text)
            encoded = bool(n % 2)
            answers[key, "put"] = c.put(_path(key, encoded), json={"metadata": {"n": n}}, headers=AUTH).status_code
            decided = c.post(_path(key, encoded) + "/decision", json={"duplicate_of": "k1"}, headers=AUTH)
            answers[key, "decision"] = decided.status_code
            answers[key, "delete"] = c.delete(_path(key, not encoded), headers=AUTH).status_code
            answers[key, "gone"] = c.put(_path(key, encoded), json={"metadata": {}}, headers=AUTH).status_code
    wrong = {k: v for k, v in answers.items() if v != (404 if k[1] == "gone" else 200)}
    assert wrong == {}, f"answers other than 200 (404 once removed): {wrong}"


def test_no_redirect_to_a_clients_host(tmp_path: Path):
    """A path with a trailing slash is never redirected, least of all to the host a client names."""
    folder = build(tmp_path / "c", keys=True)
    evil = {"Host": "evil.example", **AUTH}
    with client(folder) as c:
        answers = [
            c.delete("/questions/k5/", headers=evil, follow_redirects=False),
            c.get("/health/", headers=evil, follow_redirects=False),
            c.post("/search/", json={"question": "Where?"}, headers=evil, follow_redirects=False),
        ]
    redirected = [(a.request.url.path, a.status_code, a.headers.get("location")) for a in answers if a.is_redirect]
    assert redirected == [], f"redirected: {redirected}"
    assert all(a.status_code == 404 for a in answers), [a.status_code for a in answers]


def test_a_read_token(tmp_path: Path):
    """`$DUPQ_READ_TOKEN` lets readers (Prometheus too) search, scrape and check health without the write token,
    and write nothing; the write token reads too; a blank read token, or one equal to the write token, is refused."""
    folder = build(tmp_path / "c")
    read = {"Authorization": "Bearer read-only"}
    search = json.dumps({"question": "How do I learn about rice?"}).encode()
    with Server(folder, env={"DUPQ_READ_TOKEN": "read-only"}) as server:
        codes = {
            ("search read", 200): request(server.url + "/search", search, read).status,
            ("metrics read", 200): request(server.url + "/metrics", headers=read).status,
            ("health read", 200): request(server.url + "/health", headers=read).status,
            ("search write", 200): request(server.url + "/search", search, AUTH).status,
            ("search none", 401): request(server.url + "/search", search).status,
            ("add read", 401): request(server.url + "/questions", b'{"text": "Can a reader write?"}', read).status,
        }
    assert [(name, got) for (name, want), got in codes.items() if got != want] == []
    for token in (" ", "fault-token"):
        serve = dupq("serve", str(folder), "--port", str(free_port()), timeout=60, env={"DUPQ_READ_TOKEN": token})
        refused(serve, "DUPQ_READ_TOKEN")


def test_empty_bodies_are_422(tmp_path: Path):
    """`{}` to PUT or the decision route is a body the schema calls invalid: 422, as the OpenAPI document says."""
    folder = build(tmp_path / "c", keys=True)
    with client(folder) as c:
        schema = c.get("/openapi.json").json()
        both = {"duplicate_of": "k2", "not_duplicate_of": "k3"}
        codes = {
            "put": c.put("/questions/k1", json={}, headers=AUTH).status_code,
            "decision": c.post("/questions/k1/decision", json={}, headers=AUTH).status_code,
            "both": c.post("/questions/k1/decision", json=both, headers=AUTH).status_code,
        }
    documented = [
        operation["responses"]
        for path, item in schema["paths"].items()
        if path.startswith("/questions/{key}")
        for method, operation in item.items()
        if method in ("put", "post")
    ]
    assert codes == {"put": 422, "decision": 422, "both": 422}, codes
    assert all("422" in responses and "400" in responses for responses in documented)


def test_what_the_schema_allows_is_not_refused_as_a_400(tmp_path: Path):
    """Two refusals a fuzzer found as a schema-valid body answered 400: metadata holding U+0000 (which the schema
    now forbids: a 422, as for any body the schema calls invalid) and a decision that closes a cycle (a conflict
    with what is stored: 409, documented)."""
    folder = build(tmp_path / "c", keys=True)
    with client(folder) as c:
        schema = c.get("/openapi.json").json()
        nul = {"text": "Why is the sky blue?", "metadata": {"a": [{"b\u0000": 1}]}}
        codes = {
            "nul": c.post("/questions", json=nul, headers=AUTH).status_code,
            "nul in a value": c.put("/questions/k1", json={"metadata": {"x": "a\u0000"}}, headers=AUTH).status_code,
            "k1 of k2": c.post("/questions/k1/decision", json={"duplicate_of": "k2"}, headers=AUTH).status_code,
            "k2 of k1": c.post("/questions/k2/decision", json={"duplicate_of": "k1"}, headers=AUTH).status_code,
        }
    assert codes == {"nul": 422, "nul in a value": 422, "k1 of k2": 200, "k2 of k1": 409}, codes
    decision = schema["paths"]["/questions/{key}/decision"]["post"]["responses"]
    assert "cycle" in decision["409"]["description"]
    value = schema["components"]["schemas"]["MetadataValue"]
    assert {"pattern": "^[^\\x00]*$", "type": "string"} in value["anyOf"]


def _worker_ages(url: str) -> set[str]:
    """The pids of the workers whose index age ``/metrics`` shows."""
    text = request(url + "/metrics").body.decode()
    return set(re.findall(r'dupq_index_age_seconds\{pid="(\d+)"\}', text))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_a_killed_worker(tmp_path: Path):
    """kill -9 of one of two workers: a new one serves, and `/metrics` drops the dead one's series (how soon it is
    noticed: test_a_worker_that_dies_during_a_health_check; a restart takes seconds, more on a loaded machine)."""
    folder = build(tmp_path / "c")
    with Server(folder, "--workers", "2") as server:
        deadline = time.monotonic() + 60
        while len(workers := server.workers()) < 2 or len(_worker_ages(server.url)) < 2:
            assert time.monotonic() < deadline, f"the workers did not both answer: {_worker_ages(server.url)}"
            request(server.url + "/health")
            time.sleep(0.1)
        dead = workers[0]
        os.kill(dead, signal.SIGKILL)
        killed = time.monotonic()
        while len(server.workers()) < 2 or dead in server.workers():
            time.sleep(0.1)
            assert time.monotonic() - killed < 90, "no new worker within 90 s of a kill -9"
        new = next(pid for pid in server.workers() if pid not in workers)
        while str(new) not in _worker_ages(server.url):  # the new worker serves: it answered, and its series shows
            request(server.url + "/health")
            time.sleep(0.1)
            assert time.monotonic() - killed < 90, f"the new worker {new} did not answer within 90 s of a kill -9"
        for _ in range(20):  # every live worker answers something, and one of them the scrape
            request(server.url + "/health")
        ages = _worker_ages(server.url)
    assert str(dead) not in ages, f"/metrics still shows the killed worker {dead}: {sorted(ages)}"


def test_a_worker_that_dies_during_a_health_check(tmp_path: Path):
    """The supervisor is waiting for a worker's answer to its ping when the worker dies: it knows within seconds,
    not after the whole health check's timeout (the pipe stays open in the supervisor, so no end of file comes)."""
    import multiprocessing

    from uvicorn.supervisors.multiprocess import Process

    from dupq.service import workers

    process = Process.__new__(Process)  # uvicorn's handle on a worker, around a process that never answers
    process.parent_conn, process.child_conn = multiprocessing.Pipe()
    process.process = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(1,))
    process.process.start()
    workers.watch(process)
    started = time.monotonic()
    alive = process.is_alive(timeout=15)
    waited = time.monotonic() - started
    process.process.join()
    assert not alive and waited < 5, f"a worker dead after 1 s was noticed after {waited:.1f} s"


def test_an_inherited_metrics_folder(tmp_path: Path):
    """`$PROMETHEUS_MULTIPROC_DIR` left in the environment (a folder of old values, or one that is gone) is refused
    by `dupq serve` in a sentence naming it, before its values are mixed into the server's."""
    folder = build(tmp_path / "c")
    old = folder_of(tmp_path / "old-metrics", {"counter_1.db": b""})
    for where in (old, tmp_path / "gone"):
        for workers in ("1", "2"):
            try:
                serve = dupq(
                    "serve", str(folder), "--port", str(free_port()), "--workers", workers,
                    timeout=40, env={"PROMETHEUS_MULTIPROC_DIR": str(where)},
                )  # fmt: skip
            except Exception as e:  # noqa: BLE001 -- it served instead (TimeoutExpired)
                raise AssertionError(f"dupq serve served with $PROMETHEUS_MULTIPROC_DIR={where}: {e}") from None
            refused(serve, "PROMETHEUS_MULTIPROC_DIR")
