"""Faults of a collection's files: damage to a whole file or to one row, files of killed writers,
a read-only mount, a milvus-lite file another process holds, NaN where JSON goes.

A collection is built in the test's folder, damaged the way the test names (SQL on
``questions.sqlite``, bytes on ``index.faiss``), then searched through the CLI and the service.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import faultkit
import numpy as np
import pytest
from faultkit import AUTH, Server, build, clean, dupq, sql, stored, strict_json, synthetic

from support.errors import library_refuses, refused
from support.serving import free_port
from support.serving import http as request

pytestmark = pytest.mark.faults


def set_vector(folder: Path, i: int, value: float) -> None:
    """Set every component of question ``i``'s stored embedding to ``value`` (NaN, say)."""
    with sqlite3.connect(folder / "questions.sqlite") as db:
        start, count, blob = db.execute(
            "SELECT start, count, vectors FROM embeddings WHERE start <= ? ORDER BY start DESC LIMIT 1", (i,)
        ).fetchone()
        vectors = np.frombuffer(blob, np.float32).reshape(count, -1).copy()
        vectors[i - start] = value
        db.execute("UPDATE embeddings SET vectors = ? WHERE start = ?", (vectors.tobytes(), start))


def search_json(folder, i: int, k: int = 1) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`dupq search --json` for synthetic question ``i``: the run (checked clean) and its hits."""
    run = dupq("search", str(folder), synthetic(i + 1)[i], "-k", str(k), "--json")
    clean(run)
    assert strict_json(run.stdout), run.stdout[-300:]
    return run, json.loads(run.stdout)["hits"]


def test_index_cache_tampered(tmp_path: Path):
    """Negating vector 5 of index.faiss is noticed; the cache is rebuilt from SQLite."""
    import faiss

    folder = build(tmp_path / "c")
    index = faiss.read_index(str(folder / "index.faiss"))
    vectors = index.reconstruct_n(0, index.ntotal)
    vectors[5] *= -1
    altered = faiss.IndexFlatIP(index.d)
    altered.add(vectors)
    faiss.write_index(altered, str(folder / "index.faiss"))
    _, hits = search_json(folder, 5)
    assert hits[0]["id"] == 5


@pytest.mark.parametrize("how", ["random", "truncated", "dim", "blob", "model", "hnsw_m"])
def test_corrupt_collection_files(tmp_path: Path, how):
    """Random or truncated SQLite, a wrong dim, a short blob, "model" a string, hnsw_m -3."""
    folder = build(tmp_path / "c", n=300)
    (folder / "index.faiss").unlink()
    manifest = json.loads((folder / "manifest.json").read_text())
    if how == "random":
        (folder / "questions.sqlite").write_bytes(os.urandom(8192))
    elif how == "truncated":
        data = (folder / "questions.sqlite").read_bytes()
        (folder / "questions.sqlite").write_bytes(data[: len(data) // 3])
    elif how == "blob":
        sql(folder, "UPDATE embeddings SET vectors = substr(vectors, 1, 100)")
    else:
        changes = {
            "dim": {"dim": 64},
            "model": {"model": "bundled"},
            "hnsw_m": {"index": {"kind": "hnsw", "hnsw_m": -3}},
        }
        manifest.update(changes[how])
        (folder / "manifest.json").write_text(json.dumps(manifest))
    refused(dupq("search", str(folder), "How do I learn Python?"))


def test_files_of_killed_writers(tmp_path: Path):
    """Temporary files and half builds of a killed process are removed; a live one's are kept."""
    folder = build(tmp_path / "c")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = dead.stdout.strip()
    stale = [folder / f".index.faiss.{dead}-abcd1234.tmp", folder / f".manifest.json.{dead}-abcd1234.tmp"]
    for path in stale:
        path.write_bytes(b"x" * 1000)
    (tmp_path / f".d.building-{dead}").mkdir()
    (tmp_path / "q.txt").write_text("How do I learn Python?\n")
    dupq("search", str(folder), "How do I learn Python?")  # opening cleans the collection's folder
    dupq("index", "build", str(tmp_path / "q.txt"), "--out", str(tmp_path / "d"))  # building cleans its parent
    assert [p.name for p in [*stale, tmp_path / f".d.building-{dead}"] if p.exists()] == []


def test_nan_in_json_output(tmp_path: Path):
    """NaN never reaches JSON: metadata with NaN is refused (library, service); a NaN token another writer
    stored is left out of `search --json` and `/search`; `predict --json` prints strict JSON."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c")
    with Collection.open(folder) as coll:
        assert library_refuses(lambda: coll.add(["What is the speed of light?"], metadata=[{"score": math.nan}]))
    sql(folder, "UPDATE questions SET metadata = ? WHERE id = 3", '{"score": NaN, "spread": -Infinity}')
    _, hits = search_json(folder, 3, k=3)
    predict = dupq("predict", "When will I see you?", "When can I see you again?", "--json")
    clean(predict)
    with Server(folder) as server:
        add = request(server.url + "/questions", b'{"text": "Light speed?", "metadata": {"a": NaN}}', AUTH)
        found = request(server.url + "/search", json.dumps({"question": synthetic(4)[3], "k": 3}).encode())
    assert add.status == 422 and found.status == 200
    assert strict_json(predict.stdout) and strict_json(found.body)
    assert [h["id"] for h in hits][:1] == [3] and len(stored(folder)) == 40


def test_nan_embedding_on_open(tmp_path: Path):
    """A stored embedding that is NaN, the cache rebuilt from the rows: refused on open with one sentence
    naming the question (`search` and `serve`), never a question that is silently never found."""
    folder = build(tmp_path / "c")
    (folder / "index.faiss").unlink()
    set_vector(folder, 9, math.nan)
    refused(dupq("search", str(folder), synthetic(10)[9], "-k", "1"), "question 9")
    refused(dupq("serve", str(folder), "--port", str(free_port()), timeout=60), "question 9")


def test_damaged_rows(tmp_path: Path):
    """One bad row, not a whole file: an embeddings row cut short is refused naming its questions; a row whose
    text is not UTF-8 is left out of the hits with a warning, and the other questions are still found."""
    cut = build(tmp_path / "cut", n=300)
    (cut / "index.faiss").unlink()
    sql(cut, "UPDATE embeddings SET vectors = substr(vectors, 1, 100) WHERE start = 128")
    refused(dupq("search", str(cut), "How do I learn Python?"), "question 128")
    folder = build(tmp_path / "c")
    sql(folder, "UPDATE questions SET text = CAST(X'fffe41' AS TEXT) WHERE id = 7")
    run, hits = search_json(folder, 7, k=3)
    assert len(hits) == 2 and 7 not in [h["id"] for h in hits]  # the 3 nearest, less 7
    assert b"warning: the text of question 7" in run.stderr
    assert [h["id"] for h in search_json(folder, 8)[1]] == [8]
    with Server(folder) as server:
        answer = request(server.url + "/search", json.dumps({"question": synthetic(8)[7], "k": 3}).encode())
    assert answer.status == 200 and 7 not in [h["id"] for h in json.loads(answer.body)["results"]]


def test_damaged_metadata_rows(tmp_path: Path):
    """A row's metadata that is not JSON, a list on a keyed row, or nested 300 or 100,000 deep: `search` and
    `/search` still answer, with that metadata left out (the key kept) and a warning, never a traceback or 500."""
    folder = build(tmp_path / "c", keys=True, metadata=True)
    damage = {3: "{bad", 4: "[1,2]", 5: '{"a": ' + "[" * 300 + "]" * 300 + "}", 6: "[" * 100_000}
    for i, text in damage.items():
        sql(folder, "UPDATE questions SET metadata = ? WHERE id = ?", text, i)
    want = {i: (f"k{i}", {}) for i in damage} | {7: ("k7", {"row": 7})}  # row 7 is intact
    (tmp_path / "q.txt").write_text("\n".join(synthetic(8)[i] for i in want) + "\n")
    run = dupq("search", str(folder), "--queries", str(tmp_path / "q.txt"), "-k", "1", "--json")
    clean(run)
    lines = [json.loads(line) for line in run.stdout.splitlines() if strict_json(line)]
    assert {h[0]["id"]: (h[0]["key"], h[0]["metadata"]) for h in (line["hits"] for line in lines) if h} == want
    for i in damage:
        assert f"warning: the metadata of question {i}".encode() in run.stderr
    with Server(folder) as server:
        answers = [
            request(server.url + "/search", json.dumps({"question": synthetic(8)[i], "k": 1}).encode()) for i in want
        ]
        assert not server.tracebacks()
    assert [a.status for a in answers] == [200] * len(want)
    assert {r["id"]: (r["key"], r["metadata"]) for a in answers for r in json.loads(a.body)["results"]} == want


def test_milvus_lite_in_use(tmp_path: Path):
    """`index add milvus:x.db` (and `search`) while `serve milvus:x.db` runs: one sentence saying another
    process has the file open, no milvus-lite traceback; the server goes on storing."""
    location = f"milvus:{tmp_path / 'x.db'}"
    (tmp_path / "q.txt").write_text("\n".join(synthetic(20)) + "\n")
    clean(dupq("index", "build", str(tmp_path / "q.txt"), "--out", location))
    with Server(location) as server:
        runs = [dupq("index", "add", location, "How do I learn Python quickly?"), dupq("search", location, "How?")]
        added = request(server.url + "/questions", json.dumps({"text": "How do I cook rice well?"}).encode(), AUTH)
    for run in runs:
        refused(run, "in use by another process")
    assert added.status == 201


def test_read_only_collection(tmp_path: Path):
    """A collection on a read-only mount is searched (SQLite opened read-only); an add is one sentence."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "cannot make a read-only mount here: unshare -rm is refused"
        )
    folder, mount = build(tmp_path / "c"), tmp_path / "ro"
    mount.mkdir()
    script = f'mount --bind "{folder}" "{mount}" && mount -o remount,bind,ro "{mount}" && exec "$@"'

    def inside(*args: str) -> subprocess.CompletedProcess:
        command = ["unshare", "-rm", "sh", "-c", script, "sh", *faultkit.DUPQ, *args]
        return subprocess.run(command, capture_output=True, env=faultkit.ENV, timeout=120)

    search = inside("search", str(mount), synthetic(6)[5], "-k", "1", "--json")
    clean(search)
    assert [h["id"] for h in json.loads(search.stdout)["hits"]] == [5]
    refused(inside("index", "add", str(mount), "What is a new question?"), "read-only")
