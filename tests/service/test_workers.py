"""``dupq serve --workers 2``: two processes on one port, each answering, each seeing the other's adds.

Which worker accepts a connection is the kernel's choice, so the test chooses for it: a worker
stopped with SIGSTOP accepts nothing, and every request then goes to the other one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.service.workers import default_workers
from support.errors import refused
from support.servicekit import build_collection, free_port, questions
from support.serving import metric

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")

TOKEN = "workers-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
N = 200  # questions in the collection


def workers_of(parent: int) -> list[int]:
    """The worker processes uvicorn's supervisor spawned (not multiprocessing's resource tracker)."""
    children = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        children += [int(pid) for pid in (task / "children").read_text().split()]
    return sorted(pid for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes())


@contextmanager
def only(worker: int, others: list[int]):
    """Every other worker stopped (SIGSTOP) while the ``with`` lasts: ``worker`` alone accepts connections."""
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)


def each_alone(a: int, b: int):
    """Each of two workers in turn alone (the other stopped) while the loop's body runs."""
    for worker, other in ((a, b), (b, a)):
        with only(worker, [other]):
            yield worker


def post(url: str, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=20, **kw)  # a new connection each time


@pytest.fixture
def served(tmp_path, tiny_model_dir, small_splits):
    """``dupq serve --workers 2`` on a free port: ``(url, supervisor, [worker pids])``; all stopped at the end."""
    folder = build_collection(tmp_path / "coll", tiny_model_dir, questions(small_splits, N))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dupq.cli", "serve", str(folder), "--workers", "2", "--port", str(port)],
        env={**os.environ, "DUPQ_API_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the workers are stopped with it
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while len(workers := workers_of(proc.pid)) < 2 or not _healthy(url):
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "dupq serve --workers 2 did not start"
            time.sleep(0.2)
        yield url, proc, workers
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise


def search_until(url: str, question: str, k: int, done) -> list[dict]:
    """The hits of a search for ``question``, asked again until ``done(hits)`` or for a second at most."""
    deadline = time.monotonic() + 1.0
    while True:
        hits = post(url, "/search", {"question": question, "k": k}).json()["results"]
        if done(hits) or time.monotonic() > deadline:
            return hits


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_two_workers_answer_and_see_each_others_adds(served):
    url, proc, (a, b) = served
    for _ in each_alone(a, b):  # each answers alone
        assert post(url, "/search", {"question": "How can I lose weight fast?", "k": 1}).status_code == 200
    new = "Which river flows through the most countries in the world?"
    with only(a, [b]):
        added = post(url, "/questions", {"text": new, "key": "river"}, headers=AUTH)
    assert added.status_code == 201
    with only(b, [a]):
        (top,) = search_until(url, new, 1, lambda hits: (hits[0]["id"], hits[0]["text"]) == (added.json()["id"], new))
        assert (top["id"], top["text"]) == (added.json()["id"], new)  # the other worker found it within a second
        again = post(url, "/questions", {"text": new, "key": "river"}, headers=AUTH)  # a retry, at the other worker
        assert again.status_code == 201 and again.json() == added.json()  # stored once
    assert {httpx.get(url + "/health", timeout=20).json()["questions"] for _ in each_alone(a, b)} == {N + 1}


def test_a_worker_stops_when_its_supervisor_is_killed(served):
    url, proc, workers = served
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in workers):
        assert time.monotonic() < deadline, "a worker outlived its supervisor"
        time.sleep(0.1)
    assert not _healthy(url)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_milvus_lite_file_is_served_by_one_process(tmp_path):

    assert default_workers(f"milvus:{tmp_path / 'c.db'}") == 1
    assert default_workers(str(tmp_path)) == default_workers(tmp_path) == os.cpu_count()
    result = CliRunner().invoke(app, ["serve", f"milvus:{tmp_path / 'c.db'}", "--workers", "2"])
    refused(result, "--workers 1")


def test_a_workers_threads_include_the_blas():
    """A worker's thread count holds for NumPy's BLAS too: the search's NumPy products
    (dupq.modeling.kernels) would otherwise spin idle BLAS threads on the other workers' cores."""
    script = (
        "import json, numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "from dupq.service.workers import set_threads\n"
        "before = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "set_threads(1)\n"
        "after = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "print(json.dumps([before, after]))\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # two BLAS threads to start with, whatever the machine
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    before, after = json.loads(done.stdout)
    assert before and max(before) == 2
    assert after and set(after) == {1}  # NumPy's, and FAISS's own OpenBLAS once set_threads imports it


def test_a_removal_and_an_update_through_one_worker_are_seen_by_the_other_within_a_second(served):
    url, proc, (a, b) = served
    old, new = "Which river flows through the most countries?", "Which mountain is the tallest in Africa?"
    with only(a, [b]):
        assert post(url, "/questions", {"text": old, "key": "river"}, headers=AUTH).status_code == 201
    for change, gone, found in (("put", old, new), ("delete", new, None)):
        with only(b, [a]):  # b has searched, so its index is warm, before a changes the question
            assert post(url, "/search", {"question": gone, "k": 1}).json()["results"][0]["text"] == gone
        with only(a, [b]):
            if change == "put":
                answer = httpx.put(url + "/questions/river", json={"text": new}, headers=AUTH, timeout=20)
            else:
                answer = httpx.delete(url + "/questions/river", headers=AUTH, timeout=20)
            assert answer.status_code == 200, answer.text
        with only(b, [a]):
            hits = search_until(url, gone, 5, lambda hits, gone=gone: gone not in [h["text"] for h in hits])
            assert gone not in [h["text"] for h in hits]  # within a second the other worker no longer finds it
            if found is not None:
                top = post(url, "/search", {"question": found, "k": 1}).json()["results"][0]
                assert (top["key"], top["text"]) == ("river", found)


def test_metrics_sum_every_worker(served):
    """prometheus-client's multiprocess mode: a scrape through either worker counts both workers' requests."""
    url, proc, (a, b) = served
    for worker in each_alone(a, b):
        for _ in range(2 if worker == a else 3):
            assert post(url, "/search", {"question": "How can I lose weight fast?", "k": 1}).status_code == 200
    for _ in each_alone(a, b):
        text = httpx.get(url + "/metrics", timeout=20).text
        assert metric(text, "dupq_requests_total", route="/search", status="200") == 5
        assert metric(text, "dupq_questions_stored") == N
