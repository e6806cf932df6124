"""Fault cases of a collection's files: damage to a whole file or to one row, files of killed writers,
a read-only mount, a milvus-lite file another process holds, NaN where JSON goes.

A collection is built in the case's folder, damaged the way the case names (SQL on
``questions.sqlite``, bytes on ``index.faiss``), then searched through the CLI and the service.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

import faultkit
from faultkit import AUTH, Result, Server, build, dupq, refused, request, stored, strict_json, synthetic


def sql(folder: Path, statement: str, *params) -> None:
    """One statement on the collection's SQLite file, committed (damage done by "another writer")."""
    with sqlite3.connect(folder / "questions.sqlite") as db:
        db.execute(statement, params)


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
    """`dupq search --json` for synthetic question ``i``: the run and its hits ([] when it failed)."""
    run = dupq("search", str(folder), synthetic(i + 1)[i], "-k", str(k), "--json")
    return run, json.loads(run.stdout)["hits"] if run.returncode == 0 and strict_json(run.stdout) else []


def index_cache_tampered(tmp: Path) -> Result:
    """Negating vector 5 of index.faiss is noticed; the cache is rebuilt from SQLite."""
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


def corrupt_collection_files(tmp: Path) -> Result:
    """Random or truncated SQLite, a wrong dim, a short blob, "model" a string, hnsw_m -3."""
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
    """Temporary files and half builds of a killed process are removed; a live one's are kept."""
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


def kill_9_during_index_add(tmp: Path) -> Result:
    """Crash safety (held before): kill -9 `index add --file` mid-way; every acknowledged id is stored."""
    folder = build(tmp / "c", index="hnsw")
    new = synthetic(3000, offset=1000)
    (tmp / "new.txt").write_text("\n".join(new) + "\n")
    proc = subprocess.Popen(
        [*faultkit.DUPQ, "index", "add", str(folder), "--file", str(tmp / "new.txt"), "--batch-size", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=faultkit.ENV,
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


def nan_in_json_output(tmp: Path) -> Result:
    """NaN never reaches JSON: metadata with NaN is refused (library, service); a NaN token another writer
    stored is left out of `search --json` and `/search`; `predict --json` prints strict JSON."""
    from dupq.core.files import DupqError
    from dupq.search.collection import Collection

    folder = build(tmp / "c")
    with Collection.open(folder) as coll:
        try:
            coll.add(["What is the speed of light?"], metadata=[{"score": math.nan}])
            library = False
        except DupqError:
            library = True
    sql(folder, "UPDATE questions SET metadata = ? WHERE id = 3", '{"score": NaN, "spread": -Infinity}')
    search, hits = search_json(folder, 3, k=3)
    predict = dupq("predict", "When will I see you?", "When can I see you again?", "--json")
    with Server(folder) as server:
        add = request(server.url + "/questions", b'{"text": "Light speed?", "metadata": {"a": NaN}}', AUTH)
        found = request(server.url + "/search", json.dumps({"question": synthetic(4)[3], "k": 3}).encode())
    strict = [strict_json(text) for text in (search.stdout, predict.stdout, found.body)]
    ok = library and add.status == 422 and found.status == 200 and all(strict) and len(stored(folder)) == 40
    return Result(
        ok and [h["id"] for h in hits][:1] == [3],
        tracebacks=int(b"Traceback" in search.stderr + predict.stderr),
        server_500s=int(found.status == 500) + int(add.status == 500),
        detail=f"library refused: {library}, /questions {add.status}, strict JSON (search, predict, /search): {strict}",
    )


def nan_embedding_on_open(tmp: Path) -> Result:
    """A stored embedding that is NaN, the cache rebuilt from the rows: refused on open with one sentence
    naming the question (`search` and `serve`), never a question that is silently never found."""
    folder = build(tmp / "c")
    (folder / "index.faiss").unlink()
    set_vector(folder, 9, math.nan)
    checks = [
        refused(dupq("search", str(folder), synthetic(10)[9], "-k", "1"), saying="question 9"),
        refused(dupq("serve", str(folder), "--port", str(faultkit.free_port()), timeout=60), saying="question 9"),
    ]
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


def damaged_rows(tmp: Path) -> Result:
    """One bad row, not a whole file: an embeddings row cut short is refused naming its questions; a row whose
    text is not UTF-8 is left out of the hits with a warning, and the other questions are still found."""
    cut = build(tmp / "cut", n=300)
    (cut / "index.faiss").unlink()
    sql(cut, "UPDATE embeddings SET vectors = substr(vectors, 1, 100) WHERE start = 128")
    short, short_tb = refused(dupq("search", str(cut), "How do I learn Python?"), saying="question 128")
    folder = build(tmp / "c")
    sql(folder, "UPDATE questions SET text = CAST(X'fffe41' AS TEXT) WHERE id = 7")
    run, hits = search_json(folder, 7, k=3)
    other, other_hits = search_json(folder, 8)
    with Server(folder) as server:
        answer = request(server.url + "/search", json.dumps({"question": synthetic(8)[7], "k": 3}).encode())
    served = json.loads(answer.body)["results"] if answer.status == 200 else []
    ok = short and run.returncode == 0 and len(hits) == 2 and 7 not in [h["id"] for h in hits]  # 3 nearest, less 7
    ok = ok and b"warning: the text of question 7" in run.stderr and [h["id"] for h in other_hits] == [8]
    ok = ok and answer.status == 200 and 7 not in [h["id"] for h in served]
    return Result(
        ok,
        tracebacks=short_tb + int(b"Traceback" in run.stderr + other.stderr),
        server_500s=int(answer.status == 500),
        detail=f"search exit {run.returncode}, /search {answer.status}",
    )


def damaged_metadata_rows(tmp: Path) -> Result:
    """A row's metadata that is not JSON, a list on a keyed row, or nested 300 or 100,000 deep: `search` and
    `/search` still answer, with that metadata left out (the key kept) and a warning, never a traceback or 500."""
    folder = build(tmp / "c", keys=True, metadata=True)
    damage = {3: "{bad", 4: "[1,2]", 5: '{"a": ' + "[" * 300 + "]" * 300 + "}", 6: "[" * 100_000}
    for i, text in damage.items():
        sql(folder, "UPDATE questions SET metadata = ? WHERE id = ?", text, i)
    want = {i: {"id": f"k{i}"} for i in damage} | {7: {"row": 7, "id": "k7"}}  # row 7 is intact
    (tmp / "q.txt").write_text("\n".join(synthetic(8)[i] for i in want) + "\n")
    run = dupq("search", str(folder), "--queries", str(tmp / "q.txt"), "-k", "1", "--json")
    lines = [json.loads(line) for line in run.stdout.splitlines() if strict_json(line)] if run.returncode == 0 else []
    cli = {hits[0]["id"]: hits[0]["metadata"] for hits in (line["hits"] for line in lines) if hits}
    with Server(folder) as server:
        answers = [
            request(server.url + "/search", json.dumps({"question": synthetic(8)[i], "k": 1}).encode()) for i in want
        ]
        tracebacks = server.tracebacks()
    served = {r["id"]: r["metadata"] for a in answers if a.status == 200 for r in json.loads(a.body)["results"]}
    warned = all(f"warning: the metadata of question {i}".encode() in run.stderr for i in damage)
    return Result(
        cli == want and served == want and warned,
        tracebacks=int(b"Traceback" in run.stderr) + tracebacks,
        server_500s=sum(a.status == 500 for a in answers),
        detail=f"cli {cli}, service {served}"[:300],
    )


def milvus_lite_in_use(tmp: Path) -> Result:
    """`index add milvus:x.db` (and `search`) while `serve milvus:x.db` runs: one sentence saying another
    process has the file open, no milvus-lite traceback; the server goes on storing."""
    location = f"milvus:{tmp / 'x.db'}"
    (tmp / "q.txt").write_text("\n".join(synthetic(20)) + "\n")
    built = dupq("index", "build", str(tmp / "q.txt"), "--out", location)
    if built.returncode != 0:
        return Result(False, detail=built.stderr.decode()[-300:])
    with Server(location) as server:
        runs = [dupq("index", "add", location, "How do I learn Python quickly?"), dupq("search", location, "How?")]
        added = request(server.url + "/questions", json.dumps({"text": "How do I cook rice well?"}).encode(), AUTH)
    checks = [refused(run, saying="in use by another process") for run in runs]
    return Result(
        all(ok for ok, _ in checks) and added.status == 201,
        tracebacks=sum(t for _, t in checks),
        server_500s=int(added.status == 500),
        detail=runs[0].stderr.decode()[-300:],
    )


def read_only_collection(tmp: Path) -> Result:
    """A collection on a read-only mount is searched (SQLite opened read-only); an add is one sentence."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        return Result(False, detail="cannot make a read-only mount here (unshare -rm is refused)")
    folder, mount = build(tmp / "c"), tmp / "ro"
    mount.mkdir()
    script = f'mount --bind "{folder}" "{mount}" && mount -o remount,bind,ro "{mount}" && exec "$@"'

    def inside(*args: str) -> subprocess.CompletedProcess:
        command = ["unshare", "-rm", "sh", "-c", script, "sh", *faultkit.DUPQ, *args]
        return subprocess.run(command, capture_output=True, env=faultkit.ENV, timeout=120)

    search = inside("search", str(mount), synthetic(6)[5], "-k", "1", "--json")
    hits = json.loads(search.stdout)["hits"] if search.returncode == 0 else []
    add, add_tb = refused(inside("index", "add", str(mount), "What is a new question?"), saying="read-only")
    return Result(
        [h["id"] for h in hits] == [5] and add,
        tracebacks=add_tb + int(b"Traceback" in search.stderr),
        detail=search.stderr.decode()[-300:],
    )


CASES = [
    index_cache_tampered,
    corrupt_collection_files,
    damaged_rows,
    nan_embedding_on_open,
    damaged_metadata_rows,
    nan_in_json_output,
    files_of_killed_writers,
    kill_9_during_index_add,
    milvus_lite_in_use,
    read_only_collection,
]
