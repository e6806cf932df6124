"""The persistent collection: build, open, add, search, refusals, threads, and kill -9 mid-add."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.files import DupqError
from dupq.index import DATABASE, INDEX_FILE, Collection, Hit
from dupq.model import Model
from dupq.search import search


def distinct(splits, n: int, skip: int = 0) -> list[str]:
    """``n`` distinct non-empty questions of the small split, after the first ``skip``."""
    seen: dict[str, None] = {}
    for q in splits.pool.q1 + splits.pool.q2 + splits.test.q1 + splits.test.q2:
        if q.strip():
            seen.setdefault(q)
        if len(seen) >= n + skip:
            break
    return list(seen)[skip:]


@pytest.fixture(scope="module")
def texts(small_splits) -> list[str]:
    return distinct(small_splits, 2000)


@pytest.fixture(scope="module")
def built(tmp_path_factory, texts, tiny_model) -> Path:
    folder = tmp_path_factory.mktemp("coll") / "faq"
    meta = [{"row": i} if i % 2 else {} for i in range(len(texts))]
    Collection.build(folder, texts, tiny_model, ids=[f"q{i}" for i in range(len(texts))], metadata=meta).close()
    return folder


def stored_count(folder: Path) -> tuple[int, int]:
    with sqlite3.connect(folder / DATABASE) as db:
        return db.execute("SELECT COUNT(*), (SELECT SUM(count) FROM embeddings) FROM questions").fetchone()


def test_build_open_search(built, texts, tiny_model):
    with Collection.open(built) as coll:  # no model: the recorded folder is loaded
        assert len(coll) == len(texts) and coll.threshold == coll.model.threshold
        hits = coll.search([texts[7], texts[8]], k=5)
        assert [len(h) for h in hits] == [5, 5]
        top = hits[0][0]
        assert isinstance(top, Hit) and top.id == 7 and top.text == texts[7] and top.score > 0.999
        assert top.duplicate and top.metadata == {"row": 7, "id": "q7"}
        assert hits[1][0].metadata == {"id": "q8"}
        assert all(a.score >= b.score for a, b in zip(hits[0], hits[0][1:]))
        # The collection's answer is the pure search over the stored questions' vectors.
        queries = ["How do I learn Python fast?", "Why is the sky blue?"]
        got = coll.search(queries, k=10)
        want_scores, want_ids = search(tiny_model.encode(queries), tiny_model.encode(texts), 10)
        assert [[h.id for h in row] for row in got] == want_ids.tolist()
        np.testing.assert_allclose([[h.score for h in row] for row in got], want_scores, atol=1e-5)
        assert len(coll.search(["anything at all"], k=len(texts) + 50)[0]) == len(texts)


def test_add_is_durable_and_indexed(tmp_path, texts, tiny_model):
    folder = tmp_path / "c"
    coll = Collection.build(folder, texts[:300], tiny_model, index="hnsw")
    assert coll.add(texts[300:310], metadata=[{"answer": i} for i in range(10)]) == list(range(300, 310))
    assert coll.add([]) == []
    assert coll.search([texts[305]], k=1)[0][0].metadata == {"answer": 5}
    # A second handle, opened without closing the first (as after a crash), sees every added row.
    other = Collection.open(folder, tiny_model)
    assert len(other) == 310 and len(other._index) == 310
    assert other.search([texts[309]], k=1)[0][0].id == 309
    # Rows added by another handle are caught up before this one adds its own.
    assert other.add([texts[400]]) == [310]
    assert coll.add([texts[401]]) == [311]
    assert coll.search([texts[400]], k=1)[0][0].id == 310
    coll.close()
    other.close()
    coll.close()  # closing twice is harmless
    with pytest.raises(DupqError, match="closed"):
        coll.search(["x"])


def test_stale_or_broken_index_file_is_repaired(tmp_path, texts, tiny_model):
    folder = tmp_path / "c"
    Collection.build(folder, texts[:200], tiny_model).close()
    with Collection.open(folder) as coll:
        coll.add(texts[200:250])  # fewer than SAVE_ON_CLOSE rows: index.faiss stays a stale prefix of 200
    with Collection.open(folder) as coll:
        assert len(coll._index) == 250 and coll.search([texts[240]], k=1)[0][0].id == 240
    (folder / INDEX_FILE).write_bytes(b"garbage")
    with Collection.open(folder) as coll:
        assert len(coll._index) == 250 and coll.search([texts[10]], k=1)[0][0].id == 10
    # An index file of another collection (same size, other vectors) is detected and rebuilt.
    Collection.build(tmp_path / "d", texts[1000:1200], tiny_model).close()
    (folder / INDEX_FILE).write_bytes((tmp_path / "d" / INDEX_FILE).read_bytes())
    with Collection.open(folder) as coll:
        assert coll.search([texts[150]], k=1)[0][0].id == 150


def test_refusals(tmp_path, built, tiny_model, tiny_model_dir):
    other = Model.create(tiny_model.vocab, dim=32)
    with pytest.raises(DupqError, match=rf"{tiny_model.fingerprint()}.*{other.fingerprint()}"):
        Collection.open(built, other)
    with pytest.raises(DupqError, match="does not exist"):
        Collection.open(tmp_path / "missing")
    with pytest.raises(DupqError, match="not a dupq collection"):
        Collection.open(tmp_path)
    with pytest.raises(DupqError, match="not empty"):
        Collection.build(built, ["a question"], tiny_model)
    with pytest.raises(DupqError, match="question 2 is empty"):
        Collection.build(tmp_path / "e", ["a question", "  "], tiny_model)
    with pytest.raises(DupqError, match="not unique"):
        Collection.build(tmp_path / "e", ["a", "b"], tiny_model, ids=["x", "x"])
    assert not (tmp_path / "e").exists()
    with Collection.open(built) as coll:
        with pytest.raises(DupqError, match="query 1 is empty"):
            coll.search(["   "])
        with pytest.raises(DupqError, match="not a single string"):
            coll.search("How?")
        with pytest.raises(DupqError, match="JSON"):
            coll.add(["ok"], metadata=[{"bad": object()}])
        assert len(coll) == 2000  # nothing half-added by the refused add


def test_cli_errors_are_one_sentence_and_exit_2(tmp_path, built, tiny_model):
    other_dir = tmp_path / "other-model"
    Model.create(tiny_model.vocab, dim=32).save(other_dir)
    runner = CliRunner()
    cases = {
        "different model": ["search", str(built), "How?", "--model", str(other_dir)],
        "empty query": ["search", str(built), "  "],
        "missing collection": ["search", str(tmp_path / "nope"), "How?"],
    }
    for name, args in cases.items():
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (name, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, result.output)
    result = runner.invoke(app, ["search", str(built), "How do I learn Python?", "-k", "3", "--json"])
    assert result.exit_code == 0 and result.output.count('"id"') >= 3


def test_cli_build_add_search(tmp_path, small_splits, tiny_model_dir):
    runner = CliRunner()
    qfile = tmp_path / "faq.csv"
    qfile.write_text('question,answer\n"How do I learn Python?",docs.python.org\n"Why is the sky blue?",Rayleigh\n')
    out = tmp_path / "faq"
    result = runner.invoke(app, ["index", "build", str(qfile), "--model", str(tiny_model_dir), "--out", str(out), "--index", "hnsw"])
    assert result.exit_code == 0, result.output
    assert "stored 2 questions" in result.output
    result = runner.invoke(app, ["index", "add", str(out), "How can I learn Python quickly?"])
    assert result.exit_code == 0 and "id 2" in result.output
    result = runner.invoke(app, ["search", str(out), "How do I learn Python?", "-k", "1"])
    assert result.exit_code == 0 and "How do I learn Python?" in result.output
    queries = tmp_path / "q.txt"
    queries.write_text("Why is the sky blue?\nHow to learn Python?\n")
    result = runner.invoke(app, ["search", str(out), "--queries", str(queries), "-k", "2", "--json"])
    assert result.exit_code == 0 and len(result.output.strip().splitlines()) == 2
    assert '"answer": "Rayleigh"' in result.output


def test_concurrent_searches_and_adds(tmp_path, texts, tiny_model):
    coll = Collection.build(tmp_path / "c", texts[:500], tiny_model, index="hnsw")
    errors: list[BaseException] = []

    def searcher():
        try:
            for i in range(30):
                hits = coll.search([texts[i]], k=3)[0]
                assert hits[0].id == i
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def adder(lo):
        try:
            for j in range(lo, lo + 100, 10):
                coll.add(texts[j : j + 10])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=searcher) for _ in range(3)] + [threading.Thread(target=adder, args=(lo,)) for lo in (500, 600)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(coll) == len(coll._index) == 700
    stored = dict(coll._reader.execute("SELECT id, text FROM questions").fetchall())
    assert sorted(stored.values()) == sorted(texts[:700])  # every add landed once, whole
    coll.close()


@pytest.mark.slow
def test_kill_9_during_add(tmp_path, small_splits, texts, tiny_model, tiny_model_dir):
    """kill -9 a `dupq index add --file` of 10,000 questions mid-way; reopen; nothing lost or half-added."""
    folder = tmp_path / "c"
    Collection.build(folder, texts[:500], tiny_model, index="hnsw").close()
    new = distinct(small_splits, 10_000, skip=2000)
    assert len(new) == 10_000
    qfile = tmp_path / "new.txt"
    qfile.write_text("\n".join(new) + "\n")
    dupq = [sys.executable, "-c", "from dupq.cli import main; main()"]
    proc = subprocess.Popen(
        [*dupq, "index", "add", str(folder), "--file", str(qfile), "--batch-size", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    reported: list[int] = []
    for line in proc.stdout:
        lo, hi = map(int, re.search(r"ids (\d+)-(\d+)", line).groups())
        reported.extend(range(lo, hi + 1))
        if len(reported) >= 1000:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    questions, vectors = stored_count(folder)
    assert questions == vectors  # every stored question has its embedding, and no more
    assert 500 + len(reported) <= questions < 500 + len(new)  # all acknowledged, not all
    with Collection.open(folder) as coll:
        assert len(coll) == len(coll._index) == questions
        found = coll.search([new[i - 500] for i in reported], k=10)
        for i, row in zip(reported, found):  # questions the tiny model encodes alike tie at the top
            assert i in {h.id for h in row if h.score > row[0].score - 1e-5}
        stored = dict(coll._reader.execute("SELECT id, text FROM questions WHERE id >= 500").fetchall())
        assert [stored[i] for i in reported] == [new[i - 500] for i in reported]
