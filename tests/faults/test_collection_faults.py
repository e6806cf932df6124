"""Faults of a collection's files met by `dupq` as a user runs it: damage refused on open, damaged rows, a
read-only mount, a milvus-lite file another process holds, NaN where JSON goes.

A collection is built in the test's folder, damaged the way the test names (SQL on ``questions.sqlite``), then
searched through the CLI and the service. Damage the library meets alike in any process (corrupt files, a tampered
index cache, files of killed writers, damaged metadata) is tested in this process, in tests/collection.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
from pathlib import Path

import faultkit
import numpy as np
import pytest
from faultkit import AUTH, Server, build, clean, dupq, sql, stored, strict_json, synthetic

from support.errors import library_refuses, refused
from support.servicekit import milvus_or_skip
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
    run = clean(dupq("search", str(folder), synthetic(i + 1)[i], "-k", str(k), "--json"))
    assert strict_json(run.stdout), run.stdout[-300:]
    return run, json.loads(run.stdout)["hits"]


# Damage `search` and `serve` refuse on open, run as a user runs them: exit status 2 and one sentence naming the
# folder and what the words given say (the library's and CliRunner's refusals of each damage: tests/collection).
DAMAGE = {
    "random sqlite": (lambda folder: (folder / "questions.sqlite").write_bytes(os.urandom(8192)), ""),
    "NaN embedding": (lambda folder: set_vector(folder, 9, math.nan), "question 9"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_collection_is_refused_on_open(tmp_path: Path, damage):
    folder = build(tmp_path / "c")
    (folder / "index.faiss").unlink()  # rebuilt from the stored rows, each read
    damage, said = DAMAGE[damage]
    damage(folder)
    refused(dupq("search", str(folder), synthetic(10)[9], "-k", "1"), str(folder), said)
    refused(dupq("serve", str(folder), "--port", str(free_port()), timeout=60), str(folder), said)


def test_nan_in_json_output(tmp_path: Path):
    """NaN never reaches JSON: metadata with NaN is refused (library, service); a NaN token another writer
    stored is left out of `search --json` and `/search`; `predict --json` prints strict JSON."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c")
    with Collection.open(folder) as coll:
        assert library_refuses(lambda: coll.add(["What is the speed of light?"], metadata=[{"score": math.nan}]))
    sql(folder, "UPDATE questions SET metadata = ? WHERE id = 3", '{"score": NaN, "spread": -Infinity}')
    _, hits = search_json(folder, 3, k=3)
    predict = clean(dupq("predict", "When will I see you?", "When can I see you again?", "--json"))
    with Server(folder) as server:
        add = request(server.url + "/questions", b'{"text": "Light speed?", "metadata": {"a": NaN}}', AUTH)
        found = request(server.url + "/search", json.dumps({"question": synthetic(4)[3], "k": 3}).encode())
    assert add.status == 422 and found.status == 200
    assert strict_json(predict.stdout) and strict_json(found.body)
    assert [h["id"] for h in hits][:1] == [3] and len(stored(folder)) == 40


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


def test_milvus_lite_in_use(tmp_path: Path):
    """`index add milvus:x.db` (and `search`) while `serve milvus:x.db` runs: one sentence saying another
    process has the file open, no milvus-lite traceback; the server goes on storing."""
    location = milvus_or_skip(tmp_path / "x.db")
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
        refuse = pytest.fail if os.environ.get("CI") else pytest.skip
        refuse("cannot make a read-only mount here: unshare -rm is refused")
    folder, mount = build(tmp_path / "c"), tmp_path / "ro"
    mount.mkdir()
    script = f'mount --bind "{folder}" "{mount}" && mount -o remount,bind,ro "{mount}" && exec "$@"'

    def inside(*args: str) -> subprocess.CompletedProcess:
        command = ["unshare", "-rm", "sh", "-c", script, "sh", *faultkit.DUPQ, *args]
        return subprocess.run(command, capture_output=True, env=faultkit.ENV, timeout=120)

    search = clean(inside("search", str(mount), synthetic(6)[5], "-k", "1", "--json"))
    assert [h["id"] for h in json.loads(search.stdout)["hits"]] == [5]
    refused(inside("index", "add", str(mount), "What is a new question?"), "read-only")
