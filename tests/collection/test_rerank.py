"""A collection with a reranker: its order against a brute-force re-scoring, its stored vectors against fresh ones
(after add, update, remove, re-encoding and a kill -9), and ``rerank=False`` / ``--no-rerank``.

Two tiny LSTM models stand in for the fast model and the reranker (any model reranks): ``tiny_model``
finds the candidates, ``head_model`` (a pair head: its verdicts read both vectors) orders them.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import sys

import numpy as np
import pytest
from collkit import distinct, kill_9_when
from hypothesis import given, settings
from hypothesis import strategies as st

from dupq.collection.collection import Collection, Location
from dupq.collection.folder.backend import DATABASE
from dupq.collection.reencode import reencode
from dupq.collection.rerank import RERANK_CANDIDATES, HeldVectors, joined, rerank_candidates
from dupq.core.errors import DupqError
from support.errors import refused
from support.kit import cli

K = 20  # candidates in these tests


@pytest.fixture(scope="module")
def texts(small_splits) -> list[str]:
    return distinct(small_splits, 400)


@pytest.fixture(scope="module")
def queries(small_splits) -> list[str]:
    return [q for q in small_splits.test.q1 if q.strip()][:12]


def brute_force(reranker, query: str, candidates: list[tuple[int, str]]) -> list[tuple[int, float]]:
    """Every candidate re-scored by the reranker directly (one text at a time), best first; a tie keeps the
    candidates' order."""
    q = reranker.encode([query])[0]
    scored = [(i, float(reranker.encode([text])[0] @ q)) for i, text in candidates]
    return sorted(scored, key=lambda s: -s[1])  # sorted() is stable


def assert_fresh(coll: Collection, expect_all: bool = False) -> dict:
    """The stored reranker vectors equal the reranker's vectors of the stored texts now (and only stored ones)."""
    stored = coll.stored_reranker_vectors()
    texts = {i: text for i, _, text, _ in coll.stored_rows()}
    assert set(stored) <= set(texts)
    if expect_all:
        assert set(stored) == set(texts)
    for i, v in stored.items():
        np.testing.assert_allclose(v, coll.reranker.encode([texts[i]])[0], atol=1e-5)
    return stored


def test_reranked_order_equals_brute_force(tmp_path, texts, queries, tiny_model, head_model):
    coll = Collection.build(tmp_path / "c", texts, tiny_model, rerank=head_model)
    with coll:
        fast = coll.search(queries, k=K, rerank=False)
        reranked = coll.search(queries, k=K, candidates=K)  # nothing stored yet: the model's K alone
        top3 = coll.search(queries, k=3, candidates=K, rerank=True)
        assert coll.stored_reranker_vectors()  # the first search stored its candidates' vectors
        for query, candidates, hits, first in zip(queries, fast, reranked, top3):
            assert all(h.ranked_by == "model" for h in candidates)
            assert all(h.ranked_by == "reranker" for h in hits)
            want = brute_force(head_model, query, [(h.id, h.text) for h in candidates])
            assert {h.id for h in hits} == {h.id for h in candidates}
            np.testing.assert_allclose([h.score for h in hits], [s for _, s in want], atol=1e-5)
            brute = dict(want)
            np.testing.assert_allclose([h.score for h in hits], [brute[h.id] for h in hits], atol=1e-5)
            # the stored vectors are candidates now: the top 3 are at least as near by the reranker
            assert [h.score for h in first] >= [h.score for h in hits[:3]]
            verdicts = head_model.verdicts([query] * len(hits), [h.text for h in hits])  # the reranker's judge
            assert [h.duplicate for h in hits] == verdicts.duplicate.tolist()
            np.testing.assert_allclose([h.probability for h in hits], verdicts.probability, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=30), min_size=1, max_size=6),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
)
def test_held_vectors_find_what_a_loop_over_the_latest_vectors_finds(batches, k, seed):
    """Vectors put in batches (an id put again replaces its vector; past 1,024 rows the store grows): the nearest
    held ids equal a loop over a dict of each id's latest vector, sorted."""
    rng = np.random.default_rng(seed)
    held, latest = HeldVectors(3), {}
    for ids in batches:
        vectors = rng.integers(-3, 4, size=(len(ids), 3)).astype(np.float32)  # small integers: exact dot products
        held.put(ids, vectors)
        latest.update(zip(ids, vectors))  # the last of an id within a batch wins, as put writes in order
    query = rng.integers(-3, 4, size=(1, 3)).astype(np.float32)
    got = held.nearest(query, k)[0].tolist()
    score = {i: float(v @ query[0]) for i, v in latest.items()}
    assert len(held) == len(latest) and len(got) == min(k, len(latest)) == len(set(got))
    assert [score[i] for i in got] == sorted(score.values(), reverse=True)[: len(got)]


def test_held_vectors_grow_past_their_first_room():
    held = HeldVectors(2)
    held.put(list(range(3_000)), np.tile(np.float32([1, 0]), (3_000, 1)))
    held.put([2_999], np.float32([[0, 1]]))
    assert len(held) == 3_000 and held.nearest(np.float32([[0, 1]]), 1).tolist() == [[2_999]]


@given(
    st.lists(st.lists(st.integers(-1, 30), max_size=8), min_size=1, max_size=4),
    st.lists(st.integers(0, 30), max_size=10),
    st.sets(st.integers(0, 30)),
    st.integers(0, 6),
)
def test_joined_candidates_equal_a_loop(mine, theirs, admitted, limit):
    """Each row: its own candidates (-1 dropped), then the first ``limit`` admitted of the other list it lacks."""
    width = max(map(len, mine))
    ids = np.array([row + [-1] * (width - len(row)) for row in mine], dtype=np.int64).reshape(len(mine), width)
    extra = np.array([theirs] * len(mine), dtype=np.int64).reshape(len(mine), len(theirs))
    got = joined(ids, extra, admitted, limit)
    for row, out in zip(mine, got.tolist()):
        want = [i for i in row if i >= 0]
        for i in [i for i in theirs if i in admitted][:limit]:
            if i not in want:
                want.append(i)
        assert out[: len(want)] == want and set(out[len(want) :]) <= {-1}


def test_stored_vectors_are_candidates_too(tmp_path, texts, queries, tiny_model, head_model):
    """With every reranker vector stored (``rerank_now``), a search's candidates are the model's K best and the
    reranker's own K best over every question that the search may answer: its order equals all of them re-scored one
    text at a time and sorted, so its top hit is the reranker's own best over the whole collection. A filter and the
    review queue hold for the reranker's own candidates as for the model's."""
    metadata = [{"site": "ab"[i % 2]} for i in range(len(texts))]
    with Collection.build(
        tmp_path / "c", texts, tiny_model, metadata=metadata, rerank=head_model, rerank_now=True
    ) as coll:
        # the nearest there is, once stored
        waiting = coll.add([queries[0]], metadata=[{"site": "a"}], keys=["ticket-1"], pending=True)
        assert coll.rerank_all() == 1
        rows = {i: (text, meta) for i, _, text, meta in coll.stored_rows()}
        every = {i: head_model.encode([text])[0] for i, (text, _) in rows.items()}  # one text at a time
        added = 0
        for where in (None, {"site": "a"}):
            fast = coll.search(queries, k=K, rerank=False, where=where)
            reranked = coll.search(queries, k=K, candidates=K, where=where)
            for query, candidates, hits in zip(queries, fast, reranked):
                q = head_model.encode([query])[0]
                answerable = [
                    i for i, (_, meta) in rows.items() if i not in waiting and (where is None or meta["site"] == "a")
                ]
                own = sorted(answerable, key=lambda i: -float(every[i] @ q))[:K]
                pool = [h.id for h in candidates] + [i for i in own if i not in {h.id for h in candidates}]
                want = sorted(pool, key=lambda i: -float(every[i] @ q))[:K]
                np.testing.assert_allclose([h.score for h in hits], [float(every[i] @ q) for i in want], atol=1e-5)
                assert hits[0].id == own[0]  # the reranker's best over every question it may answer
                assert waiting[0] not in {h.id for h in hits}
                added += len({h.id for h in hits} - {h.id for h in candidates})
        assert added  # the fault: only the model's candidates scored


def test_a_rerankers_own_number_of_candidates_is_the_default(tmp_path, texts, queries, tiny_model, head_model):
    """A reranker whose search calibration records its number of candidates (a named model's, chosen on the
    help-desk dev half) orders that many when a search does not say; one without orders RERANK_CANDIDATES."""
    own = copy.deepcopy(head_model)
    fit = {"a": 1.0, "b": 1.0, "c": 0.0, "cosine": 0.0, "margin": 0.0, "margin_range": [-1.0, 1.0]}
    own.judge.search_calibration = {**fit, "suggest": 0.3, "duplicate": 0.6, "candidates": 3}

    def first_search(name: str, **candidates) -> list[list[int]]:  # nothing stored: the model's candidates alone
        with Collection.build(tmp_path / name, texts, tiny_model, rerank=own) as coll:
            return [[h.id for h in row] for row in coll.search(queries, k=3, **candidates)]

    default = first_search("default")
    assert default == first_search("3", candidates=3)
    assert default != first_search("many", candidates=RERANK_CANDIDATES)  # the fault: K ignored
    assert rerank_candidates(head_model) == RERANK_CANDIDATES


def test_no_rerank_gives_the_fast_models_order(tmp_path, texts, queries, tiny_model, tiny_model_dir, head_model_dir):
    qfile = tmp_path / "faq.txt"
    qfile.write_text("\n".join(texts) + "\n")
    for name, extra in [("plain", []), ("reranked", ["--rerank", head_model_dir])]:
        built = cli("index", "build", qfile, "--model", tiny_model_dir, "--out", tmp_path / name, *extra)
        assert built.exit_code == 0, built.output

    def search(name: str, *extra: str) -> list[dict]:
        run = cli("search", tmp_path / name, queries[0], "-k", "5", "--json", *extra)
        assert run.exit_code == 0, run.output
        return json.loads(run.output)["hits"]

    plain, skipped, reranked = search("plain"), search("reranked", "--no-rerank"), search("reranked")
    assert skipped == plain and {h["ranked_by"] for h in plain} == {"model"}
    assert {h["ranked_by"] for h in reranked} == {"reranker"}
    with Collection.open(tmp_path / "plain") as coll:
        assert [h.id for h in coll.search(queries[:1], k=5)[0]] == [h["id"] for h in plain]
        with pytest.raises(DupqError, match="has no reranker"):
            coll.search(queries[:1], rerank=True)


def test_stored_vectors_follow_add_update_remove_and_reencode(tmp_path, texts, queries, tiny_model, head_model):
    keys = [f"q{i}" for i in range(len(texts))]
    coll = Collection.build(
        tmp_path / "c", texts[:200], tiny_model, keys=keys[:200], rerank=head_model, rerank_now=True
    )
    assert coll.reranker_encoded == 200
    assert_fresh(coll, expect_all=True)
    coll.search(queries, k=5)
    assert coll.reranker_encoded == 200  # every candidate's vector was stored at the build: none encoded again

    coll.add(texts[200:300], keys=keys[200:300])
    coll.search(texts[200:300], k=5)  # each new question is its own best candidate: its vector is computed now
    stored = assert_fresh(coll)
    assert len(stored) > 200
    encoded = coll.reranker_encoded
    coll.search(texts[200:300], k=5)
    assert coll.reranker_encoded == encoded  # a question is encoded by the reranker once

    old = coll.get("q3")[0]
    new = coll.update("q3", text=texts[350])
    coll.update("q4", metadata={"status": "open"})  # the text stays: its vector stays
    coll.remove(["q5", "q6"])
    stored = assert_fresh(coll)
    assert old not in stored and new not in stored and coll.get("q4")[0] in stored
    coll.search([texts[350]], k=3)
    assert new in assert_fresh(coll)
    coll.close()

    with Collection.open(tmp_path / "c") as again:  # the reranker is remembered
        assert again.reranker is not None and again.reranker.fingerprint() == head_model.fingerprint()
        again.search(queries, k=5)
        assert again.reranker_encoded <= len(queries) * 5  # only questions never a candidate before
        before = again.stored_reranker_vectors()

    with reencode(tmp_path / "c", head_model, tmp_path / "d") as new_coll:
        assert new_coll.reranker.fingerprint() == head_model.fingerprint()
        moved = assert_fresh(new_coll)
        assert len(moved) == len(before)  # the reranker's work is kept, by text
        new_coll.search(queries, k=5)
        assert new_coll.reranker_encoded <= len(queries) * 5


DAMAGES = {  # of the stored reranker vector of question 7
    "another text's digest": "UPDATE reranked SET digest = 'x', vector = zeroblob(length(vector)) WHERE id = 7",
    "wrong length": "UPDATE reranked SET vector = substr(vector, 1, 8) WHERE id = 7",
    "NaN": "UPDATE reranked SET vector = :nan WHERE id = 7",
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_stale_or_damaged_vector_is_encoded_again_and_its_neighbours_are_read_whole(
    tmp_path, texts, tiny_model, head_model, damage
):
    """A vector stored with another text's digest (whatever wrote it), of the wrong length, or holding a NaN is read
    as missing (the others read with it are not) and encoded again."""
    folder = tmp_path / "c"
    Collection.build(folder, texts[:50], tiny_model, rerank=head_model, rerank_now=True).close()
    nan = np.full(head_model.out_dim, np.nan, dtype=np.float32).tobytes()
    with sqlite3.connect(folder / DATABASE) as db:
        db.execute(DAMAGES[damage], {"nan": nan})
    with Collection.open(folder) as coll:
        stored = coll.stored_reranker_vectors()
        assert set(stored) == set(range(50)) - {7}
        for i in (6, 8):
            np.testing.assert_allclose(stored[i], head_model.encode([texts[i]])[0], atol=1e-5)
        coll.rerank_all()
        assert coll.reranker_encoded == 1 and coll.search([texts[7]], k=1)[0][0].id == 7
        assert set(assert_fresh(coll, expect_all=True)) == set(range(50))


def test_refusals(tmp_path, texts, tiny_model, head_model, tiny_model_dir):
    folder = tmp_path / "c"
    Collection.build(folder, texts[:20], tiny_model, rerank=head_model).close()
    with pytest.raises(DupqError, match="is reranked with the model at .* but the model at"):
        Collection.open(folder, rerank=tiny_model)
    with Collection.open(folder) as coll, pytest.raises(DupqError, match="candidates must be at least 1"):
        coll.search(["x"], candidates=0)
    (tmp_path / "q.txt").write_text("How do I learn Python?\n")
    said = cli("index", "build", tmp_path / "q.txt", "--out", tmp_path / "e", "--rerank-now")
    refused(said, "--rerank-now goes with --rerank MODEL")


def test_each_backend_keeps_a_rerankers_vectors_or_refuses_in_one_sentence(location, texts, tiny_model, head_model):
    if not Location.parse(location).backend().reranks:
        with pytest.raises(DupqError, match="cannot keep a reranker's vectors yet"):
            Collection.build(location, texts[:20], tiny_model, rerank=head_model)
        return
    with Collection.build(location, texts[:20], tiny_model, rerank=head_model) as coll:
        hits = coll.search(texts[:3], k=2)
        assert [row[0].id for row in hits] == [0, 1, 2] and hits[0][0].ranked_by == "reranker"
        assert_fresh(coll)


WRITER = """
import sys
from dupq.collection.collection import Collection, Location
folder, run, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
coll = Collection.open(folder)
n = 0
while True:  # writes of every kind, and searches that store reranker vectors, until killed
    for j, text in enumerate(texts):
        key = f"w{run}-{n}-{j}"
        coll.add([text], keys=[key])
        coll.search([text], k=5)
        if j % 3 == 0:
            coll.update(key, text=texts[(j + 7) % len(texts)] + f" {n}")
        if j % 5 == 0:
            coll.remove([key])
        print(n, j, flush=True)
    n += 1
"""


@pytest.mark.faults
def test_kill_9_mid_write_leaves_stored_vectors_equal_to_fresh(tmp_path, texts, tiny_model, head_model, head_model_dir):
    folder = tmp_path / "c"
    Collection.build(folder, texts[:100], tiny_model, rerank=head_model).close()
    for lines in (9, 41):  # killed at two moments of the loop
        kill_9_when([sys.executable, "-c", WRITER, str(folder), str(lines), *texts[100:160]], lines)
        with Collection.open(folder) as coll:
            stored = assert_fresh(coll)
            assert len(stored) > 0
            coll.search(texts[100:110], k=5)
            assert_fresh(coll)
