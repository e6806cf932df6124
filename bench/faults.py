"""The fault suite: every class of fault found by the hostile test, run against the
installed package in temporary folders, and one JSON line of figures.

    python bench/faults.py            # ~1-2 minutes on 2 cores; the bundled model, synthetic questions
    python bench/faults.py --only kill  # the cases whose name contains "kill"

Each case is a function in ``CASES`` that gets a fresh temporary folder and returns a ``Result``:
whether dupq behaved (``survived``), how many acknowledged questions went missing (``data_lost``),
whether a traceback reached a user (``tracebacks``) and how many 5xx answers the server gave
(``server_500s``). A case that raises did not survive. Add a case by writing a function and
appending it to ``CASES``.

Output: ``{"cases": N, "survived": N, "data_lost": 0, "tracebacks": 0, "server_500s": 0, "results": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "DUPQ_API_TOKEN": "fault-token"}
TOPICS = ["Python", "the sky", "weight", "Mongolia", "volcanoes", "French", "rice", "chess", "taxes", "guitars"]


@dataclass
class Result:
    survived: bool
    data_lost: int = 0
    tracebacks: int = 0
    server_500s: int = 0
    detail: str = ""


def synthetic(n: int, offset: int = 0) -> list[str]:
    return [f"How do I learn about {TOPICS[i % len(TOPICS)]} in step {i}?" for i in range(offset, offset + n)]


def dupq(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*DUPQ, *args], input=stdin, capture_output=True, timeout=timeout, env=ENV)


def refused(run: subprocess.CompletedProcess) -> tuple[bool, int]:
    """A user mistake answered as dupq promises: exit 2, one ``error:`` sentence, no traceback."""
    err = run.stderr.decode("utf-8", "replace")
    lines = [line for line in err.strip().splitlines() if not line.startswith(("skipped", "warning"))]
    ok = run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    return ok, int("Traceback" in err)


def build(folder: Path, n: int = 40, index: str = "flat") -> Path:
    from dupq.modeling.model import Model
    from dupq.search.collection import Collection

    Collection.build(folder, synthetic(n), Model.load(), index=index).close()
    return folder


def stored(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / "questions.sqlite") as db:
        return db.execute("SELECT id, key, text FROM questions ORDER BY id").fetchall()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(
    url: str, body: bytes | None = None, headers: dict | None = None, method: str | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **(headers or {})}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Server:
    """``dupq serve`` in a subprocess, for as long as the ``with`` lasts (or until killed)."""

    def __init__(self, folder: Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [*DUPQ, "serve", str(folder), "--port", str(self.port), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http(self.url + "/", method="HEAD")[0] == 200:
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the server did not start: " + self.proc.stderr.read().decode())

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)

    def tracebacks(self) -> int:
        return int(b"Traceback" in (self.proc.stderr.read() or b""))


AUTH = {"Authorization": "Bearer fault-token"}

# The cases, one per fault class. --------------------------------------------------------------


def adds_after_a_failing_commit(tmp: Path) -> Result:
    """Item 1: the cache write fails after the commit (a full disk); concurrent adds, then retries."""
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
    try:
        new = synthetic(5, offset=100)
        with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as c:

            def add(i):
                return c.post(
                    "/questions",
                    json={"text": new[i]},
                    headers={"Authorization": "Bearer t", "Idempotency-Key": f"k{i}"},
                )

            with ThreadPoolExecutor(5) as pool:
                answers = list(pool.map(add, range(5))) + list(pool.map(add, range(5)))  # then every client retries
    finally:
        dupq.search.cache.SAVE_DURING_ADD, dupq.search.vectors.atomic_write = saved
    texts = [t for _, _, t in stored(folder)]
    errors = sum(r.status_code >= 500 for r in answers)
    twice = sum(texts.count(t) - 1 for t in new)
    lost = sum(t not in texts for t in new)
    return Result(
        errors == 0 and twice == 0 and lost == 0, data_lost=lost, server_500s=errors, detail=f"{twice} stored twice"
    )


def cli_add_is_idempotent(tmp: Path) -> Result:
    """Item 1: `index add --key` run twice stores one question."""
    folder = build(tmp / "c")
    runs = [dupq("index", "add", str(folder), "What is the deepest lake on earth?", "--key", "q-1") for _ in range(2)]
    texts = [t for _, _, t in stored(folder)]
    ok = all(r.returncode == 0 for r in runs) and texts.count("What is the deepest lake on earth?") == 1
    return Result(ok, tracebacks=sum(b"Traceback" in r.stderr for r in runs))


def every_line_accounted_for(tmp: Path) -> Result:
    """Item 3: unclosed quotes and wrong field counts, each line with its reason (train/evaluate read this way)."""
    from dupq.data.pairs import read_pairs

    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(30):
        q1 = ('"' if i in (4, 17) else "") + f"How do I do thing {i}?"
        row = [str(i), str(2 * i), str(2 * i + 1), q1, f"What is thing {i}?", str(i % 2)]
        lines.append("\t".join(row[:4] if i == 9 else row))
    (tmp / "p.tsv").write_text("\n".join(lines) + "\n")
    pairs, dropped = read_pairs(tmp / "p.tsv")
    want = {"unclosed quote": 2, "wrong number of fields": 1}
    ok = dropped.reasons == want and len(pairs) + dropped.lines == 30
    build_run = dupq("index", "build", str(tmp / "p.tsv"), "--out", str(tmp / "c"))
    return Result(
        ok and build_run.returncode == 0 and b"2 unclosed quote" in build_run.stderr,
        data_lost=30 - len(pairs) - dropped.lines,
        tracebacks=int(b"Traceback" in build_run.stderr),
        detail=str(dropped),
    )


def questions_without_words(tmp: Path) -> Result:
    """Item 4: "???" is refused by every entry point, never stored or called a duplicate."""
    from fastapi.testclient import TestClient

    from dupq.core.files import DupqError
    from dupq.modeling.model import Model
    from dupq.service.app import create_app

    folder = build(tmp / "c")
    runs = [dupq("index", "add", str(folder), "???"), dupq("search", str(folder), "?!?")]
    results = [refused(r) for r in runs]
    try:
        Model.load().similarity("", "")
        library = False
    except DupqError:
        library = True
    (tmp / "q.txt").write_text("???\n!!!\n...\nHow do I learn Python?\n")
    dedup = dupq("dedup", str(tmp / "q.txt"), "--out", str(tmp / "d.json"))
    with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as c:
        codes = [
            c.post("/similarity", json={"q1": "\u001c", "q2": "\u001d"}).status_code,
            c.post("/search", json={"question": "?!?"}).status_code,
            c.post("/questions", json={"text": "..."}, headers={"Authorization": "Bearer t"}).status_code,
        ]
    ok = all(r for r, _ in results) and library and json.loads((tmp / "d.json").read_text())["clusters_found"] == 0
    ok = ok and codes == [422, 422, 422] and len(stored(folder)) == 40
    return Result(
        ok,
        tracebacks=sum(t for _, t in results) + int(b"Traceback" in dedup.stderr),
        server_500s=sum(c >= 500 for c in codes),
    )


def reads_see_other_processes(tmp: Path) -> Result:
    """Item 5: a running server finds a question that `dupq index add` (another process) stored."""
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


def index_cache_tampered(tmp: Path) -> Result:
    """Item 8: negating vector 5 of index.faiss is noticed; the cache is rebuilt from SQLite."""
    import faiss

    folder = build(tmp / "c")
    index = faiss.read_index(str(folder / "index.faiss"))
    vectors = index.reconstruct_n(0, index.ntotal)
    vectors[5] *= -1
    altered = faiss.IndexFlatIP(index.d)
    altered.add(vectors)
    faiss.write_index(altered, str(folder / "index.faiss"))
    run = dupq("search", str(folder), synthetic(6)[5], "-k", "1", "--json")
    hit = json.loads(run.stdout)["hits"][0]["id"] if run.returncode == 0 else None
    return Result(hit == 5, tracebacks=int(b"Traceback" in run.stderr))


def hostile_json_bodies(tmp: Path) -> Result:
    """Items 9, 16: NaN, Infinity, lone surrogates, k true / "3", control characters: JSON 4xx, never 500."""
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
        answers = [http(server.url + path, body, AUTH) for path, body in bodies]
    codes = [code for code, _ in answers]
    json_ok = all(isinstance(json.loads(body)["detail"], (str, list)) for _, body in answers)
    return Result(codes == [422] * len(bodies) and json_ok, server_500s=sum(c >= 500 for c in codes), detail=str(codes))


def not_utf8_on_the_command_line(tmp: Path) -> Result:
    """Item 10: `index add C $'Caf\\xe9 question'`."""
    folder = build(tmp / "c")
    run = subprocess.run([*DUPQ, "index", "add", str(folder), b"Caf\xe9 question"], capture_output=True, env=ENV)
    ok, tracebacks = refused(run)
    return Result(ok and len(stored(folder)) == 40, tracebacks=tracebacks)


def bad_model_and_metrics_files(tmp: Path) -> Result:
    """Items 7, 11: config.json with wrong types, metrics.json not an object, thresholds out of range."""
    from dupq.modeling.model import BUNDLED

    runs = []
    for name, change in [
        ("dim", lambda c: c["encoder"].update(dim="128")),
        ("dropout", lambda c: c["encoder"].update(dropout=5)),
        ("encoder", lambda c: c.update(encoder=None)),
        ("threshold", lambda c: c.update(threshold=math.nan)),
        ("info", lambda c: c.update(threshold_info="dev")),
    ]:
        model = shutil.copytree(BUNDLED, tmp / name)
        config = json.loads((model / "config.json").read_text())
        change(config)
        (model / "config.json").write_text(json.dumps(config))
        runs.append(dupq("predict", "How?", "Why?", "--model", str(model)))
    model = shutil.copytree(BUNDLED, tmp / "metrics")
    (model / "metrics.json").write_text("[1, 2]")
    runs += [dupq("evaluate", str(model)), dupq("report", str(model), "--out", str(tmp / "r"))]
    (tmp / "q.txt").write_text("How do I learn Python?\nHow can I learn Python?\n")
    runs += [dupq("dedup", str(tmp / "q.txt"), "--out", str(tmp / "d.json"), "--threshold", t) for t in ("5", "nan")]
    checks = [refused(r) for r in runs]
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


def corrupt_collection_files(tmp: Path) -> Result:
    """Item 12: random or truncated SQLite, a wrong dim, a short blob, "model" a string, hnsw_m -3."""
    checks = []
    for how in ["random", "truncated", "dim", "blob", "model", "hnsw_m"]:
        folder = build(tmp / how, n=300)
        (folder / "index.faiss").unlink()
        manifest = json.loads((folder / "manifest.json").read_text())
        if how == "random":
            (folder / "questions.sqlite").write_bytes(os.urandom(8192))
        elif how == "truncated":
            data = (folder / "questions.sqlite").read_bytes()
            (folder / "questions.sqlite").write_bytes(data[: len(data) // 3])
        elif how == "blob":
            with sqlite3.connect(folder / "questions.sqlite") as db:
                db.execute("UPDATE embeddings SET vectors = substr(vectors, 1, 100)")
        else:
            manifest.update(
                {
                    "dim": {"dim": 64},
                    "model": {"model": "bundled"},
                    "hnsw_m": {"index": {"kind": "hnsw", "hnsw_m": -3}},
                }[how]
            )
            (folder / "manifest.json").write_text(json.dumps(manifest))
        checks.append(refused(dupq("search", str(folder), "How do I learn Python?")))
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


def files_of_killed_writers(tmp: Path) -> Result:
    """Item 14: temporary files and half builds of a killed process are removed; a live one's are kept."""
    folder = build(tmp / "c")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = [folder / f".index.faiss.{dead}-abcd1234.tmp", folder / f".manifest.json.{dead}-abcd1234.tmp"]
    for path in stale:
        path.write_bytes(b"x" * 1000)
    (tmp / f".d.building-{dead}").mkdir()
    (tmp / "q.txt").write_text("How do I learn Python?\n")
    dupq("search", str(folder), "How do I learn Python?")  # opening cleans the collection's folder
    dupq("index", "build", str(tmp / "q.txt"), "--out", str(tmp / "d"))  # building cleans its parent
    left = [p for p in [*stale, tmp / f".d.building-{dead}"] if p.exists()]
    return Result(not left, detail=", ".join(p.name for p in left))


def messages_name_the_real_problem(tmp: Path) -> Result:
    """Items 15, 21: a file where a folder is needed (and the reverse); a header-only file for index add."""
    folder = build(tmp / "c")
    (tmp / "h.tsv").write_text("question\tanswer\n")
    runs = {
        "a file, not a folder": dupq("search", str(tmp / "h.tsv"), "How?"),
        "a folder, not a file": dupq("index", "add", str(folder), "--file", str(tmp)),
        "holds no questions": dupq("index", "add", str(folder), "--file", str(tmp / "h.tsv")),
        "model folder": dupq("predict", "How?", "Why?", "--model", str(tmp / "h.tsv")),
    }
    checks = [(refused(r), want.encode() in r.stderr) for want, r in runs.items()]
    return Result(all(ok and said for (ok, _), said in checks), tracebacks=sum(t for (_, t), _ in checks))


def service_manners(tmp: Path) -> Result:
    """Items 16, 17, 20: HEAD /, JSON refusals, security headers, no CDN docs, protected reads incl. /health."""
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
    """Item 18: the error comes before any "serving ..." line."""
    folder = build(tmp / "c")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        run = dupq("serve", str(folder), "--port", str(taken.getsockname()[1]))
    ok, tracebacks = refused(run)
    return Result(ok and b"serving" not in run.stdout, tracebacks=tracebacks)


def slow_request_bodies(tmp: Path) -> Result:
    """Item 19: a client that sends half a body is answered 408 (after 10 s) instead of holding the connection."""
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
    return Result(answer.startswith(b"HTTP/1.1 408") and waited < 20, detail=f"answered after {waited:.1f}s")


def nan_in_json_output(tmp: Path) -> Result:
    """Item 7: metadata with NaN is refused; `search --json` and `predict --json` print valid JSON."""
    folder = build(tmp / "c")
    table = tmp / "t.csv"
    table.write_text("question,score\nWhat is the speed of light?,nan\n")
    add = dupq("index", "add", str(folder), "--file", str(table))
    outputs = [
        dupq("search", str(folder), "What is the speed of light?", "--json").stdout,
        dupq("predict", "When will I see you?", "When can I see you again?", "--json").stdout,
    ]

    def strict(text: bytes) -> bool:
        try:
            json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            return True
        except ValueError:
            return False

    return Result(add.returncode == 0 and all(strict(o) for o in outputs), tracebacks=int(b"Traceback" in add.stderr))


def kill_9_during_index_add(tmp: Path) -> Result:
    """Crash safety (held before): kill -9 `index add --file` mid-way; every acknowledged id is stored."""
    folder = build(tmp / "c", index="hnsw")
    new = synthetic(3000, offset=1000)
    (tmp / "new.txt").write_text("\n".join(new) + "\n")
    proc = subprocess.Popen(
        [*DUPQ, "index", "add", str(folder), "--file", str(tmp / "new.txt"), "--batch-size", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    acknowledged = []
    for line in proc.stdout:
        lo, hi = map(int, re.search(r"ids (\d+)-(\d+)", line).groups())
        acknowledged.extend(range(lo, hi + 1))
        if len(acknowledged) >= 500:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    rows = {i: t for i, _, t in stored(folder)}
    lost = sum(rows.get(i) != new[i - 40] for i in acknowledged)
    reopened = dupq("search", str(folder), new[0], "-k", "1", "--json")
    ok = proc.returncode == -signal.SIGKILL and lost == 0 and reopened.returncode == 0
    return Result(
        ok, data_lost=lost, tracebacks=int(b"Traceback" in reopened.stderr), detail=f"{len(acknowledged)} acknowledged"
    )


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


# Training (items 2, 6, 7, 13; kill -9 of training, which already held).

TRAIN = [
    "--train-pool",
    "400",
    "--test-size",
    "100",
    "--dev-size",
    "100",
    "--dim",
    "8",
    "--threads",
    "1",
    "--no-progress",
]


def pairs_file(tmp: Path, rows: int = 600) -> Path:
    """A synthetic pairs file: every other row a reworded duplicate, the rest another topic."""
    path = tmp / "pairs.tsv"
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(rows):
        a = synthetic(1, i)[0]
        b = a.replace("How do I learn about", "What is the best way to learn") if i % 2 else synthetic(1, i + 3)[0]
        lines.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{i % 2}")
    path.write_text("\n".join(lines) + "\n")
    return path


def resume_with_other_options(tmp: Path) -> Result:
    """Item 2: --resume with another split, width, rate or recipe, or with --overwrite, is refused."""
    data, out = pairs_file(tmp), tmp / "run"
    first = dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN)
    if first.returncode != 0:
        return Result(False, detail=first.stderr.decode()[-300:])
    before = (out / "checkpoint.safetensors").read_bytes()
    checks = [
        refused(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume", *TRAIN, *extra))
        for extra in (["--train-pool", "300"], ["--lr", "0.02"], ["--preset", "labelled"], ["--overwrite"])
    ]
    checks.append(
        refused(
            dupq(
                "train",
                "--data",
                str(data),
                "--out",
                str(out),
                "--epochs",
                "2",
                "--resume",
                *TRAIN[:-5],
                "--dim",
                "16",
                *TRAIN[-3:],
            )
        )
    )
    unchanged = (out / "checkpoint.safetensors").read_bytes() == before
    return Result(all(ok for ok, _ in checks) and unchanged, tracebacks=sum(t for _, t in checks))


def corrupt_checkpoint_and_non_finite_options(tmp: Path) -> Result:
    """Item 6: 0xff bytes in the checkpoint are refused and nothing good is overwritten; inf/nan options refused."""
    data, out = pairs_file(tmp), tmp / "run"
    dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN)
    checkpoint, weights = out / "checkpoint.safetensors", out / "model.safetensors"
    corrupt = checkpoint.read_bytes()[:-1000] + b"\xff" * 1000
    checkpoint.write_bytes(corrupt)
    good = weights.read_bytes()
    checks = [refused(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume", *TRAIN))]
    kept = checkpoint.read_bytes() == corrupt and weights.read_bytes() == good
    checks.append(refused(dupq("train", "--data", str(data), "--out", str(tmp / "x"), "--lr", "inf", *TRAIN)))
    for key, value in (("margin", "nan"), ("scale", "-inf")):  # options without a flag: from a preset file
        preset = tmp / f"{key}.toml"
        preset.write_text(f"{key} = {value}\n")
        checks.append(
            refused(dupq("train", "--data", str(data), "--out", str(tmp / "x"), "--preset", str(preset), *TRAIN))
        )
    return Result(all(ok for ok, _ in checks) and kept, tracebacks=sum(t for _, t in checks))


def model_with_nan_weights(tmp: Path) -> Result:
    """Item 7 (weights): a model folder whose weights hold NaN is refused before it judges anything."""
    from safetensors.torch import load_file, save_file

    from dupq.modeling.model import BUNDLED

    model = shutil.copytree(BUNDLED, tmp / "model")
    weights = load_file(str(model / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, str(model / "model.safetensors"))
    ok, tracebacks = refused(
        dupq("predict", "How do I learn Python?", "How can I learn Python?", "--model", str(model))
    )
    return Result(ok, tracebacks=tracebacks)


def bad_training_options(tmp: Path) -> Result:
    """Item 13: an unusable device, pair head, loss, seed or preset is one sentence, not a traceback."""
    data = pairs_file(tmp)
    checks = [
        refused(dupq("train", "--data", str(data), "--out", str(tmp / "x"), *extra, *TRAIN))
        for extra in (
            ["--device", "meta"],
            ["--head", "attention"],
            ["--loss", "hinge"],
            ["--loss", "bce:x"],
            ["--seed", "-1"],
            ["--preset", "nope"],
        )
    ]
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


def kill_9_during_training(tmp: Path) -> Result:
    """Crash safety that held: kill -9 after the first checkpoint, --resume, the same weights as one run."""
    from safetensors.numpy import load_file

    data = pairs_file(tmp, 2000)
    train = [
        "--train-pool",
        "1600",
        "--test-size",
        "200",
        "--dev-size",
        "200",
        "--dim",
        "8",
        "--threads",
        "1",
        "--no-progress",
        "--epochs",
        "6",
        "--preset",
        "labelled",
        "--labelled-val",
        "200",
    ]
    whole = dupq("train", "--data", str(data), "--out", str(tmp / "whole"), *train)
    if whole.returncode != 0:
        return Result(False, detail=whole.stderr.decode()[-300:])
    out = tmp / "killed"
    proc = subprocess.Popen(
        [*DUPQ, "train", "--data", str(data), "--out", str(out), *train],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while not (out / "checkpoint.safetensors").exists() and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = dupq("train", "--data", str(data), "--out", str(out), "--resume", *train)
    a, b = load_file(str(tmp / "whole" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    same = resumed.returncode == 0 and a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    return Result(same, tracebacks=int(b"Traceback" in resumed.stderr))


CASES = [
    adds_after_a_failing_commit,
    cli_add_is_idempotent,
    every_line_accounted_for,
    questions_without_words,
    reads_see_other_processes,
    index_cache_tampered,
    hostile_json_bodies,
    not_utf8_on_the_command_line,
    bad_model_and_metrics_files,
    corrupt_collection_files,
    files_of_killed_writers,
    messages_name_the_real_problem,
    service_manners,
    serve_on_a_port_in_use,
    slow_request_bodies,
    nan_in_json_output,
    kill_9_during_index_add,
    kill_9_server_under_load,
    resume_with_other_options,
    corrupt_checkpoint_and_non_finite_options,
    model_with_nan_weights,
    bad_training_options,
    kill_9_during_training,
]


def run(case) -> Result:
    # A case run in this process warns on stderr as dupq should (the full disk's "could not write"):
    # kept out of the output, which is the one JSON line, with its reasons in each case's result.
    with tempfile.TemporaryDirectory(prefix=f"dupq-{case.__name__}-") as tmp, contextlib.redirect_stderr(io.StringIO()):
        try:
            return case(Path(tmp))
        except Exception:  # noqa: BLE001 -- a case that raises did not survive; say where
            return Result(False, detail=traceback.format_exc(limit=-2).strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    results = {}
    for case in CASES:
        if args.only in case.__name__:
            started = time.perf_counter()
            results[case.__name__] = {**asdict(run(case)), "seconds": round(time.perf_counter() - started, 1)}
    total = {
        key: sum(r[key] for r in results.values()) for key in ("survived", "data_lost", "tracebacks", "server_500s")
    }
    print(json.dumps({"cases": len(results), **total, "results": results}))


if __name__ == "__main__":
    main()
